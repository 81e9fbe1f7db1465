"""Induction heads and head composition: per-head scores, composition between heads, and the
phase change located over checkpoints. Numbers only (the figure and the movie draw them).

Definitions, with our row-vector convention (a head reads x and writes x W_V W_O, like
TransformerLens):
- previous-token score (Olsson et al. 2022, "In-context Learning and Induction Heads"): on
  sequences of n random tokens repeated once, the mean attention from position i to i - 1.
- prefix-matching score (Olsson et al. 2022): on the same sequences, the mean attention from a
  position i of the repeat (i >= n) to i - n + 1, the position right after the earlier
  occurrence of the token at i.
- copying score (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"): over
  the eigenvalues l of the head's full OV circuit W_E W_V W_O W_U (vocab x vocab),
  sum(l) / sum(|l|); +1 for a head that copies the token it attends to. Undefined (None) when
  every eigenvalue is 0, e.g. W_V = 0. Without W_O, W_O is the block identity (the head writes
  its d_head slice). The final LayerNorm, if any, is left out (as in the paper).
- composition of an earlier head A into a later head B (Elhage et al. 2021):
  ||M_A M_B||_F / (||M_A||_F ||M_B||_F) with M_A = W_OV(A) = W_V W_O and M_B = W_QK(B)
  = W_Q W_K^T for Q-composition (A writes what B's queries read), W_QK(B)^T for K-composition
  (A writes what B's keys read: the score is x_q W_QK (x_k W_OV(A))^T), and W_OV(B) for
  V-composition; the orientation of TransformerLens's `all_composition_scores`. With pre-LN
  blocks, B reads the stream through its LayerNorm: its gain and centring are folded into its
  reading weights (the scale, a per-position number, is not).
- the baseline: the mean of the same formula over random Gaussian weights of the same shapes
  (so a reader knows what "high" means; Elhage et al. compare against it too).
- in-context loss (Olsson et al. 2022): the loss on the last quarter of the context minus the
  loss on the first quarter (here on fixed training windows); it drops when induction heads
  form, and the training loss may bump just before.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..config import ModelConfig
from ..readout.probs import log_softmax
from ..model.transformer import Transformer

BASELINE_DRAWS = 200
LOSS_WINDOWS = 128  # fixed training windows for the loss curves over checkpoints
# The probe: 16 random tokens repeated once, 32 positions, inside a longer context. A key at
# position j is trained only when a later query of the window reads it, so the last positions of
# every window are never trained as keys; a probe that fills the window would average those in,
# which the score (meant for a repeat inside a language model's long context) does not intend.
PROBE_TOKENS = 16


def repeated_tokens(cfg: ModelConfig, n_seqs: int = 32, seed: int = 0) -> tuple[np.ndarray, int]:
    """(tokens (n_seqs, 2n), n): n distinct random tokens, then the same n again, with
    n = min(PROBE_TOKENS, n_ctx // 2, d_vocab) (distinct, so the earlier occurrence of each
    token is unique)."""
    n = min(PROBE_TOKENS, cfg.n_ctx // 2, cfg.d_vocab)
    rng = np.random.default_rng(seed)
    first = np.stack([rng.permutation(cfg.d_vocab)[:n] for _ in range(n_seqs)])
    return np.concatenate([first, first], axis=1), n


def attention_scores(model: Transformer, tokens: np.ndarray | None = None):
    """(prev_token, prefix_matching), each (n_layers, n_heads), on repeated random tokens."""
    if tokens is None:
        tokens, n = repeated_tokens(model.cfg)
    else:
        n = tokens.shape[1] // 2
    _, cache = model.run_with_cache(tokens)
    T = tokens.shape[1]
    i = np.arange(T)
    prev, prefix = [], []
    for layer in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # (B, H, T, T)
        prev.append(pattern[:, :, i[1:], i[1:] - 1].mean((0, 2)))
        prefix.append(pattern[:, :, i[n:], i[n:] - n + 1].mean((0, 2)))
    return np.array(prev), np.array(prefix)


def head_weights(cfg: ModelConfig, t: dict, layer: int, h: int):
    """(W_Q, W_K, W_V, W_O) of one head as (d, dh), (d, dh), (d, dh), (dh, d), with the block
    identity for W_O when heads are concatenated and the pre-LN gain and centring folded into
    the reading weights."""
    b = f"blocks.{layer}."
    d, dh = cfg.d_model, cfg.d_head
    if cfg.attn_out:
        W_O = t[b + "attn.W_O"][h]
    else:
        W_O = np.zeros((dh, d))
        W_O[:, h * dh : (h + 1) * dh] = np.eye(dh)
    read = np.eye(d)
    if cfg.normalization == "pre_ln":
        read = (np.eye(d) - 1.0 / d) * t[b + "ln1.w"]  # centre, then the gain: C diag(w)
    return tuple(read @ t[b + f"attn.W_{w}"][h] for w in "QKV") + (W_O,)


def composition(left: np.ndarray, right: np.ndarray) -> float:
    """||left @ right||_F / (||left||_F ||right||_F), NaN when either matrix is 0."""
    denominator = np.linalg.norm(left) * np.linalg.norm(right)
    return float(np.linalg.norm(left @ right) / denominator) if denominator > 0 else float("nan")


def composition_matrices(cfg: ModelConfig, t: dict) -> dict[str, np.ndarray]:
    """{"q", "k", "v"}: (n_heads_total, n_heads_total) arrays, row = earlier head A, column =
    later head B (index layer * n_heads + head); NaN where A is not in an earlier layer."""
    H = cfg.n_layers * cfg.n_heads
    weights = [
        head_weights(cfg, t, layer, h) for layer in range(cfg.n_layers) for h in range(cfg.n_heads)
    ]
    out = {mode: np.full((H, H), np.nan) for mode in "qkv"}
    for a in range(H):
        _, _, V_a, O_a = weights[a]
        OV_a = V_a @ O_a
        for b in range(H):
            if a // cfg.n_heads >= b // cfg.n_heads:
                continue
            Q_b, K_b, V_b, O_b = weights[b]
            QK_b = Q_b @ K_b.T
            out["q"][a, b] = composition(OV_a, QK_b)
            out["k"][a, b] = composition(OV_a, QK_b.T)
            out["v"][a, b] = composition(OV_a, V_b @ O_b)
    return out


@lru_cache(maxsize=16)  # the same for every checkpoint of a run (the page reads ~30)
def composition_baseline(cfg: ModelConfig, draws: int = BASELINE_DRAWS, seed: int = 0) -> float:
    """The mean Q-, K- and V-composition of random Gaussian heads with this model's shapes
    (W_O the block identity when the model has none)."""
    rng = np.random.default_rng(seed)
    d, dh = cfg.d_model, cfg.d_head
    scores = []
    for _ in range(draws):
        V_a, Q_b, K_b, V_b = (rng.standard_normal((d, dh)) for _ in range(4))
        if cfg.attn_out:
            O_a, O_b = rng.standard_normal((dh, d)), rng.standard_normal((dh, d))
        else:
            O_a = O_b = np.eye(dh, d)
        OV_a, QK_b = V_a @ O_a, Q_b @ K_b.T
        scores += [composition(OV_a, QK_b), composition(OV_a, QK_b.T), composition(OV_a, V_b @ O_b)]
    return float(np.mean(scores))


def copying_scores(cfg: ModelConfig, t: dict) -> list[list[float | None]]:
    """[layer][head] copying score of the full OV circuit W_E W_V W_O W_U, None if undefined."""
    rows = []
    for layer in range(cfg.n_layers):
        row = []
        for h in range(cfg.n_heads):
            _, _, W_V, W_O = head_weights(cfg, t, layer, h)
            eig = np.linalg.eigvals(t["embed.W_E"] @ W_V @ W_O @ t["unembed.W_U"])
            total = np.abs(eig).sum()
            row.append(float(eig.sum().real / total) if total > 0 else None)
        rows.append(row)
    return rows


@dataclass
class HeadScores:
    prev_token: np.ndarray  # (n_layers, n_heads)
    prefix_matching: np.ndarray  # (n_layers, n_heads)
    copying: list  # [layer][head], None where undefined
    composition: dict  # {"q", "k", "v"}: (n_heads_total, n_heads_total), NaN off
    baseline: float

    def induction_pair(self):
        """((layer, head) of the best previous-token head in layer 0, (layer, head) of the best
        prefix-matching head in a later layer), or None with one layer."""
        if self.prev_token.shape[0] < 2:
            return None
        a = int(self.prev_token[0].argmax())
        later = self.prefix_matching[1:]
        layer, b = np.unravel_index(int(later.argmax()), later.shape)
        return (0, a), (int(layer) + 1, int(b))

    def strongest_k_pair(self):
        """((0, a), (1, b)): the layer-0 -> layer-1 pair with the largest K-composition, or None
        with one layer (or when no layer-0 head writes anything). In an induction circuit it is
        a previous-token head and the induction head whose keys read it."""
        H = self.prev_token.shape[1]
        k = self.composition["k"][:H, H : 2 * H]
        if self.prev_token.shape[0] < 2 or np.all(np.isnan(k)):
            return None
        a, b = divmod(int(np.nanargmax(k)), H)
        return (0, a), (1, b)

    def to_json(self) -> dict:
        L, H = self.prev_token.shape
        heads = [
            {
                "layer": layer,
                "head": h,
                "prev_token": float(self.prev_token[layer, h]),
                "prefix_matching": float(self.prefix_matching[layer, h]),
                "copying": self.copying[layer][h],
            }
            for layer in range(L)
            for h in range(H)
        ]

        def clean(m):
            return [[None if np.isnan(x) else float(x) for x in row] for row in m]

        return {
            "heads": heads,
            "composition": {
                **{mode: clean(self.composition[mode]) for mode in "qkv"},
                "baseline": self.baseline,
            },
        }


def head_scores(model: Transformer) -> HeadScores:
    """Every head's scores and the composition between every earlier and later head."""
    prev, prefix = attention_scores(model)
    t = model.tensors
    return HeadScores(
        prev,
        prefix,
        copying_scores(model.cfg, t),
        composition_matrices(model.cfg, t),
        composition_baseline(model.cfg),
    )


def window_losses(model: Transformer, inputs: np.ndarray, targets: np.ndarray):
    """(loss, in-context loss) in nats over windows: the mean next-token loss, and the mean
    loss on the last quarter of the positions minus the first quarter."""
    logp = log_softmax(model(inputs))
    nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]  # (B, T)
    quarter = max(1, inputs.shape[1] // 4)
    return float(nll.mean()), float(nll[:, -quarter:].mean() - nll[:, :quarter].mean())


@dataclass
class PhaseChange:
    steps: list[int]  # the checkpoints measured
    train_loss: list[float]  # on fixed training windows, at each checkpoint
    in_context_loss: list[float]  # on the same windows
    prev_token: np.ndarray  # (n_steps, n_layers, n_heads)
    prefix_matching: np.ndarray  # (n_steps, n_layers, n_heads)
    phase_step: int  # where the induction score crosses half its rise
    bump_step: int | None  # the training loss's last rise before phase_step

    @property
    def induction_score(self) -> np.ndarray:
        return induction_score(self.prefix_matching)


def induction_score(prefix_matching: np.ndarray) -> np.ndarray:
    """The best prefix-matching score over the heads after layer 0 (over all heads with one
    layer): prefix_matching (..., n_layers, n_heads) -> (...)."""
    later = prefix_matching[..., 1:, :] if prefix_matching.shape[-2] > 1 else prefix_matching
    return later.reshape(*later.shape[:-2], -1).max(-1)


def locate_phase(steps, score: np.ndarray) -> int:
    """The first step at which `score` reaches the midpoint between its first value and its
    maximum: where the induction score jumps, read without a smoothing parameter."""
    score = np.asarray(score)
    half = score[0] + 0.5 * (score.max() - score[0])
    return int(steps[int(np.flatnonzero(score >= half)[0])])


def loss_bump(steps, train_loss, phase_step: int) -> int | None:
    """The last checkpoint up to `phase_step` at which the training loss is higher than at the
    checkpoint before it (a bump), or None when it only falls."""
    bump = None
    for i in range(1, len(steps)):
        if steps[i] > phase_step:
            break
        if train_loss[i] > train_loss[i - 1]:
            bump = int(steps[i])
    return bump


def phase_change(run, steps: list[int] | None = None, progress=None) -> PhaseChange:
    """Scores, training loss and in-context loss at each checkpoint (default: all of them),
    the losses on the same fixed training windows every time (the first LOSS_WINDOWS)."""
    from ..tasks.windows import TaskData

    steps = list(run.steps if steps is None else steps)
    data = TaskData.build(run.task, run.cfg.n_ctx, run.config.get("data_seed", 0))
    inputs, targets, _ = data.train.windows(
        data.train_starts[:LOSS_WINDOWS], run.cfg.n_ctx, drop_unseen=False
    )
    tokens, _ = repeated_tokens(run.cfg)
    prev, prefix, loss, icl = [], [], [], []
    for i, step in enumerate(steps):
        model = run.model(step)
        p, q = attention_scores(model, tokens)
        prev.append(p)
        prefix.append(q)
        mean, late_minus_early = window_losses(model, inputs, targets)
        loss.append(mean)
        icl.append(late_minus_early)
        if progress:
            progress(i + 1, len(steps))
    result = PhaseChange(steps, loss, icl, np.array(prev), np.array(prefix), 0, None)
    result.phase_step = locate_phase(steps, result.induction_score)
    result.bump_step = loss_bump(steps, loss, result.phase_step)
    return result


def induction_report(run, step: int) -> dict:
    """`analyze --json`'s "induction": the phase step over the checkpoints up to `step`, the
    heads' scores and the composition at `step`."""
    steps = [s for s in run.steps if s <= step]
    phase = phase_change(run, steps)
    return {
        "phase_step": phase.phase_step,
        "bump_step": phase.bump_step,
        **head_scores(run.model(step)).to_json(),
    }
