"""A run's activations for a dictionary: token windows from its own data (training windows to
fit on, the held-out windows to score on), read at a named hook, one vector per token."""

from __future__ import annotations

import re

import numpy as np

from ..errors import FlatformerError

NOT_PER_TOKEN = ("hook_pattern", "hook_attn_scores")
MAX_TOKENS = 50_000  # training tokens held in memory: 50,000 x d_model float64
MAX_EVAL_TOKENS = 100_000  # held-out tokens scored (every held-out window of a small model)


def windows(run, n_train: int = 2000) -> dict:
    """Up to `n_train` training windows (and at most MAX_TOKENS tokens) evenly spaced over the
    run's training corpus, and the held-out windows the run's held-out loss is measured on
    (inputs, targets, weights; evenly spaced ones of at most MAX_EVAL_TOKENS tokens on a long
    context)."""
    from ..rasp.run import is_compiled, program_windows
    from ..tasks.windows import evenly_spaced

    if is_compiled(run):
        return program_windows(run)
    data = run.data()
    n_ctx = run.cfg.n_ctx
    n_train = max(1, min(n_train, MAX_TOKENS // n_ctx))
    starts = data.train_starts[evenly_spaced(len(data.train_starts), n_train)]
    train, _, _ = data.train.windows(starts, n_ctx, drop_unseen=False)
    held = evenly_spaced(len(data.val_inputs), max(1, MAX_EVAL_TOKENS // n_ctx))
    return {
        "train": np.asarray(train),
        "eval": np.asarray(data.val_inputs)[held],
        "targets": np.asarray(data.val_targets)[held],
        "weights": np.asarray(data.val_weights, dtype=np.float64)[held],
    }


def check_hook(model, name: str):
    if name not in model.hook_names:
        near = [h for h in model.hook_names if name.split(".")[-1] in h][:3]
        hint = f" (this model has {', '.join(near)})" if near else ""
        raise FlatformerError(f"no activation named {name!r}{hint}")
    if name.endswith(NOT_PER_TOKEN):
        raise FlatformerError(
            f"{name} is (batch, head, query, key), not a vector per token: pick another hook"
        )


def transcoder_hooks(model, name: str) -> tuple[str, str]:
    """The MLP input and output of the block `name` belongs to (Dunefsky et al. 2024): the
    input after the MLP's LayerNorm, `blocks.L.ln2.hook_normalized`, or `blocks.L.hook_resid_mid`
    in a model without one (`hook_resid_pre` in a parallel block, whose MLP reads the block's
    input); the output `blocks.L.hook_mlp_out`."""
    match = re.match(r"blocks\.(\d+)\.", name)
    if not match:
        raise FlatformerError(f"a transcoder needs a block's hook (blocks.L....), got {name!r}")
    layer = match.group(1)
    out = f"blocks.{layer}.hook_mlp_out"
    if out not in model.hook_names:
        raise FlatformerError(
            f"block {layer} has no MLP: a transcoder maps an MLP's input to its output"
        )
    ln = f"blocks.{layer}.ln2.hook_normalized"
    if ln in model.hook_names:
        return ln, out
    stream = "hook_resid_pre" if model.cfg.parallel_attn_mlp else "hook_resid_mid"
    return f"blocks.{layer}.{stream}", out


def read(model, tokens: np.ndarray, names: list[str], batch: int = 256) -> dict[str, np.ndarray]:
    """Each named activation on `tokens` (B, T) as (B * T, d): the token's vector, heads
    concatenated for a per-head hook (SAELens's `hook_z` reshaping). At most `batch` windows
    a pass, fewer where their every activation would pass the store's PASS_BYTES (a long
    context)."""
    from ..store.resources import rows_per_pass

    batch = min(batch, rows_per_pass(model.cfg, np.shape(tokens)[-1]))
    out = {n: [] for n in names}
    for i in range(0, len(tokens), batch):
        _, cache = model.run_with_cache(tokens[i : i + batch])
        for n in names:
            a = cache[n]
            out[n].append(a.reshape(a.shape[0] * a.shape[1], -1))
    return {n: np.concatenate(v) for n, v in out.items()}
