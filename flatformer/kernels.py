"""The compiled fast path: whole chunks of training steps (forward, hand-written backward,
cross-entropy and AdamW fused) in numba, one seed per task, seeds split over the cores.

model.py stays the readable reference and the oracle; this module computes the same numbers in
another order (to 1e-12, checked in tests). Why numba: a paper-2d step is ~60k floating-point
operations, so NumPy's per-call overhead (~100 small operations) and XLA's poor batching of
2-wide products both cost more than the arithmetic; a compiled loop per seed does not.

Layout. Each seed runs its chunk of steps alone, in private buffers, and the seeds are split
over the cores in blocks (threads; the kernels release the GIL), so a seed's numbers never
depend on how many threads ran or which seeds ran beside it.
Activations are stored feature-major, (features, N) with the N = B * T positions innermost:
every matrix product becomes contiguous multiply-adds over 64 positions, which fills the
vector lanes even at d_model 2. Weight gradients are dot products over positions, written
as reassociating reductions (`linear_back_w`, `dot`) so that they vectorize; their order is
fixed by the compiled code, so reruns are byte-identical.

Covered: any number of layers, heads and sizes, ReLU or GELU (tanh), pre-LayerNorm or none,
attention-only blocks (d_mlp = 0), optional Q/K/V biases, W_O, final LayerNorm and unembedding
bias. Anything else (`supports` says) trains on
the NumPy engine.
"""

from __future__ import annotations

import dataclasses
import math
import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

try:
    import numba
    from llvmlite import ir
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic
except ImportError:  # the NumPy engine does everything without it
    numba = None

from .config import GELU_C, LN_EPS, ModelConfig


# Where each parameter tensor starts in one seed's vector: the whole-model ones, then per layer.
GLOBAL = ("embed.W_E", "pos_embed.W_pos", "unembed.W_U", "unembed.b_U", "ln_final.w",
          "ln_final.b")
LAYER = ("ln1.w", "ln1.b", "attn.W_Q", "attn.W_K", "attn.W_V", "attn.b_Q", "attn.b_K",
         "attn.b_V", "attn.W_O", "ln2.w", "ln2.b", "mlp.W_in", "mlp.b_in", "mlp.W_out",
         "mlp.b_out")
(LN1W, LN1B, WQ, WK, WV, BQ, BK, BV, WO, LN2W, LN2B, WIN, BIN, WOUT, BOUT) = range(len(LAYER))
# The config fields the kernel reads; any other field must keep its default to be covered.
KNOWN_FIELDS = {"d_model", "n_heads", "d_head", "n_layers", "d_mlp", "n_ctx", "d_vocab",
                "act_fn", "normalization", "qkv_bias", "attn_out", "unembed_bias", "ln_final"}


def supports(cfg: ModelConfig) -> bool:
    """Whether the compiled path computes this architecture (else: the NumPy engine)."""
    if numba is None:
        return False
    defaults = ModelConfig()
    for field in dataclasses.fields(ModelConfig):
        if field.name not in KNOWN_FIELDS and getattr(cfg, field.name) != getattr(defaults,
                                                                                   field.name):
            return False
    known = set(GLOBAL) | {f"blocks.{i}.{n}" for i in range(cfg.n_layers) for n in LAYER}
    return (cfg.act_fn in ("relu", "gelu") and cfg.normalization in ("none", "pre_ln")
            and set(cfg.param_shapes()) <= known)


def preferred(cfg: ModelConfig, dtype) -> bool:
    """Whether the compiled path is the faster engine for this model: in float64, up to
    d_model 32 (measured: 3.5x NumPy's speed at d_model 16, half of it at 64, where NumPy's
    matrix products win; float32 is NumPy's)."""
    return supports(cfg) and np.dtype(dtype) == np.float64 and cfg.d_model <= 32


@lru_cache(maxsize=64)
def layout(cfg: ModelConfig):
    """Per tensor (start in one seed's vector, size), and the role offsets (-1: absent)."""
    starts, sizes, where, offset = [], [], {}, 0
    for name, shape in cfg.param_shapes().items():
        size = math.prod(shape)
        starts.append(offset)
        sizes.append(size)
        where[name] = offset
        offset += size
    glob = np.array([where.get(n, -1) for n in GLOBAL], dtype=np.int64)
    per_layer = np.array([[where.get(f"blocks.{i}.{n}", -1) for n in LAYER]
                          for i in range(cfg.n_layers)], dtype=np.int64)
    dims = np.array([cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab, cfg.n_ctx,
                     int(cfg.act_fn == "gelu")], dtype=np.int64)
    return (np.array(starts, dtype=np.int64), np.array(sizes, dtype=np.int64), glob, per_layer,
            dims)


if numba is not None:
    # error_model="numpy": a division by zero gives inf or NaN as IEEE says, where numba's
    # default tests every divisor first (and so keeps loops with a division out of vector
    # lanes: AdamW's, the softmax's); no divisor here is zero but in a diverged run.
    FAST = dict(cache=True, fastmath={"reassoc"}, nogil=True, error_model="numpy")
    EXACT = dict(cache=True, nogil=True, error_model="numpy")

    @intrinsic
    def as_float(typingctx, bits):
        """The float whose bit pattern is `bits`: an int64's float64, an int32's float32."""
        if bits not in (types.int64, types.int32):
            return None
        ty, llvm_ty = ((types.float64, ir.DoubleType()) if bits == types.int64 else
                       (types.float32, ir.FloatType()))
        return ty(bits), lambda context, builder, sig, args: builder.bitcast(args[0], llvm_ty)

    @intrinsic
    def borrowed(typingctx, x):
        """x, an array or a (nested) tuple of arrays, as arrays that own nothing (no meminfo):
        numba counts references to an array at every call and view with an atomic instruction
        (measured: 15% of a paper-2d step, ~375 counts, which its pruning pass leaves wherever a
        callee may raise), and skips the count of an array that owns nothing. Their memory is
        the owner's: use them only while the owner lives (a kernel's argument, or an array
        used after them)."""
        def lower(context, builder, ty, value):
            if isinstance(ty, types.Array):
                array = context.make_array(ty)(context, builder, value)
                array.meminfo = cgutils.get_null_value(array.meminfo.type)
                array.parent = cgutils.get_null_value(array.parent.type)
                return array._getvalue()
            if isinstance(ty, types.BaseTuple):
                for i, item in enumerate(ty):
                    value = builder.insert_value(
                        value, lower(context, builder, item, builder.extract_value(value, i)), i)
            return value
        return x(x), lambda context, builder, sig, args: lower(context, builder, sig.args[0],
                                                               args[0])

    @intrinsic
    def fma(typingctx, a, b, c):
        """a * b + c rounded once, in float64 or float32 (llvm.fma: the hardware's instruction
        where there is one, else exact in software, so the result never depends on the
        machine)."""
        if not (a == b == c and a in (types.float64, types.float32)):
            return None
        return a(a, a, a), lambda context, builder, sig, args: builder.fma(*args)

    LOG2E, LN2_HI, LN2_LO = 1.4426950408889634, 6.93147180369123816490e-01, \
        1.90821492927058770002e-10
    ROUND = 6755399441055744.0   # 1.5 * 2^52: adding and subtracting it rounds to an integer

    @njit(cache=True, inline="always")
    def exp(x):
        """e^x for x <= 0 (here: a value minus its row's maximum) within one unit in the last
        place of math.exp, in arithmetic the compiler can run in vector lanes (a call to the C
        library's exp cannot be): x = k ln 2 + r, |r| <= ln 2 / 2, e^r by its Taylor series to
        r^13 (the next term is below 1e-17) in Horner's scheme of fused multiply-adds (half the
        instructions of separate ones), 2^k from the exponent bits. Below -708 (a subnormal
        result) it gives 0; NaN stays NaN."""
        y = max(x, -708.0)
        k = (y * LOG2E + ROUND) - ROUND
        r = fma(-k, LN2_LO, fma(-k, LN2_HI, y))
        e = fma(fma(fma(1.0 / 6227020800.0, r, 1.0 / 479001600.0), r, 1.0 / 39916800.0), r,
                1.0 / 3628800.0)   # 1 / 13!, 1 / 12!, ...
        e = fma(fma(fma(fma(e, r, 1.0 / 362880.0), r, 1.0 / 40320.0), r, 1.0 / 5040.0), r,
                1.0 / 720.0)
        e = fma(fma(fma(fma(e, r, 1.0 / 120.0), r, 1.0 / 24.0), r, 1.0 / 6.0), r, 0.5)
        e = fma(fma(e, r, 1.0), r, 1.0)
        return e * as_float((np.int64(k) + 1023) << 52) if x >= -708.0 else \
            (x if x != x else 0.0)

    @njit(**FAST)
    def dot(a, b):
        acc = 0.0
        for i in range(a.shape[0]):
            acc += a[i] * b[i]
        return acc

    @njit(**FAST)
    def total(a):
        acc = 0.0
        for i in range(a.shape[0]):
            acc += a[i]
        return acc

    NO_ROWS = np.empty((0, 0))   # linear's base for sums from 0, linear_back_x's mask for none

    @njit(**EXACT)
    def linear(p, w, n_in, n_out, x, out, col0, stride, base, bias, relu):
        """out[col0 + o] = base[col0 + o] + sum_i W[i, o] x[i] + b[o] over positions, after a
        ReLU with `relu`: W[i, o] at p[w + i * stride + o] (stride lets one head's block of W_Q
        be read in place), b[o] at p[bias + o] (bias -1: none), base NO_ROWS for 0. Two inputs
        per pass over the row (an odd one alone in the first, plus 0 x[0]), the first pass
        assigning where there is no base, the bias and ReLU in the last: at these sizes a pass
        costs more than its arithmetic. Rows are indexed, not taken as views (arrays handed to
        a helper per row cost reference counting that outweighed the pass)."""
        N = x.shape[1]
        has_base = base.shape[0] > 0
        for o in range(n_out):
            r = col0 + o
            if has_base:
                for n in range(N):
                    out[r, n] = base[r, n]
            b = p[bias + o] if bias >= 0 else 0.0
            i = 0
            while i < n_in:   # a pass over inputs i and j
                j = i + 1 if i > 0 or n_in % 2 == 0 else i
                c0 = p[w + i * stride + o]
                c1 = p[w + j * stride + o] if j > i else 0.0
                last = j + 1 == n_in   # the bias (and ReLU) in the last pass only: adding
                if i == 0 and not has_base:   # 0.0 in the others made a product 5% slower
                    if relu and last:
                        for n in range(N):
                            a = (c0 * x[i, n] + c1 * x[j, n]) + b
                            out[r, n] = a if a > 0.0 else 0.0
                    elif last:
                        for n in range(N):
                            out[r, n] = (c0 * x[i, n] + c1 * x[j, n]) + b
                    else:
                        for n in range(N):
                            out[r, n] = c0 * x[i, n] + c1 * x[j, n]
                elif relu and last:
                    for n in range(N):
                        a = ((out[r, n] + c0 * x[i, n]) + c1 * x[j, n]) + b
                        out[r, n] = a if a > 0.0 else 0.0
                elif last:
                    for n in range(N):
                        out[r, n] = ((out[r, n] + c0 * x[i, n]) + c1 * x[j, n]) + b
                else:
                    for n in range(N):
                        out[r, n] = (out[r, n] + c0 * x[i, n]) + c1 * x[j, n]
                i = j + 1

    @njit(**EXACT)
    def linear_back_x(p, w, n_in, n_out, dout, col0, stride, dx, relu_of, first):
        """dx[i] += sum_o W[i, o] dout[col0 + o] (with `first`: dx[i] = the sum), kept only
        where relu_of[i] > 0 (relu_of NO_ROWS: everywhere). Two outputs per pass over the row
        (an odd one alone in the first, as in `linear`), the mask in the last."""
        N = dout.shape[1]
        mask = relu_of.shape[0] > 0
        for i in range(n_in):
            o = 0
            while o < n_out:   # a pass over outputs o and q
                q = o + 1 if o > 0 or n_out % 2 == 0 else o
                c0 = p[w + i * stride + o]
                c1 = p[w + i * stride + q] if q > o else 0.0
                masked = mask and q + 1 == n_out
                if o == 0 and first:
                    if masked:
                        for n in range(N):
                            a = c0 * dout[col0 + o, n] + c1 * dout[col0 + q, n]
                            dx[i, n] = a if relu_of[i, n] > 0.0 else 0.0
                    else:
                        for n in range(N):
                            dx[i, n] = c0 * dout[col0 + o, n] + c1 * dout[col0 + q, n]
                elif masked:
                    for n in range(N):
                        a = (dx[i, n] + c0 * dout[col0 + o, n]) + c1 * dout[col0 + q, n]
                        dx[i, n] = a if relu_of[i, n] > 0.0 else 0.0
                else:
                    for n in range(N):
                        dx[i, n] = (dx[i, n] + c0 * dout[col0 + o, n]) + c1 * dout[col0 + q, n]
                o = q + 1

    @njit(**FAST)
    def linear_back_w(g, w, n_in, n_out, x, dout, col0, stride, bias):
        """dW[i, o] = sum_n x[i, n] dout[col0 + o, n], and with bias >= 0 db[o] = sum_n
        dout[col0 + o, n] at g[bias + o]: two inputs and the bias sum in one pass over the
        rows (reductions that reassociate, so that they vectorize)."""
        N = x.shape[1]
        i = n_in % 2
        if i:
            for o in range(n_out):
                acc, acc_b = 0.0, 0.0
                for n in range(N):
                    acc += x[0, n] * dout[col0 + o, n]
                    acc_b += dout[col0 + o, n]
                g[w + o] = acc
                if bias >= 0:
                    g[bias + o] = acc_b
        for i in range(i, n_in, 2):
            for o in range(n_out):
                acc0, acc1, acc_b = 0.0, 0.0, 0.0
                for n in range(N):
                    acc0 += x[i, n] * dout[col0 + o, n]
                    acc1 += x[i + 1, n] * dout[col0 + o, n]
                    acc_b += dout[col0 + o, n]
                g[w + i * stride + o] = acc0
                g[w + (i + 1) * stride + o] = acc1
                if bias >= 0 and i == 0:
                    g[bias + o] = acc_b

    @njit(**EXACT)
    def copy(x, out):
        """out[:] = x for 2-D arrays, in a loop: numba's slice assignment allocates a temporary
        when the two might overlap, which costs more than the copy at these sizes."""
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = x[i, j]

    @njit(**EXACT)
    def add_to(out, x):
        """out += x for 2-D arrays, in place."""
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] += x[i, j]

    @njit(**EXACT)
    def layer_norm(p, w, b, x, xhat, scale, out):
        """TransformerLens's LayerNorm over the feature axis of x (d, N)."""
        d, N = x.shape
        for n in range(N):
            mean = 0.0
            for i in range(d):
                mean += x[i, n]
            mean /= d
            var = 0.0
            for i in range(d):
                c = x[i, n] - mean
                xhat[i, n] = c
                var += c * c
            scale[n] = math.sqrt(var / d + LN_EPS)
        for i in range(d):
            for n in range(N):
                xhat[i, n] /= scale[n]
                out[i, n] = xhat[i, n] * p[w + i] + p[b + i]

    @njit(**EXACT)
    def layer_norm_back(p, g, w, b, dy, xhat, scale, dx):
        """dx = the gradient through LayerNorm of dy (d, N); writes gain and bias gradients."""
        d, N = dy.shape
        for i in range(d):
            g[w + i] = dot(dy[i], xhat[i])
            g[b + i] = total(dy[i])
        for n in range(N):
            m1 = 0.0
            m2 = 0.0
            for i in range(d):
                dxh = dy[i, n] * p[w + i]
                m1 += dxh
                m2 += dxh * xhat[i, n]
            m1 /= d
            m2 /= d
            for i in range(d):
                dx[i, n] = (dy[i, n] * p[w + i] - m1 - xhat[i, n] * m2) / scale[n]

    @njit(**EXACT)
    def attention(q, k, v, pat, z, H, dh, rows):
        """Causal softmax attention per window and head; q, k, v, z are (H * dh, N). The
        pattern pat (H, T, N) holds at [h, e, n] the weight of key n - e for the query n (0
        where e reaches past the window's start), so that every loop runs along the positions,
        in vector lanes. rows: (4, N) of scratch, rows[3] each position's index in its window.
        attention_at computes the same operations for one query a window."""
        T, N = pat.shape[1], pat.shape[2]
        inv = 1.0 / math.sqrt(dh)
        top, norm, pos = rows[0], rows[1], rows[3]
        for h in range(H):
            for e in range(T):
                row = pat[h, e]
                for j in range(dh):   # through views: k[j, n - e] would not vectorize (a
                    rs, qs, ks = row[e:], q[h * dh + j, e:], k[h * dh + j, :N - e]   # negative
                    if j == 0:                        # index wraps around, a select per n)
                        for n in range(N - e):
                            rs[n] = qs[n] * ks[n]
                    else:
                        for n in range(N - e):
                            rs[n] += qs[n] * ks[n]
                for n in range(N):   # whole rows: faster than fused into the shorter rows above
                    row[n] = row[n] * inv if pos[n] >= e else -np.inf
            for n in range(N):
                top[n] = pat[h, 0, n]
            for e in range(1, T):
                row = pat[h, e]
                for n in range(N):
                    top[n] = row[n] if row[n] > top[n] else top[n]
            norm[:] = 0.0
            for e in range(T):
                row = pat[h, e]
                for n in range(N):
                    row[n] = exp(row[n] - top[n])   # exp(-inf) = 0 past the window's start
                    norm[n] += row[n]
            for n in range(N):
                norm[n] = 1.0 / norm[n]
            for e in range(T):
                row = pat[h, e]
                for n in range(N):
                    row[n] *= norm[n]
            for j in range(dh):
                zj, vj = z[h * dh + j], v[h * dh + j]
                for e in range(T):   # e = 0 covers every position: it assigns
                    zs, ps, vs = zj[e:], pat[h, e, e:], vj[:N - e]
                    if e == 0:
                        for n in range(N):
                            zs[n] = ps[n] * vs[n]
                    else:
                        for n in range(N - e):
                            zs[n] += ps[n] * vs[n]

    @njit(**EXACT)
    def attention_back(q, k, v, pat, dz, dq, dk, dv, dpat, H, dh, rows):
        """Through `attention`: dq, dk, dv from dz, all (H * dh, N); dpat (T, N) and rows (4,
        N) of scratch. Every loop runs along the positions (key n - e of the query n)."""
        T, N = pat.shape[1], pat.shape[2]
        inv = 1.0 / math.sqrt(dh)
        mix = rows[0]
        for h in range(H):
            for e in range(T):   # dloss/dpattern
                for n in range(e):
                    dpat[e, n] = 0.0
                for j in range(dh):
                    ds, dzs, vs = dpat[e, e:], dz[h * dh + j, e:], v[h * dh + j, :N - e]
                    if j == 0:
                        for n in range(N - e):
                            ds[n] = dzs[n] * vs[n]
                    else:
                        for n in range(N - e):
                            ds[n] += dzs[n] * vs[n]
            for e in range(T):
                row, drow = pat[h, e], dpat[e]
                if e == 0:
                    for n in range(N):
                        mix[n] = drow[n] * row[n]
                else:
                    for n in range(N):
                        mix[n] += drow[n] * row[n]
            for e in range(T):   # dloss/dscore, in place
                row, drow = pat[h, e], dpat[e]
                for n in range(N):
                    drow[n] = row[n] * (drow[n] - mix[n]) * inv
            for j in range(dh):
                qj, kj, dzj = q[h * dh + j], k[h * dh + j], dz[h * dh + j]
                dqj, dkj, dvj = dq[h * dh + j], dk[h * dh + j], dv[h * dh + j]
                for e in range(T):   # e = 0 covers every position: it assigns
                    ps, ds, qs, dzs, dqs = pat[h, e, e:], dpat[e, e:], qj[e:], dzj[e:], dqj[e:]
                    ks, dks, dvs = kj[:N - e], dkj[:N - e], dvj[:N - e]
                    if e == 0:
                        for n in range(N):
                            dvs[n] = ps[n] * dzs[n]
                            dqs[n] = ds[n] * ks[n]
                            dks[n] = ds[n] * qs[n]
                    else:
                        for n in range(N - e):
                            dvs[n] += ps[n] * dzs[n]
                            dqs[n] += ds[n] * ks[n]
                            dks[n] += ds[n] * qs[n]

    @njit(**EXACT)
    def buffers(dims, L, B, T):
        """One seed's activations and gradients of activations, reused by every step. The last,
        (4, N), is per-position scratch for the softmaxes (attention's, then the loss's), its
        row 3 each position's index in its window."""
        d, H, m, V = dims[0], dims[1], dims[3], dims[4]
        N, hd = B * T, dims[1] * dims[2]
        rows = np.empty((4, N))
        for n in range(N):
            rows[3, n] = n % T
        return (np.empty((L + 1, d, N)), np.empty((L, d, N)), np.empty((L, d, N)),
                np.empty((L, d, N)), np.empty((L, d, N)), np.empty((L, N)),
                np.empty((L, d, N)), np.empty((L, N)), np.empty((L, 3, hd, N)),
                np.empty((L, H, T, N)), np.empty((L, hd, N)), np.empty((L, m, N)),
                np.empty((L, m, N)), np.empty((V, N)), np.empty((d, N)), np.empty((d, N)),
                np.empty((hd, N)), np.empty((3, hd, N)), np.empty((m, N)), np.empty((T, N)),
                np.empty((d, N)), np.empty(N), np.empty((d, N)), rows)

    @njit(**EXACT)
    def mlp_forward(p, o, gelu, x, h2, s2, m_in, pre, post, out):
        """out = x + W_out act(W_in ln2(x) + b_in) + b_out over the columns of x (d, N)."""
        d, N = x.shape
        m = pre.shape[0]
        y = x
        if o[LN2W] >= 0:
            layer_norm(p, o[LN2W], o[LN2B], x, h2, s2, m_in)
            y = m_in
        if gelu:
            linear(p, o[WIN], d, m, y, pre, 0, m, NO_ROWS, o[BIN], False)
            for c in range(m):
                for n in range(N):
                    a = pre[c, n]
                    post[c, n] = 0.5 * a * (1.0 + math.tanh(GELU_C * (a + 0.044715 * a * a * a)))
        elif d == 2:   # ReLU at d_model 2 (the paper's): a pass per hidden unit
            relu_mlp_2(p, o, y, x, post, out)
            return
        else:   # ReLU: post > 0 wherever pre > 0, all the backward pass needs of pre
            linear(p, o[WIN], d, m, y, post, 0, m, NO_ROWS, o[BIN], True)
        linear(p, o[WOUT], m, d, post, out, 0, d, x, o[BOUT], False)

    @njit(**EXACT)
    def unembed_forward(p, glob, x, hf, sf, final, logits):
        """logits (V, N) = [ln_final](x) W_U [+ b_U] over the columns of x (d, N)."""
        d, V = x.shape[0], logits.shape[0]
        if glob[4] >= 0:
            layer_norm(p, glob[4], glob[5], x, hf, sf, final)
            x = final
        linear(p, glob[2], d, V, x, logits, 0, V, NO_ROWS, glob[3], False)

    @njit(**EXACT)
    def blocks_forward(p, tok, glob, lay, dims, B, T, bufs, whole):
        """Embedding and every block on tok (B, T); without `whole`, the last block stops
        after its queries, keys and values, at bufs[8][L - 1] (the rest is the caller's)."""
        (res, mid, a_in, m_in, h1, s1, h2, s2, qkv, pat, z, pre, post, _,
         _, _, _, _, _, _, _, _, _, _) = bufs
        d, H, dh, gelu = dims[0], dims[1], dims[2], dims[6]
        L, hd = lay.shape[0], dims[1] * dims[2]
        WE, WPOS = glob[0], glob[1]
        for b in range(B):
            for t in range(T):
                for i in range(d):
                    res[0, i, b * T + t] = p[WE + tok[b, t] * d + i] + p[WPOS + t * d + i]
        for l in range(L):
            o = lay[l]
            x = res[l]
            if o[LN1W] >= 0:
                layer_norm(p, o[LN1W], o[LN1B], x, h1[l], s1[l], a_in[l])
                x = a_in[l]
            for r in range(3):
                for h in range(H):
                    linear(p, o[WQ + r] + h * d * dh, d, dh, x, qkv[l, r], h * dh, dh, NO_ROWS,
                           o[BQ + r] + h * dh if o[BQ + r] >= 0 else -1, False)
            if l == L - 1 and not whole:
                return
            attention(qkv[l, 0], qkv[l, 1], qkv[l, 2], pat[l], z[l], H, dh, bufs[23])
            if o[WO] >= 0:
                linear(p, o[WO], hd, d, z[l], mid[l], 0, d, res[l], -1, False)
            else:
                copy(res[l], mid[l])
                add_to(mid[l], z[l])
            if o[WIN] < 0:   # attention-only block
                copy(mid[l], res[l + 1])
            else:
                mlp_forward(p, o, gelu, mid[l], h2[l], s2[l], m_in[l], pre[l], post[l],
                            res[l + 1])

    @njit(**EXACT)
    def forward_seed(p, tok, glob, lay, dims, B, T, bufs):
        """One seed's forward pass on tok (B, T): the logits land in bufs[13] as (V, N)."""
        blocks_forward(p, tok, glob, lay, dims, B, T, bufs, True)
        unembed_forward(p, glob, bufs[0][lay.shape[0]], bufs[20], bufs[21], bufs[22], bufs[13])

    @njit(**EXACT)
    def attention_at(q, k, v, at, z, T, H, dh, sc, rows):
        """`attention`'s output at the query position at[b] of each window b only, into z
        (H * dh, B), operation for operation (the keys past a window's start add exact zeros
        there, nothing here), in vector lanes over the windows; sc (T, >= B) and rows (2, >= B)
        of scratch."""
        B = at.shape[0]
        inv = 1.0 / math.sqrt(dh)
        top, norm = rows[0], rows[1]
        for h in range(H):
            for e in range(T):   # the scores of key n - e, gathered
                for b in range(B):
                    n = b * T + at[b]
                    s = 0.0
                    for j in range(dh):
                        s += q[h * dh + j, n] * k[h * dh + j, max(n - e, 0)]
                    sc[e, b] = s * inv if at[b] >= e else -np.inf
            for b in range(B):
                top[b] = sc[0, b]
            for e in range(1, T):
                for b in range(B):
                    top[b] = sc[e, b] if sc[e, b] > top[b] else top[b]
            norm[:B] = 0.0
            for e in range(T):
                for b in range(B):
                    sc[e, b] = exp(sc[e, b] - top[b])
                    norm[b] += sc[e, b]
            for b in range(B):
                norm[b] = 1.0 / norm[b]
            for e in range(T):
                for b in range(B):
                    sc[e, b] *= norm[b]
            for j in range(dh):
                for b in range(B):
                    n, acc = b * T + at[b], 0.0
                    for e in range(at[b] + 1):
                        acc += sc[e, b] * v[h * dh + j, n - e]
                    z[h * dh + j, b] = acc

    @njit(**EXACT)
    def forward_at(p, tok, at, glob, lay, dims, B, T, bufs, one):
        """The logits at position at[b] of each window b only, into one[13] (V, B): the last
        block reads its queries, and everything after them, at just those positions (causal
        attention: the positions after at[b] change nothing), in buffers `one` for B windows
        of 1 token. Each column's arithmetic is forward_seed's, so the numbers are the same."""
        blocks_forward(p, tok, glob, lay, dims, B, T, bufs, False)
        L, H, dh, gelu = lay.shape[0], dims[1], dims[2], dims[6]
        o, qkv, res = lay[L - 1], bufs[8][L - 1], bufs[0][L - 1]
        z, at_res, at_mid, out = one[10][0], one[0][0], one[1][0], one[0][1]
        attention_at(qkv[0], qkv[1], qkv[2], at, z, T, H, dh, bufs[19], bufs[23])
        for i in range(res.shape[0]):
            for b in range(B):
                at_res[i, b] = res[i, b * T + at[b]]
        if o[WO] >= 0:
            linear(p, o[WO], H * dh, res.shape[0], z, at_mid, 0, res.shape[0], at_res, -1,
                   False)
        else:
            copy(at_res, at_mid)
            add_to(at_mid, z)
        if o[WIN] < 0:
            copy(at_mid, out)
        else:
            mlp_forward(p, o, gelu, at_mid, one[6][0], one[7][0], one[3][0], one[11][0],
                        one[12][0], out)
        unembed_forward(p, glob, out, one[20], one[21], one[22], one[13])

    @njit(**EXACT)
    def softmax_rows(logits, top, norm):
        """Over the columns n of logits (V, N): top[n] its largest entry, logits[:, n]
        overwritten by exp(logits - top), norm[n] their sum (in the order of v, as the NumPy
        engine); every loop runs along the positions, in vector lanes."""
        V = logits.shape[0]
        for n in range(top.shape[0]):
            top[n] = logits[0, n]
        for v in range(1, V):
            for n in range(top.shape[0]):
                top[n] = max(top[n], logits[v, n])
        norm[:] = 0.0
        for v in range(V):
            for n in range(top.shape[0]):
                e = exp(logits[v, n] - top[n])
                logits[v, n] = e
                norm[n] += e

    @njit(**EXACT)
    def loss_and_dlogits(logits, tgt, wt, B, T, rows):
        """Weighted mean cross-entropy; overwrites the logits (V, N) with dloss/dlogits. rows:
        (3, N) of scratch."""
        V = logits.shape[0]
        weight = 0.0
        for b in range(B):
            for t in range(T):
                weight += wt[b, t]
        weight = max(weight, 1.0)
        top, norm, picked = rows[0], rows[1], rows[2]
        for b in range(B):
            for t in range(T):
                picked[b * T + t] = logits[tgt[b, t], b * T + t]
        softmax_rows(logits, top, norm)
        loss = 0.0
        for b in range(B):
            for t in range(T):
                n = b * T + t
                loss += (math.log(norm[n]) - (picked[n] - top[n])) * wt[b, t]
                picked[n] = wt[b, t] / weight   # now each position's scale,
                norm[n] = picked[n] / norm[n]   # and the factor of its exponentials
        for v in range(V):   # one division a position, not one per logit
            for n in range(B * T):
                logits[v, n] *= norm[n]
        for b in range(B):
            for t in range(T):
                logits[tgt[b, t], b * T + t] -= picked[b * T + t]
        return loss / weight

    @njit(**EXACT)
    def mlp_back(p, g, o, l, gelu, mid, m_in, h2, s2, pre, post, dres, dmid, dpre):
        """Through block l's MLP, h = z + W_out act(W_in ln2(z) + b_in) + b_out: adds
        dloss/dz to dres and writes the MLP's (and ln2's) parameter gradients."""
        d = dres.shape[0]
        x = m_in[l] if o[LN2W] >= 0 else mid[l]
        if d == 2 and not gelu:
            relu_mlp_2_back(p, g, o, x, post[l], dres, dmid)
        else:
            general_mlp_back(p, g, o, l, gelu, x, pre, post, dres, dmid, dpre)
        if o[LN2W] >= 0:
            layer_norm_back(p, g, o[LN2W], o[LN2B], dmid, h2[l], s2[l], dmid)
        add_to(dres, dmid)

    @njit(**EXACT)
    def general_mlp_back(p, g, o, l, gelu, x, pre, post, dres, dmid, dpre):
        """mlp_back's product passes, from dres to dmid (before ln2) through block l's
        activation (x: the MLP's input)."""
        d, N = dres.shape
        m = dpre.shape[0]
        linear_back_w(g, o[WOUT], m, d, post[l], dres, 0, d, o[BOUT])
        linear_back_x(p, o[WOUT], m, d, dres, 0, d, dpre, NO_ROWS if gelu else post[l], True)
        if gelu:
            for c in range(m):
                for n in range(N):
                    a = pre[l, c, n]
                    th = math.tanh(GELU_C * (a + 0.044715 * a * a * a))
                    dpre[c, n] *= (0.5 * (1.0 + th) + 0.5 * a * (1.0 - th * th) * GELU_C
                                   * (1.0 + 3.0 * 0.044715 * a * a))
        linear_back_w(g, o[WIN], d, m, x, dpre, 0, m, o[BIN])
        linear_back_x(p, o[WIN], d, m, dpre, 0, m, dmid, NO_ROWS, True)

    @njit(**EXACT)
    def relu_mlp_2(p, o, x, base, post, out):
        """out = base + b_out + W_out relu(W_in x + b_in) at d_model 2 (x, base, out (2, N)),
        one pass over the positions per hidden unit c (its W_in column and W_out row
        together): at d_mlp 32, 33 passes where linear's make 66."""
        N, m = x.shape[1], post.shape[0]
        win, bin_, wout, bout = o[WIN], o[BIN], o[WOUT], o[BOUT]
        for i in range(2):
            b = p[bout + i] if bout >= 0 else 0.0
            for n in range(N):
                out[i, n] = base[i, n] + b
        for c in range(m):
            w0, w1, v0, v1 = p[win + c], p[win + m + c], p[wout + 2 * c], p[wout + 2 * c + 1]
            b = p[bin_ + c] if bin_ >= 0 else 0.0
            for n in range(N):
                a = (w0 * x[0, n] + w1 * x[1, n]) + b
                h = a if a > 0.0 else 0.0
                post[c, n] = h
                out[0, n] += v0 * h
                out[1, n] += v1 * h

    @njit(**FAST)
    def relu_mlp_2_back(p, g, o, x, post, dres, dmid):
        """Through relu_mlp_2: dmid = dloss/dx from dres = dloss/dout, and the gradients of
        W_in, b_in, W_out, b_out, one pass per hidden unit c (the four product passes of
        general_mlp_back together, dloss/dpre[c] kept in registers): 32 passes at d_mlp 32
        where they make 128."""
        N, m = x.shape[1], post.shape[0]
        win, bin_, wout, bout = o[WIN], o[BIN], o[WOUT], o[BOUT]
        if bout >= 0:
            g[bout], g[bout + 1] = total(dres[0]), total(dres[1])
        for c in range(m):
            w0, w1, v0, v1 = p[win + c], p[win + m + c], p[wout + 2 * c], p[wout + 2 * c + 1]
            gv0, gv1, gw0, gw1, gb = 0.0, 0.0, 0.0, 0.0, 0.0
            for n in range(N):
                h = post[c, n]
                gv0 += h * dres[0, n]
                gv1 += h * dres[1, n]
                dp = v0 * dres[0, n] + v1 * dres[1, n] if h > 0.0 else 0.0
                gw0 += x[0, n] * dp
                gw1 += x[1, n] * dp
                gb += dp
                dmid[0, n] = w0 * dp + (dmid[0, n] if c else 0.0)
                dmid[1, n] = w1 * dp + (dmid[1, n] if c else 0.0)
            g[wout + 2 * c], g[wout + 2 * c + 1], g[win + c], g[win + m + c] = gv0, gv1, gw0, gw1
            if bin_ >= 0:
                g[bin_ + c] = gb

    @njit(**EXACT)
    def backward_seed(p, g, tok, glob, lay, dims, B, T, bufs):
        """Gradient of the loss into g, given dloss/dlogits in bufs[13] after forward_seed."""
        (res, mid, a_in, m_in, h1, s1, h2, s2, qkv, pat, z, pre, post, dlogits,
         dres, dmid, dz, dqkv, dpre, dpat, hf, sf, final, rows) = bufs
        d, H, dh, V, n_ctx, gelu = dims[0], dims[1], dims[2], dims[4], dims[5], dims[6]
        L, hd = lay.shape[0], dims[1] * dims[2]
        WE, WPOS, WU, BU, LNFW, LNFB = glob[0], glob[1], glob[2], glob[3], glob[4], glob[5]
        linear_back_w(g, WU, d, V, final if LNFW >= 0 else res[L], dlogits, 0, V, BU)
        linear_back_x(p, WU, d, V, dlogits, 0, V, dres, NO_ROWS, True)
        if LNFW >= 0:
            layer_norm_back(p, g, LNFW, LNFB, dres, hf, sf, dres)
        for l in range(L - 1, -1, -1):
            o = lay[l]
            if o[WIN] >= 0:   # else an attention-only block
                mlp_back(p, g, o, l, gelu, mid, m_in, h2, s2, pre, post, dres, dmid, dpre)
            # Attention: z = e + concat_h(softmax(q k^T / sqrt(dh)) v) [W_O]
            if o[WO] >= 0:
                linear_back_w(g, o[WO], hd, d, z[l], dres, 0, d, -1)
                linear_back_x(p, o[WO], hd, d, dres, 0, d, dz, NO_ROWS, True)
            else:
                copy(dres, dz)
            attention_back(qkv[l, 0], qkv[l, 1], qkv[l, 2], pat[l], dz, dqkv[0], dqkv[1],
                           dqkv[2], dpat, H, dh, rows)
            x = a_in[l] if o[LN1W] >= 0 else res[l]
            for r in range(3):
                for h in range(H):
                    linear_back_w(g, o[WQ + r] + h * d * dh, d, dh, x, dqkv[r], h * dh, dh,
                                  o[BQ + r] + h * dh if o[BQ + r] >= 0 else -1)
                    linear_back_x(p, o[WQ + r] + h * d * dh, d, dh, dqkv[r], h * dh, dh, dmid,
                                  NO_ROWS, r == 0 and h == 0)
            if o[LN1W] >= 0:
                layer_norm_back(p, g, o[LN1W], o[LN1B], dmid, h1[l], s1[l], dmid)
            add_to(dres, dmid)
        g[WPOS:WPOS + n_ctx * d] = 0.0
        g[WE:WE + V * d] = 0.0
        for b in range(B):
            for t in range(T):
                for i in range(d):
                    g[WPOS + t * d + i] += dres[i, b * T + t]
                    g[WE + tok[b, t] * d + i] += dres[i, b * T + t]

    @njit(**EXACT)
    def gather(flat, starts, sizes, S, s, out):
        for j in range(starts.shape[0]):
            src = S * starts[j] + s * sizes[j]
            out[starts[j]:starts[j] + sizes[j]] = flat[src:src + sizes[j]]

    @njit(**EXACT)
    def scatter(vec, starts, sizes, S, s, flat):
        for j in range(starts.shape[0]):
            dst = S * starts[j] + s * sizes[j]
            flat[dst:dst + sizes[j]] = vec[starts[j]:starts[j] + sizes[j]]

    @njit(**EXACT)
    def windows(text, target, source, counted, drop_unseen, at, tokens, targets, weights):
        """data.Corpus.windows of the windows starting at `at` (B,), into (B, T) arrays:
        inputs, targets and loss weights (counted: empty when every target counts)."""
        B, T = tokens.shape
        for b in range(B):
            start = at[b]
            for t in range(T):
                pos = start + t + 1
                tokens[b, t] = text[pos - 1]
                targets[b, t] = text[pos]
                w = 1.0 if counted.shape[0] == 0 or counted[pos] else 0.0
                if drop_unseen and target[pos] >= 0 and source[pos] < start:
                    w = 0.0   # the rule's source lies before the window: no model can see it
                weights[b, t] = w

    @njit(**EXACT)
    def train_chunk(flat, starts, sizes, glob, lay, dims, m_flat, v_flat, text, target, source,
                    counted, drop_unseen, at, decay, step_size, bc2, b1c, b2, b2c, eps,
                    loss_sum, bad, lo, hi):
        """K AdamW steps for seeds lo..hi-1 of S. flat/m_flat/v_flat hold S seeds tensor-major
        (as model.Params); each step's windows start at at[k, s] (B,) in a corpus (text,
        target, source, counted as data.Corpus's); decay, step_size and bc2 are the per-step
        scalars of optim.AdamW. Adds each step's loss to loss_sum; a seed whose loss is not
        finite stops there, before its update, with the step's index in bad."""
        K, S, B = at.shape
        T = dims[5]
        P = flat.shape[0] // S
        L = lay.shape[0]
        owned = (np.empty(P), np.empty(P), np.empty(P), np.empty(P), buffers(dims, L, B, T),
                 np.empty((B, T), np.int64), np.empty((B, T), np.int64), np.empty((B, T)))
        flat, m_flat, v_flat, glob, lay, dims, text, target, source, counted, at = borrowed(
            (flat, m_flat, v_flat, glob, lay, dims, text, target, source, counted, at))
        for s in range(lo, hi):   # `owned` lives through the loop: it is used in every pass
            p, m, v, g, bufs, tokens, targets, weights = borrowed(owned)
            gather(flat, starts, sizes, S, s, p)
            gather(m_flat, starts, sizes, S, s, m)
            gather(v_flat, starts, sizes, S, s, v)
            for k in range(K):
                windows(text, target, source, counted, drop_unseen, at[k, s], tokens, targets,
                        weights)
                forward_seed(p, tokens, glob, lay, dims, B, T, bufs)
                loss = loss_and_dlogits(bufs[13], targets, weights, B, T, bufs[23])
                if not math.isfinite(loss):
                    bad[s] = k
                    break
                loss_sum[s] += loss
                backward_seed(p, g, tokens, glob, lay, dims, B, T, bufs)
                for i in range(P):   # optim.AdamW's arithmetic, operation for operation
                    p[i] *= decay[k]
                    m[i] += b1c * (g[i] - m[i])
                    v[i] *= b2
                    v[i] += b2c * g[i] * g[i]
                    p[i] -= step_size[k] * m[i] / (math.sqrt(v[i]) / bc2[k] + eps)
            scatter(p, starts, sizes, S, s, flat)
            scatter(m, starts, sizes, S, s, m_flat)
            scatter(v, starts, sizes, S, s, v_flat)

    @njit(**EXACT)
    def gradients(flat, starts, sizes, glob, lay, dims, tokens, targets, weights, loss, grad,
                  lo, hi):
        """Per-seed loss and gradient (tensor-major, as model.Params) on tokens (S, B, T)."""
        S, B, T = tokens.shape
        P = flat.shape[0] // S
        owned = np.empty(P), np.empty(P), buffers(dims, lay.shape[0], B, T)
        flat, glob, lay, dims, tokens, targets, weights = borrowed(
            (flat, glob, lay, dims, tokens, targets, weights))
        for s in range(lo, hi):   # as train_chunk's
            p, g, bufs = borrowed(owned)
            gather(flat, starts, sizes, S, s, p)
            forward_seed(p, tokens[s], glob, lay, dims, B, T, bufs)
            loss[s] = loss_and_dlogits(bufs[13], targets[s], weights[s], B, T, bufs[23])
            backward_seed(p, g, tokens[s], glob, lay, dims, B, T, bufs)
            scatter(g, starts, sizes, S, s, grad)

    @njit(**EXACT)
    def logits_kernel(flat, starts, sizes, glob, lay, dims, inputs, index, out, lo, hi):
        """Logits of windows shared by every seed, in groups (n_groups, G, T), for seeds
        lo..hi-1: out is (S, W, T * V), or with index (n_groups, G), (S, W, V) at that
        position of each window (W <= n_groups * G: the last group's padding is not written)."""
        n_groups, G, T = inputs.shape
        S, W = out.shape[0], out.shape[1]
        P = flat.shape[0] // S
        V = dims[4]
        owned = np.empty(P), buffers(dims, lay.shape[0], G, T), buffers(dims, 1, G, 1)
        flat, glob, lay, dims, inputs, index = borrowed((flat, glob, lay, dims, inputs, index))
        for s in range(lo, hi):   # as train_chunk's
            p, bufs, one = borrowed(owned)
            gather(flat, starts, sizes, S, s, p)
            for grp in range(n_groups):
                if index.shape[0]:
                    forward_at(p, inputs[grp], index[grp], glob, lay, dims, G, T, bufs, one)
                    for w in range(min(G, W - grp * G)):
                        for v in range(V):
                            out[s, grp * G + w, v] = one[13][v, w]
                    continue
                forward_seed(p, inputs[grp], glob, lay, dims, G, T, bufs)
                logits = bufs[13]
                for w in range(min(G, W - grp * G)):
                    for t in range(T):
                        for v in range(V):
                            out[s, grp * G + w, t * V + v] = logits[v, w * T + t]

    @njit(**EXACT)
    def evaluate_kernel(flat, starts, sizes, glob, lay, dims, val_in, val_tgt, val_wt, n_val,
                        rule_in, rule_at, allowed, n_rule, loss, err, lo, hi):
        """evaluate.evaluate's held-out loss and rule error for seeds lo..hi-1, without
        logits leaving the kernel: the weighted mean cross-entropy over n_val windows
        (groups (n_groups, G, T) as logits_kernel's), and the fraction of n_rule windows whose
        top prediction (the first largest logit, as argmax) at rule_at is not allowed."""
        S = loss.shape[0]
        G, T = val_in.shape[1], val_in.shape[2]
        P = flat.shape[0] // S
        V = dims[4]
        owned = np.empty(P), buffers(dims, lay.shape[0], G, T), buffers(dims, 1, G, 1)
        flat, glob, lay, dims, val_in, val_tgt, val_wt, rule_in, rule_at, allowed = borrowed(
            (flat, glob, lay, dims, val_in, val_tgt, val_wt, rule_in, rule_at, allowed))
        for s in range(lo, hi):   # as train_chunk's
            p, bufs, one = borrowed(owned)
            gather(flat, starts, sizes, S, s, p)
            total, weight = 0.0, 0.0
            for grp in range(val_in.shape[0] if n_val else 0):
                forward_seed(p, val_in[grp], glob, lay, dims, G, T, bufs)
                logits, top, norm, picked = bufs[13], bufs[23][0], bufs[23][1], bufs[23][2]
                for w in range(G):
                    for t in range(T):
                        picked[w * T + t] = logits[val_tgt[grp, w, t], w * T + t]
                softmax_rows(logits, top, norm)
                for w in range(min(G, n_val - grp * G)):
                    for t in range(T):
                        n = w * T + t
                        wt = val_wt[grp, w, t]
                        total += (math.log(norm[n]) - (picked[n] - top[n])) * wt
                        weight += wt
            loss[s] = total / max(weight, 1.0) if n_val else np.nan
            wrong = 0
            for grp in range(rule_in.shape[0] if n_rule else 0):
                forward_at(p, rule_in[grp], rule_at[grp], glob, lay, dims, G, T, bufs, one)
                logits = one[13]
                for w in range(min(G, n_rule - grp * G)):
                    best = 0
                    for v in range(V):
                        if math.isnan(logits[v, w]):
                            best = v
                            break
                        if logits[v, w] > logits[best, w]:
                            best = v
                    wrong += not allowed[grp * G + w, best]
            err[s] = wrong / n_rule if n_rule else np.nan


def threads() -> int:
    """Threads to split seeds over: the cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@lru_cache(maxsize=1)
def pool(n: int, pid: int) -> ThreadPoolExecutor:
    """One pool of n threads per process (a forked child gets its own: the parent's threads
    do not exist there). Starting threads on every call cost more than a chunk of steps."""
    return ThreadPoolExecutor(n, thread_name_prefix="flatformer-kernels")


def over_seeds(kernel, n_seeds: int, *args):
    """Run kernel(*args, lo, hi) over blocks of seeds on every core (the kernels release the
    GIL). A few blocks per thread, taken in turn, so that a thread slowed by other processes
    holds up less. Each seed's arithmetic is the same whichever thread runs it, and next to
    whichever seeds."""
    n = max(1, min(n_seeds, threads()))
    if n == 1:
        kernel(*args, 0, n_seeds)
        return
    blocks = min(n_seeds, 4 * n)
    bounds = [n_seeds * i // blocks for i in range(blocks + 1)]
    executor = pool(n, os.getpid())
    jobs = [executor.submit(kernel, *args, lo, hi) for lo, hi in zip(bounds, bounds[1:])]
    for job in jobs:
        job.result()


def _args(params):
    starts, sizes, glob, lay, dims = layout(params.cfg)
    return params.flat, starts, sizes, glob, lay, dims


def loss_and_gradients(params, tokens, targets, weights):
    """The compiled path's per-seed loss (S,) and gradient (a Params), as model.cross_entropy
    and model.backward would give them."""
    S = params.n_seeds
    loss, grads = np.empty(S), params.like()
    over_seeds(gradients, S, *_args(params), np.ascontiguousarray(tokens, dtype=np.int64),
               np.ascontiguousarray(targets, dtype=np.int64),
               np.ascontiguousarray(weights, dtype=np.float64), loss, grads.flat)
    return loss, grads


WINDOWS_PER_PASS = 64   # small enough for one seed's activations to stay in the cache


def groups(windows, dtype=np.int64):
    """(W, ...) -> (n_groups, WINDOWS_PER_PASS, ...), the last group padded with zeros."""
    G = WINDOWS_PER_PASS
    padded = np.zeros((-(-len(windows) // G) * G, *windows.shape[1:]), dtype=dtype)
    padded[:len(windows)] = windows
    return padded.reshape(-1, G, *windows.shape[1:])


def logits_at(params, inputs, index=None):
    """As evaluate.logits_at, compiled: (S, W, T, V), or (S, W, V) with `index`."""
    S, (W, T), V = params.n_seeds, inputs.shape, params.cfg.d_vocab
    if index is None:
        out = np.empty((S, W, T * V))
        over_seeds(logits_kernel, S, *_args(params), groups(inputs), np.empty((0, 0), np.int64),
                   out)
        return out.reshape(S, W, T, V)
    out = np.empty((S, W, V))
    over_seeds(logits_kernel, S, *_args(params), groups(inputs), groups(index), out)
    return out


def evaluate(params, data, with_loss: bool = True):
    """As evaluate.evaluate, compiled: per-seed held-out loss and rule error, each (S,)."""
    S = params.n_seeds
    loss, err = np.full(S, np.nan), np.full(S, np.nan)
    n_val = len(data.val_inputs) if with_loss else 0
    over_seeds(evaluate_kernel, S, *_args(params), groups(data.val_inputs),
               groups(data.val_targets), groups(data.val_weights, np.float64), n_val,
               groups(data.rule_inputs), groups(data.rule_index),
               np.ascontiguousarray(data.rule_allowed, dtype=np.bool_), len(data.rule_inputs),
               loss, err)
    return loss, err


def train_steps(params, opt, corpus, starts, drop_unseen: bool, lrs, loss_sum) -> np.ndarray:
    """K AdamW steps on params and an optim.AdamW, in place, with optim.AdamW's arithmetic:
    step k of seed s on the windows of `corpus` (a data.Corpus) starting at starts[k, s], as
    corpus.windows(starts, n_ctx, drop_unseen) gives them (built in the kernel); lrs (K,).
    Each step's loss is added to loss_sum (S,). Returns per seed the index of the first step
    whose loss was not finite, or -1."""
    b1, b2 = opt.betas
    ts = opt.t + 1 + np.arange(len(lrs))
    decay = np.array([1.0 - lr * opt.weight_decay for lr in lrs])
    step_size = np.array([lr / (1.0 - b1 ** int(t)) for lr, t in zip(lrs, ts)])
    bc2 = np.array([math.sqrt(1.0 - b2 ** int(t)) for t in ts])
    bad = np.full(params.n_seeds, -1, dtype=np.int64)
    counted = np.zeros(0, np.bool_) if corpus.counted is None else corpus.counted
    over_seeds(train_chunk, params.n_seeds, *_args(params), opt.m, opt.v,
               *(np.ascontiguousarray(a, dtype=np.int64) for a in (corpus.tokens,
                                                                    corpus.target,
                                                                    corpus.source)),
               np.ascontiguousarray(counted, dtype=np.bool_), bool(drop_unseen),
               np.ascontiguousarray(starts, dtype=np.int64), decay, step_size, bc2,
               1.0 - b1, b2, 1.0 - b2, opt.eps, loss_sum, bad)
    opt.t += len(lrs)
    return bad
