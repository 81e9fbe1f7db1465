"""The compiled float32 elementwise kernels (fused.py) against model.py's NumPy versions run in
float64, the reference."""

import math

import numpy as np
import pytest
from numba import njit

from flatformer.engine import fused, model
from flatformer.config import preset
from flatformer.engine.model import Params

RNG = np.random.default_rng(0)


@njit
def exp_all(x, out):
    for i in range(x.shape[0]):
        out[i] = fused.exp(x[i])


def f32(*arrays):
    return [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]


def close(got, want, scale=1.0):
    """float32's own rounding, a few units in the last place of the largest value."""
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * scale * max(np.abs(want).max(), 1))


def test_exp_within_one_unit_in_the_last_place_and_its_edges():
    x = np.linspace(-87, 88, 1_000_001, dtype=np.float32)
    out = np.empty_like(x)
    exp_all(x, out)
    want = np.exp(x.astype(np.float64))
    assert (np.abs(out - want) / np.spacing(want.astype(np.float32))).max() <= 1.0
    edges = np.array([0.0, -np.inf, -100.0, np.inf, 100.0, np.nan], np.float32)
    out = np.empty_like(edges)
    exp_all(edges, out)
    np.testing.assert_array_equal(out, [1.0, 0.0, 0.0, np.inf, np.inf, np.nan])


def test_gelu_forward_and_backward():
    pre = RNG.standard_normal((3, 50, 37)) * 4
    pre[0, 0, :4] = [0.0, -60.0, 60.0, 1e-3]
    post, t = model.gelu(pre)
    post32, t32 = fused.gelu(*f32(pre))
    close(post32, post)
    close(t32, t)
    assert post32[0, 0, 0] == 0.0 and post32[0, 0, 1] == 0.0 and post32[0, 0, 2] == 60.0
    dpost = RNG.standard_normal(pre.shape)
    close(
        fused.gelu_backward(*f32(dpost, pre, t)), model.gelu_backward(dpost.copy(), pre, t), scale=4
    )


def test_layer_norm_forward_and_backward():
    S, d = 2, 24
    x = RNG.standard_normal((S, 3, 5, d)) * 3 + 1
    w, b = RNG.standard_normal((S, d)), RNG.standard_normal((S, d))
    want = model.layer_norm(x, w, b)
    for got, ref in zip(fused.layer_norm(*f32(x, w, b)), want):
        close(got, ref)
    scale, xhat, _ = want
    dy = RNG.standard_normal(x.shape)
    cfg = preset("simulator-16d", 3, d_model=d)
    grads, grads32 = Params(cfg, S), Params(cfg, S, dtype=np.float32)
    dx = model.layer_norm_backward(dy.copy(), xhat, scale, w, grads, "blocks.0.ln1")
    dx32 = model.layer_norm_backward(*f32(dy, xhat, scale, w), grads32, "blocks.0.ln1")
    close(dx32, dx, scale=10)
    for name in ("blocks.0.ln1.w", "blocks.0.ln1.b"):
        close(grads32[name], grads[name], scale=10)


def test_softmax_forward_and_backward_masked_and_nan():
    T = 9
    scores = RNG.standard_normal((2, 3, 4, T, T)) * 8 + model.causal_bias(T, np.float64)
    scores[0, 0, 0, 4, :2] = np.nan
    want = model.softmax(scores.copy())
    got = fused.softmax(*f32(scores))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, 0, 0, 4]).all()
    fine = ~np.isnan(want)
    close(got[fine], want[fine])
    assert (got[..., 0, 1:] == 0).all() and (got[1, ..., 0, 0] == 1).all()
    scores[0, 0, 0, 4, :2] = 0.0
    pattern = model.softmax(scores.copy())
    dpattern = RNG.standard_normal(pattern.shape)
    close(
        fused.softmax_backward(*f32(dpattern, pattern), math.sqrt(8)),
        model.softmax_backward(dpattern.copy(), pattern, math.sqrt(8)),
    )


@pytest.mark.parametrize(
    "dtype, strided, compiled",
    [(np.float32, False, True), (np.float64, False, False), (np.float32, True, False)],
)
def test_only_contiguous_float32_takes_the_compiled_path(dtype, strided, compiled):
    x = np.zeros((4, 6), dtype)
    assert (model.fused_for(x[:, ::2] if strided else x) is fused) == compiled


@pytest.mark.parametrize("rows", [None, [2, 6]])
def test_attention_pattern_one_pass_has_the_separate_passes_bits(rows):
    """The compiled scale-mask-softmax pass gives the bits of model.forward's separate passes
    (float32 trains the grokking preset, whose checkpoints must not move)."""
    T = 7
    scores = (RNG.standard_normal((2, 3, 4, T if rows is None else 2, T)) * 5).astype(np.float32)
    mask = model.causal_bias(T, np.float32)
    mask = mask if rows is None else mask[rows]
    want = scores.copy()
    want /= math.sqrt(8)
    want += mask
    want_pattern = fused.softmax(want + mask)
    got, pattern = model.attention_pattern(scores.copy(), mask, math.sqrt(8))
    assert got.tobytes() == want.tobytes() and pattern.tobytes() == want_pattern.tobytes()
    # a hook sees the scaled, masked scores and may unmask them: masked again before the softmax
    seen = []
    _, hooked = model.attention_pattern(
        scores.copy(), mask, math.sqrt(8), lambda x: seen.append(x.copy()) or np.zeros_like(x)
    )
    assert seen[0].tobytes() == want.tobytes()
    assert (hooked[..., np.isinf(mask)] == 0).all()
    assert np.allclose(hooked.sum(-1), 1)
