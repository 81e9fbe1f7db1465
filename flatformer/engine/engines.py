"""The two engines behind one interface: the NumPy reference (model.py's forward and backward,
the components composed) and the compiled kernels (kernels/). Both take the same arguments and
give the same numbers (the compiled ones to 1e-12 of the reference's, in tests), so the
trainer, the evaluation and the views hold an Engine and call it; which one they hold is
decided once, in select.py.

What an engine needs of a run: the weights (a model.Params), an optim.AdamW, the training
corpus (a tasks.windows.Corpus) with each step's window starts, and the held-out windows
(a tasks.windows.TaskData). Neither keeps state between calls: a resumed run's snapshot is
all either needs to continue. The compiled engine also compiles its kernels on a cold start
(`prepare`, `warm`); the reference needs nothing first.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .model import cross_entropy, forward, backward, keep_freed_memory

# The reference evaluates in pieces of GROUP seeds x CHUNK windows: whole-set arrays are large
# enough that allocating them fresh each time (page faults) costs more than the arithmetic
# (measured: 2-3x).
GROUP, CHUNK = 16, 64
# ... and of at most CHUNK_TOKENS positions and PATTERN_ENTRIES attention weights (windows x
# heads x T^2, each layer's scores and pattern kept in the cache): a long context's windows 64
# at a time would hold (64 x 1,024 x vocabulary) logits at once (2 GB at a vocabulary of
# 4,000), and 4 windows of 1,024 with 8 heads 2.7 GB of patterns over 5 layers.
CHUNK_TOKENS = CHUNK * 64
PATTERN_ENTRIES = CHUNK * 4 * 64 * 64
# Seeds per held-out pass: memory stays flat in the number of seeds (1,024 seeds' held-out
# logits at once would take ~300 MB, and the loss several times that).
EVAL_SEEDS = 64


class Engine:
    """What every engine does. `name` is what --engine calls it."""

    name = ""

    def cold(self) -> bool:
        """Whether this engine compiles before its first step."""
        return False

    def prepare(self):
        """Before a job's first step (under the compile notice when `cold`)."""

    def warm(self, params, data):
        """Before the first step of a run that evaluates mid-way (choosing its candidates):
        whatever the evaluation compiles, done now, under the compile notice."""

    def train_steps(self, params, opt, corpus, starts, drop_unseen: bool, lrs, loss_sum):
        """K AdamW steps on params and opt (an optim.AdamW), in place: step k of seed s on the
        windows of `corpus` (a tasks.windows.Corpus) starting at starts[k, s], as
        corpus.windows(starts, n_ctx, drop_unseen) gives them; lrs (K,). Each step's loss is
        added to loss_sum (S,). Returns per seed the index of the first step whose loss was not
        finite, or -1."""
        raise NotImplementedError

    def evaluate(self, params, data, with_loss: bool = True):
        """Per-seed held-out loss and rule error, each (S,) (training.evaluate.evaluate says
        which windows)."""
        raise NotImplementedError

    def logits_at(self, params, inputs, index=None):
        """Logits (S, W, T, V) for windows (W, T) shared by every seed; with `index` (W,),
        only the logits at that position of each window, (S, W, V)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.name} engine>"


class Reference(Engine):
    """The NumPy reference: model.py's forward and backward pass, one step at a time, all
    seeds as one batched program; float64 or float32."""

    name = "numpy"

    def train_steps(self, params, opt, corpus, starts, drop_unseen: bool, lrs, loss_sum):
        bad = np.full(params.n_seeds, -1, dtype=np.int64)
        for k, lr in enumerate(lrs):
            (inputs,), (targets,), (weights,) = corpus.windows(
                starts[k : k + 1], params.cfg.n_ctx, drop_unseen
            )
            # Only the positions some loss weight reads need logits (e.g. the answer position).
            read = np.flatnonzero(weights.any((0, 1)))
            if len(read) < weights.shape[2]:
                targets, weights = targets[..., read], weights[..., read]
            else:
                read = None
            logits, cache = forward(params, inputs, read=read)
            loss, dlogits = cross_entropy(logits, targets, weights)
            if not np.all(np.isfinite(loss)):
                bad[~np.isfinite(loss)] = k
                return bad
            opt.step(backward(params, cache, dlogits).flat, lr)
            loss_sum += loss
        return bad

    def logits_at(self, params, inputs, index=None):
        keep_freed_memory()
        S, W = params.n_seeds, len(inputs)
        V = params.cfg.vocab_out
        if index is not None and params.cfg.causal:
            return self._logits_read(params, inputs, np.asarray(index))
        result = np.empty((S, W, V) if index is not None else (S, *inputs.shape, V))
        chunk = windows_per_chunk(inputs.shape[1], params.cfg.n_heads)
        for lo in range(0, S, GROUP):
            group = params.select(range(lo, min(lo + GROUP, S))) if S > GROUP else params
            for c in range(0, W, chunk):
                part = inputs[c : c + chunk]
                logits, _ = forward(group, np.broadcast_to(part, (group.n_seeds, *part.shape)))
                if index is not None:
                    logits = logits[:, np.arange(len(part)), index[c : c + chunk]]
                result[lo : lo + group.n_seeds, c : c + chunk] = logits
        return result

    def _logits_read(self, params, inputs, index):
        """logits_at's (S, W, V) at one position a window, for a causal model: what a position
        predicts depends on no later token, so each window is cut after its position and only
        that position is unembedded (forward's `read`), windows of one position together."""
        S, W = params.n_seeds, len(inputs)
        result = np.empty((S, W, params.cfg.vocab_out))
        for lo in range(0, S, GROUP):
            group = params.select(range(lo, min(lo + GROUP, S))) if S > GROUP else params
            seeds = slice(lo, lo + group.n_seeds)
            for at in np.unique(index):
                rows = np.flatnonzero(index == at)
                chunk = windows_per_chunk(at + 1, params.cfg.n_heads)
                for c in range(0, len(rows), chunk):
                    part = inputs[rows[c : c + chunk], : at + 1]
                    tokens = np.broadcast_to(part, (group.n_seeds, *part.shape))
                    logits, _ = forward(group, tokens, read=np.array([at]))
                    result[seeds, rows[c : c + chunk]] = logits[:, :, 0]
        return result

    def evaluate(self, params, data, with_loss: bool = True):
        S = params.n_seeds
        if S > EVAL_SEEDS:
            parts = [
                self.evaluate(params.select(range(lo, min(lo + EVAL_SEEDS, S))), data, with_loss)
                for lo in range(0, S, EVAL_SEEDS)
            ]
            return tuple(np.concatenate(values) for values in zip(*parts))
        loss, rule_error = np.full(S, np.nan), np.full(S, np.nan)
        if with_loss:
            logits = self.logits_at(params, data.val_inputs)
            targets = np.broadcast_to(data.val_targets, logits.shape[:-1])
            weights = np.broadcast_to(data.val_weights, targets.shape)
            loss = cross_entropy(logits, targets, weights)[0]
        if len(data.rule_targets):
            picked = self.logits_at(params, data.rule_inputs, data.rule_index)  # (S, R, V)
            top = picked.argmax(-1)  # (S, R)
            rule_error = (~data.rule_allowed[np.arange(len(top[0])), top]).mean(1)
        return loss, rule_error


class Compiled(Engine):
    """The compiled kernels (kernels/): a whole chunk of steps per call, one seed per thread,
    float64 only; compiled on first use (into numba's cache) unless the cache holds them."""

    name = "numba"

    def cold(self) -> bool:
        return kernels.cold()

    def prepare(self):
        if self.cold():
            kernels.compile_beside()

    def warm(self, params, data):
        # Reads the weights and changes nothing; it compiles the evaluation kernel now, under
        # the compile notice, rather than at the selection with the progress bar stopped.
        self.evaluate(params, data)

    def train_steps(self, params, opt, corpus, starts, drop_unseen: bool, lrs, loss_sum):
        return kernels.train_steps(params, opt, corpus, starts, drop_unseen, lrs, loss_sum)

    def evaluate(self, params, data, with_loss: bool = True):
        return kernels.evaluate(params, data, with_loss)  # no logits leave the kernel

    def logits_at(self, params, inputs, index=None):
        return kernels.logits_at(params, inputs, index)


def windows_per_chunk(T: int, heads: int = 1) -> int:
    """How many windows of T positions the reference evaluates at once (a model of `heads`
    heads a layer)."""
    T = max(T, 1)
    return max(1, min(CHUNK, CHUNK_TOKENS // T, PATTERN_ENTRIES // (heads * T * T)))


REFERENCE, COMPILED = Reference(), Compiled()
