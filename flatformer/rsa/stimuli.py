"""The stimulus set and the representation of every named activation on it."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError

HELD_OUT_WINDOWS = 96  # fixed, so every checkpoint and seed sees the same stimuli


def short(name: str) -> str:
    """An activation's name without the hook prefix, so tick labels and table rows stay apart."""
    return name.replace("blocks.", "b").replace(".hook_", ".").replace("hook_", "")


def stimuli(run, prompts: list[list[int]] | None = None):
    """(tokens (S, T), read position per stimulus (S,), labels).

    d_model 2: every token at every position, the paper's 96 points for plus-last-even; the
    stimulus for token v at position t is v repeated t + 1 times, read at t (the embedding is
    exactly x_v + p_t; later activations see a context of v alone). Otherwise: the first
    held-out rule windows read at the rule position, or `prompts`, read at their last token."""
    cfg, vocab = run.cfg, run.vocab
    if prompts is not None:
        distinct = len({tuple(p) for p in prompts})
        if distinct < 3:  # fewer points than that make every RDM and CKA a measure of nothing
            raise FlatformerError(
                f"--stimuli needs at least 3 different prompts, got {len(prompts)} "
                f"({distinct} different)"
            )
        width = max(len(p) for p in prompts)
        tokens = np.zeros((len(prompts), width), np.int64)
        for k, p in enumerate(prompts):
            tokens[k, : len(p)] = p
        read = np.array([len(p) - 1 for p in prompts])
        labels = [" ".join(vocab[t] for t in p) for p in prompts]
        return tokens, read, labels
    if cfg.d_model == 2:
        v, t = np.meshgrid(np.arange(cfg.d_vocab), np.arange(cfg.n_ctx), indexing="ij")
        tokens = np.repeat(v.reshape(-1, 1), cfg.n_ctx, 1)
        return tokens, t.reshape(-1), [f"{vocab[a]}{b}" for a, b in zip(v.flat, t.flat)]
    data = run.data()
    n = min(HELD_OUT_WINDOWS, len(data.rule_inputs))
    if n < 3:
        raise FlatformerError(
            f"task {run.task.name} has no held-out rule windows: pass --stimuli FILE"
        )
    tokens, read = data.rule_inputs[:n], np.asarray(data.rule_index[:n])
    labels = [" ".join(vocab[t] for t in row[: i + 1]) for row, i in zip(tokens, read)]
    return tokens, read, labels


def representations(model, tokens, read, tick=None) -> dict[str, np.ndarray]:
    """name -> (stimuli, units) at the read position of every stimulus; a hook with heads gives
    one representation per head ("...hook_z.h0"); attention patterns are read as the row of
    the read position (padded to the context). The stimuli run a few at a time
    (`rows_per_pass`), keeping only their read positions: every activation of every token of
    a long context, at once, would be the largest thing geometry makes. `tick(i, n)` is told
    of each pass done."""
    from ..store.resources import rows_per_pass

    tokens, read = np.asarray(tokens), np.asarray(read)
    step = rows_per_pass(model.cfg, tokens.shape[-1])
    starts = range(0, len(tokens), step)
    parts = []
    for k, i in enumerate(starts):
        parts.append(_read_at(model, tokens[i : i + step], read[i : i + step]))
        if tick:
            tick(k + 1, len(starts))
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _read_at(model, tokens, read) -> dict[str, np.ndarray]:
    _, cache = model.run_with_cache(tokens)
    rows = np.arange(len(tokens))
    out = {}
    for name, act in cache.items():
        if name == "hook_pos_embed" or act.ndim == 3 and act.shape[0] != len(tokens):
            act = np.broadcast_to(act, (len(tokens),) + act.shape[-2:]) if act.ndim == 2 else act
        if act.ndim == 3:  # (S, T, d)
            out[name] = act[rows, read]
        elif act.ndim == 4 and name.endswith(("attn_scores", "pattern")):  # (S, H, Tq, Tk)
            for h in range(act.shape[1]):
                x = act[rows, h, read]
                out[f"{name}.h{h}"] = np.where(np.isfinite(x), x, 0.0)
        elif act.ndim == 4:  # (S, T, H, d_head)
            for h in range(act.shape[2]):
                out[f"{name}.h{h}"] = act[rows, read, h]
    return out
