"""The kernels Python calls (`drivers` does), one block of seeds lo..hi-1 each: a chunk of
AdamW training steps, per-seed losses and gradients, logits, and the held-out evaluation.
Each gathers a seed's parameters from the seed-batched buffers into private ones, runs its
passes there and scatters the results back."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from .intrinsics import EXACT, borrowed, njit
from .passes import buffers, forward_at, forward_seed, loss_and_dlogits, softmax_rows
from .passes import backward_seed


# The kernels' arguments beyond the model (a tensors.Layout), by name.
# A training corpus, as data.Corpus holds it, and whether to drop targets whose rule's source
# lies before the window (Recipe.drop_unseen).
Text = namedtuple("Text", ["tokens", "target", "source", "counted", "drop_unseen"])
# optim.AdamW's scalars for a chunk of K steps: per step the decay 1 - lr wd, the step size
# (scaled_lr) lr / (1 - b1^t) and sqrt(1 - b2^t) (each (K,)); then 1 - b1, b2, 1 - b2 and eps.
AdamSteps = namedtuple("AdamSteps", ["decay", "scaled_lr", "bc2", "b1c", "b2", "b2c", "eps"])
# The held-out set of data.TaskData, in groups (drivers.groups): the loss's n_val windows,
# targets and weights; the rule's n_rule windows, the position read in each and the tokens
# it allows.
HeldOut = namedtuple(
    "HeldOut",
    ["val_in", "val_tgt", "val_wt", "n_val", "rule_in", "rule_at", "allowed", "n_rule"],
)


@njit(**EXACT)
def gather(flat, starts, sizes, S, s, out):
    for j in range(starts.shape[0]):
        src = S * starts[j] + s * sizes[j]
        for i in range(sizes[j]):  # a loop: numba's slice assignment is a long compile
            out[starts[j] + i] = flat[src + i]


@njit(**EXACT)
def scatter(vec, starts, sizes, S, s, flat):
    for j in range(starts.shape[0]):
        dst = S * starts[j] + s * sizes[j]
        for i in range(sizes[j]):
            flat[dst + i] = vec[starts[j] + i]


@njit(**EXACT)
def windows(corpus, at, tokens, targets, weights):
    """data.Corpus.windows of the windows starting at `at` (B,) in `corpus` (a Text), into
    (B, T) arrays: inputs, targets and loss weights (counted: empty when every target
    counts)."""
    text, target, source, counted, drop_unseen = corpus
    B, T = tokens.shape
    for b in range(B):
        start = at[b]
        for t in range(T):
            pos = start + t + 1
            tokens[b, t] = text[pos - 1]
            targets[b, t] = text[pos]
            w = 1.0 if counted.shape[0] == 0 or counted[pos] else 0.0
            if drop_unseen and target[pos] >= 0 and source[pos] < start:
                w = 0.0  # the rule's source lies before the window: no model can see it
            weights[b, t] = w


@njit(**EXACT)
def train_chunk(flat, model, m_flat, v_flat, corpus, at, adam, loss_sum, bad, lo, hi):
    """K AdamW steps for seeds lo..hi-1 of S. flat/m_flat/v_flat hold S seeds tensor-major
    (as model.Params), laid out as `model` (a tensors.Layout) says; each step's windows start
    at at[k, s] (B,) in `corpus` (a Text); `adam` (AdamSteps) holds optim.AdamW's scalars.
    Adds each step's loss to loss_sum; a seed whose loss is not finite stops there, before
    its update, with the step's index in bad."""
    K, S, B = at.shape
    T = model.dims.n_ctx
    P = flat.shape[0] // S
    L = model.lay.shape[0]
    owned = (
        np.empty(P),
        np.empty(P),
        np.empty(P),
        np.empty(P),
        buffers(model.dims, L, B, T),
        np.empty((B, T), np.int64),
        np.empty((B, T), np.int64),
        np.empty((B, T)),
    )
    flat, m_flat, v_flat, model, corpus, at, adam = borrowed(
        (flat, m_flat, v_flat, model, corpus, at, adam)
    )
    starts, sizes, glob, lay, dims = model
    decay, scaled_lr, bc2, b1c, b2, b2c, eps = adam
    for s in range(lo, hi):  # `owned` lives through the loop: it is used in every pass
        p, m, v, g, bufs, tokens, targets, weights = borrowed(owned)
        gather(flat, starts, sizes, S, s, p)
        gather(m_flat, starts, sizes, S, s, m)
        gather(v_flat, starts, sizes, S, s, v)
        for k in range(K):
            windows(corpus, at[k, s], tokens, targets, weights)
            forward_seed(p, tokens, glob, lay, dims, B, T, bufs)
            loss = loss_and_dlogits(bufs.logits, targets, weights, B, T, bufs.rows)
            if not math.isfinite(loss):
                bad[s] = k
                break
            loss_sum[s] += loss
            backward_seed(p, g, tokens, glob, lay, dims, B, T, bufs)
            for i in range(P):  # optim.AdamW's arithmetic, operation for operation
                p[i] *= decay[k]
                m[i] += b1c * (g[i] - m[i])
                v[i] *= b2
                v[i] += b2c * g[i] * g[i]
                p[i] -= scaled_lr[k] * m[i] / (math.sqrt(v[i]) / bc2[k] + eps)
        scatter(p, starts, sizes, S, s, flat)
        scatter(m, starts, sizes, S, s, m_flat)
        scatter(v, starts, sizes, S, s, v_flat)


@njit(**EXACT)
def gradients(flat, model, tokens, targets, weights, loss, grad, lo, hi):
    """Per-seed loss and gradient (tensor-major, as model.Params) on tokens (S, B, T)."""
    S, B, T = tokens.shape
    P = flat.shape[0] // S
    owned = np.empty(P), np.empty(P), buffers(model.dims, model.lay.shape[0], B, T)
    flat, model, tokens, targets, weights = borrowed((flat, model, tokens, targets, weights))
    starts, sizes, glob, lay, dims = model
    for s in range(lo, hi):  # as train_chunk's
        p, g, bufs = borrowed(owned)
        gather(flat, starts, sizes, S, s, p)
        forward_seed(p, tokens[s], glob, lay, dims, B, T, bufs)
        loss[s] = loss_and_dlogits(bufs.logits, targets[s], weights[s], B, T, bufs.rows)
        backward_seed(p, g, tokens[s], glob, lay, dims, B, T, bufs)
        scatter(g, starts, sizes, S, s, grad)


@njit(**EXACT)
def logits_kernel(flat, model, inputs, index, out, lo, hi):
    """Logits of windows shared by every seed, in groups (n_groups, G, T), for seeds
    lo..hi-1: out is (S, W, T * V), or with index (n_groups, G), (S, W, V) at that
    position of each window (W <= n_groups * G: the last group's padding is not written)."""
    n_groups, G, T = inputs.shape
    S, W = out.shape[0], out.shape[1]
    P = flat.shape[0] // S
    V = model.dims.d_vocab_out
    owned = np.empty(P), buffers(model.dims, model.lay.shape[0], G, T), buffers(model.dims, 1, G, 1)
    flat, model, inputs, index = borrowed((flat, model, inputs, index))
    starts, sizes, glob, lay, dims = model
    for s in range(lo, hi):  # as train_chunk's
        p, bufs, one = borrowed(owned)
        gather(flat, starts, sizes, S, s, p)
        for grp in range(n_groups):
            if index.shape[0]:
                forward_at(p, inputs[grp], index[grp], glob, lay, dims, G, T, bufs, one)
                for w in range(min(G, W - grp * G)):
                    for v in range(V):
                        out[s, grp * G + w, v] = one.logits[v, w]
                continue
            forward_seed(p, inputs[grp], glob, lay, dims, G, T, bufs)
            logits = bufs.logits
            for w in range(min(G, W - grp * G)):
                for t in range(T):
                    for v in range(V):
                        out[s, grp * G + w, t * V + v] = logits[v, w * T + t]


@njit(**EXACT)
def evaluate_kernel(flat, model, held, loss, err, lo, hi):
    """evaluate.evaluate's held-out loss and rule error for seeds lo..hi-1, without
    logits leaving the kernel: the weighted mean cross-entropy over the n_val windows of
    `held` (a HeldOut, in groups (n_groups, G, T) as logits_kernel's), and the fraction of
    its n_rule windows whose top prediction (the first largest logit, as argmax) at rule_at
    is not allowed."""
    S = loss.shape[0]
    G, T = held.val_in.shape[1], held.val_in.shape[2]
    P = flat.shape[0] // S
    V = model.dims.d_vocab_out
    owned = np.empty(P), buffers(model.dims, model.lay.shape[0], G, T), buffers(model.dims, 1, G, 1)
    flat, model, held = borrowed((flat, model, held))
    starts, sizes, glob, lay, dims = model
    val_in, val_tgt, val_wt, n_val, rule_in, rule_at, allowed, n_rule = held
    for s in range(lo, hi):  # as train_chunk's
        p, bufs, one = borrowed(owned)
        gather(flat, starts, sizes, S, s, p)
        total, weight = 0.0, 0.0
        for grp in range(val_in.shape[0] if n_val else 0):
            forward_seed(p, val_in[grp], glob, lay, dims, G, T, bufs)
            logits, top, norm, picked = bufs.logits, bufs.rows[0], bufs.rows[1], bufs.rows[2]
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
            logits = one.logits
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
