"""The measures of a many-seed comparison: the task-declared roles, the zones' cyclic order
around the output landscape, and `compare_models` / `compare_runs`, which align every seed to
the reference and measure which structures hold (see the package's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..analysis import algorithm
from ..analysis.hulls import ladder, spread
from ..config import ModelConfig
from ..tasks.windows import TaskData
from ..errors import FlatformerError
from ..training.evaluate import evaluate
from ..engine.model import Params, forward
from ..readout import all_points_tokens, head_outputs, output_logits
from ..readout.points import every_head, qk_hooks, stream_positions
from ..readout.trace import after_attention
from ..store.runs import Run, seed_runs
from ..tasks.base import LEARNED, recall_sources
from ..model.transformer import Transformer

from .symmetry import procrustes

SUCCESS = LEARNED  # rule error at or below which a seed counts as having learned the task
ZONE_ANGLES = 2048  # points on the circle the zone order is read along
ZONE_RADIUS = 4.0  # that circle's radius, in spreads of the answers' z points
COLLINEAR = 0.99  # points are "on a line" when their first axis holds this share of variance

# --------------------------------------------------------------------------- task-declared roles


@dataclass
class RecallSpec:
    """A recall task's roles: after `marker`, the most recent token in `wanted`."""

    marker: int
    wanted: list[int]
    other: list[int]
    names: tuple[str, str, str]  # e.g. ("even", "odd", "+")

    def mask(self, V: int) -> np.ndarray:
        m = np.zeros(V, dtype=bool)
        m[self.wanted] = True
        return m


def recall_spec(task) -> RecallSpec | None:
    """The roles a task declares (`Task.recall`) as token ids, or None."""
    roles = getattr(task, "recall", None)
    if roles is None:
        return None
    marker, wanted, other = roles.ids(list(task.vocab))
    return RecallSpec(marker, wanted, other, tuple(roles.names))


# --------------------------------------------------------------------------- zones of the landscape


def canonical_cycle(seq) -> tuple:
    """A cyclic sequence written the same way whatever its start and direction: the smallest of
    its rotations and of its reversal's rotations."""
    seq = tuple(seq)
    if not seq:
        return seq
    forms = [s[i:] + s[:i] for s in (seq, seq[::-1]) for i in range(len(s))]
    return min(forms)


def canonical_line(seq) -> tuple:
    """An order along a line written the same way in either direction."""
    seq = tuple(seq)
    return min(seq, seq[::-1])


def collapse_cycle(labels) -> list:
    """Runs of equal labels around a circle, one entry per run (first and last runs joined)."""
    runs = [x for i, x in enumerate(labels) if i == 0 or x != labels[i - 1]]
    if len(runs) > 1 and runs[0] == runs[-1]:
        runs.pop()
    return runs


def zone_circle(z_by_target: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre and radius of the circle the zones are read along: centred on the targets' mean
    z points (where the model puts each answer), ZONE_RADIUS times their spread out. Close to
    those points the zones meet in a tangle; further out they are wedges from a common apex,
    and their order hardly depends on the radius (seeds 0-63 of plus-last-even, default recipe:
    the order read at 4x equals the one read at 3x for 56 seeds, at 5x for 63, at 8x for 54)."""
    centre = z_by_target.mean(0)
    return centre, ZONE_RADIUS * spread(z_by_target)


def zone_sequence(
    model: Transformer, centre, radius: float, targets: list[int], n_angles: int = ZONE_ANGLES
) -> list[int]:
    """The rule targets whose argmax zones a circle crosses, in order, one entry per crossing."""
    angles = np.linspace(0, 2 * np.pi, n_angles, endpoint=False)
    points = centre + radius * np.stack([np.cos(angles), np.sin(angles)], 1)
    labels = output_logits(model, points).argmax(-1)
    wanted = set(targets)
    return collapse_cycle([int(x) for x in labels if int(x) in wanted])


# --------------------------------------------------------------------------- the comparison


@dataclass
class Comparison:
    """Every seed of a --seeds run at one step, aligned to the reference seed."""

    task: object
    cfg: ModelConfig
    seeds: list[int]
    step: int
    reference: int  # index (into seeds) of the reference seed
    success: float
    rule_error: np.ndarray  # (S,)
    R: np.ndarray  # (S, d, d): seed's residual x -> x @ R[s] in the ref frame
    residual: np.ndarray  # (S,) relative Procrustes residual of the embedding points
    S_qk: np.ndarray  # (S, H, dh, dh): common map of each head's q and k
    qk_residual: np.ndarray  # (S, H)
    points: np.ndarray  # (S, V, T, d) aligned x_v + p_t
    written: np.ndarray  # (S, V, T, H, d) aligned head outputs (values in the stream)
    queries: np.ndarray  # (S, V, T, H, dh) aligned by S_qk
    keys: np.ndarray  # (S, V, T, H, dh)
    measures: dict  # name -> (S,) array (bool or float)
    targets: list[int]  # the rule's forced targets (whose zones are ordered)
    zone_order: list  # per seed: canonical tuple of target ids, or None
    line_order: list  # per seed: wanted tokens in order along their line, or None
    zone_centre: np.ndarray | None  # (S, 2) aligned centre of the zone circle
    zone_radius: np.ndarray | None  # (S,)
    z_targets: np.ndarray | None  # (S, n_targets, d) aligned mean z point per target
    spec: RecallSpec | None
    n_positions: int  # held-out positions the rule error counts
    models: list = field(repr=False, default_factory=list)

    @property
    def successful(self) -> np.ndarray:
        return self.rule_error <= self.success

    @property
    def symmetric(self) -> bool:
        """Whether the residual rotation is a symmetry of the model (no LayerNorm)."""
        return self.cfg.normalization == "none"

    @property
    def vocab(self) -> list[str]:
        return list(self.task.vocab)

    def order_text(self, order) -> str:
        return "n/a" if order is None else " ".join(self.vocab[i] for i in order)

    def aligned_logits(self, s: int, points: np.ndarray) -> np.ndarray:
        """Seed s's output network at points of the reference frame (..., d)."""
        return output_logits(self.models[s], np.asarray(points) @ self.R[s].T)


def _weights_recency(q, k, spec: RecallSpec, head: np.ndarray) -> np.ndarray:
    """Per seed, the fraction of steps u -> u + 1 < t along which a wanted key's score with the
    marker's query at t rises (q (S, V, T, H, dh), k likewise; `head` (S,) the head read). Keys
    stop before t: position t holds the marker itself."""
    seeds = np.arange(len(q))
    qm = q[seeds, spec.marker, :, head]  # (S, T, dh)
    kw = k[seeds, :, :, head][:, spec.wanted]  # (S, W, T, dh)
    scores = np.einsum("std,swud->stwu", qm, kw)  # (S, t, W, u)
    T = q.shape[2]
    rises = np.diff(scores, axis=-1) > 0  # step u -> u + 1
    visible = np.arange(1, T)[None, :] < np.arange(T)[:, None]  # (t, u + 1 < t)
    counted = np.broadcast_to(visible[:, None, :], rises.shape[1:])
    return (rises & counted).sum((1, 2, 3)) / max(int(counted.sum()), 1)


@dataclass
class WindowRows:
    """One batched pass of every seed over the held-out windows whose prediction the rule forces:
    at each window's prediction position, each layer-0 head's scores and attention weights over
    the keys, and z (the last block's resid_mid, the output network's input)."""

    inputs: np.ndarray  # (B, T)
    index: np.ndarray  # (B,)
    targets: np.ndarray  # (B,)
    scores: np.ndarray  # (S, B, H, T), -inf on masked keys
    pattern: np.ndarray  # (S, B, H, T)
    z: np.ndarray  # (S, B, d)


def window_rows(params: Params, data: TaskData, group: int = 8) -> WindowRows:
    """`WindowRows` of the forced rule windows, `group` seeds at a time (bounded memory)."""
    cfg, S = params.cfg, params.n_seeds
    keep = data.rule_targets >= 0
    inputs, index, targets = data.rule_inputs[keep], data.rule_index[keep], data.rule_targets[keep]
    B, T, H = len(inputs), cfg.n_ctx, cfg.n_heads
    scores, pattern = np.zeros((S, B, H, T)), np.zeros((S, B, H, T))
    z = np.zeros((S, B, cfg.d_model))
    rows = np.arange(B)
    for lo in range(0, S, group):
        part = params.select(range(lo, min(lo + group, S)))
        _, cache = forward(part, np.broadcast_to(inputs, (part.n_seeds, *inputs.shape)))
        hi = lo + part.n_seeds
        for name, dest in (("scores", scores), ("pattern", pattern)):
            act = cache[f"blocks.0.attn.hook_{'attn_scores' if name == 'scores' else name}"]
            dest[lo:hi] = act.transpose(0, 1, 3, 2, 4)[:, rows, index]  # (s, B, H, T)
        after = after_attention(cfg, cache, f"blocks.{cfg.n_layers - 1}.")[0]
        z[lo:hi] = after[:, rows, index]
    return WindowRows(inputs, index, targets, scores, pattern, z)


def compare_models(
    cfg: ModelConfig,
    task,
    tensors: list[dict],
    data: TaskData,
    seeds: list[int] | None = None,
    step: int = -1,
    reference: int | None = None,
    success: float = SUCCESS,
) -> Comparison:
    """Compare models of one config on one task (tensors: one dict per seed).

    `reference` is a seed number from `seeds` (default: the first successful seed, else the
    first seed).
    """
    S, V, T, d = len(tensors), cfg.d_vocab, cfg.n_ctx, cfg.d_model
    seeds = list(range(S)) if seeds is None else list(seeds)
    params = Params.stack(cfg, tensors)
    models = [Transformer(cfg, t) for t in tensors]
    rule_error = evaluate(params, data, with_loss=False)[1]
    if reference is None:
        ok = np.flatnonzero(rule_error <= success)
        ref = int(ok[0]) if len(ok) else 0
    elif reference in seeds:
        ref = seeds.index(reference)
    else:
        raise FlatformerError(
            f"reference seed {reference} is not among the seeds {seeds[0]}..{seeds[-1]}"
        )

    # Every token at every position in one batched pass: points, q, k, v of all seeds.
    tokens = np.broadcast_to(all_points_tokens(V, T), (S, V, T))
    _, cache = forward(params, tokens)
    X = cache["hook_embed"] + stream_positions(cfg, cache)  # (S, V, T, d)
    q_name, k_name = qk_hooks(cfg)  # the rotated q and k with rotary positions
    q = cache[q_name]  # (S, V, T, H, dh); grouped keys and values for every query head
    k, v = every_head(cfg, cache[k_name]), every_head(cfg, cache["blocks.0.attn.hook_v"])
    written = np.stack([head_outputs(m, v[s]) for s, m in enumerate(models)])

    R, residual = procrustes(X.reshape(S, -1, d), X[ref].reshape(-1, d))
    H, dh = cfg.n_heads, cfg.d_head
    S_qk, qk_residual = np.zeros((S, H, dh, dh)), np.zeros((S, H))
    for h in range(H):
        joint = np.concatenate(
            [q[..., h, :].reshape(S, -1, dh), k[..., h, :].reshape(S, -1, dh)], 1
        )
        S_qk[:, h], qk_residual[:, h] = procrustes(joint, joint[ref])

    def align_qk(a):
        return np.einsum("svthi,shij->svthj", a, S_qk)

    measures: dict[str, np.ndarray] = {"rule_error": rule_error, "residual": residual}
    if not cfg.rotary:  # rotary positions have no W_pos to form a ladder
        measures["ladder"] = np.array([algorithm.position_ladder(m)["monotone"] for m in models])
    targets = sorted({int(t) for t in data.rule_targets if t >= 0})
    rows = window_rows(params, data) if targets else None
    spec = recall_spec(task)
    line_order = [None] * S
    if spec is not None:
        recall, line_order = _recall_measures(models, spec, rows, q, k, X)
        measures.update(recall)

    zone_order, centre, radius, z_targets = [None] * S, None, None, None
    # a parallel block's MLP reads e, not z: it has no landscape of z to cross
    if d == 2 and len(targets) >= 2 and not cfg.parallel_attn_mlp:
        z_own = np.stack([rows.z[:, rows.targets == t].mean(1) for t in targets], 1)  # (S, n, d)
        centre, radius = np.zeros((S, d)), np.zeros(S)
        once = np.zeros(S, dtype=bool)
        for s, m in enumerate(models):
            centre[s], radius[s] = zone_circle(z_own[s])
            seq = zone_sequence(m, centre[s], radius[s], targets)
            zone_order[s] = canonical_cycle(seq)
            once[s] = sorted(seq) == targets
        measures["zones_once"] = once
        centre = np.einsum("sd,sde->se", centre, R)
        z_targets = np.einsum("snd,sde->sne", z_own, R)

    if spec is not None and "zones_once" in measures:
        # The zones' cyclic order is the wanted tokens' order along their line, closed up.
        measures["zones_follow_line"] = np.array(
            [zone == canonical_cycle(line) for zone, line in zip(zone_order, line_order)]
        )
    return Comparison(
        task,
        cfg,
        seeds,
        step,
        ref,
        success,
        rule_error,
        R,
        residual,
        S_qk,
        qk_residual,
        np.einsum("svtd,sde->svte", X, R),
        np.einsum("svthd,sde->svthe", written, R),
        align_qk(q),
        align_qk(k),
        measures,
        targets,
        zone_order,
        line_order,
        centre,
        radius,
        z_targets,
        spec,
        len(data.rule_targets),
        models,
    )


def _recall_measures(
    models, spec: RecallSpec, rows: WindowRows | None, q, k, X
) -> tuple[dict, list]:
    """The recall task's structures, per seed (see the module docstring), and the order of the
    wanted tokens along their line. With several heads, the head read is the layer-0 head whose
    marker rows most often put their top weight on the most recent wanted token."""
    S, V = len(models), models[0].cfg.d_vocab
    W_E = np.stack([m.tensors["embed.W_E"] for m in models])
    wanted = spec.mask(V)
    head = np.zeros(S, dtype=int)
    recency_windows = np.full(S, np.nan)
    if rows is not None:
        marked = rows.inputs[np.arange(len(rows.index)), rows.index] == spec.marker
        inputs, index = rows.inputs[marked], rows.index[marked]
        if models[0].cfg.n_heads > 1:
            source = recall_sources(inputs, index, wanted)
            head = algorithm.retrieval_share(rows.pattern[:, marked], source).argmax(-1)
        picked = rows.scores[:, marked][np.arange(S), :, head]  # (S, B, T)
        recency_windows = algorithm.recency_share(picked, inputs, index, wanted)
    out = {
        name: np.zeros(S, dtype=bool)
        for name in (
            "tokens_separable",
            "points_separable",
            "queries_separate",
            "recency_weights",
            "recency_windows",
        )
    }
    out["recency_weights_share"] = _weights_recency(q, k, spec, head)
    out["recency_windows_share"] = recency_windows
    out["head"] = head
    groups = (spec.wanted, spec.other, [spec.marker])
    for s, m in enumerate(models):
        for name, points in (
            ("tokens_separable", lambda ids: W_E[s, ids]),
            ("points_separable", lambda ids: X[s, ids].reshape(-1, X.shape[-1])),
        ):
            pairs_sep = algorithm.class_separation(dict(zip(spec.names, map(points, groups))))
            out[name][s] = all(p["separable"] for p in pairs_sep.values())
        out["queries_separate"][s] = algorithm.query_separation(m, spec.marker, int(head[s]))[
            "separable"
        ]
    out["recency_weights"] = out["recency_weights_share"] == 1.0
    out["recency_windows"] = out["recency_windows_share"] == 1.0
    lines = [ladder(W_E[s, spec.wanted]) for s in range(S)]
    out["wanted_collinear_share"] = np.array([line["axis_share"] for line in lines])
    out["wanted_collinear"] = out["wanted_collinear_share"] >= COLLINEAR
    orders = [
        canonical_line(np.array(spec.wanted)[np.argsort(line["along"])].tolist()) for line in lines
    ]
    return out, orders


def compare_runs(
    path, step: int | None = None, reference: int | None = None, success: float = SUCCESS
) -> Comparison:
    """Load every seed of a --seeds folder at `step` (default: the last step they all share)."""
    runs: list[Run] = seed_runs(path)
    if len(runs) < 2:
        raise FlatformerError(f"{path} holds one run: compare needs a --seeds folder")
    first = runs[0]
    for run in runs[1:]:
        if (run.config["task"], run.cfg, run.config.get("data_seed", 0)) != (
            first.config["task"],
            first.cfg,
            first.config.get("data_seed", 0),
        ):
            raise FlatformerError(
                f"{run.path} differs from {first.path} in task, model or "
                f"data seed: only seeds of one configuration compare"
            )
    if step is None:
        shared = set(first.steps).intersection(*(r.steps for r in runs[1:]))
        if not shared:
            raise FlatformerError(f"the seed runs of {path} share no checkpoint step")
        step = max(shared)
    tensors = [run.weights(step) for run in runs]
    task = first.task
    data = first.data()
    seeds = [int(run.config.get("seed", i)) for i, run in enumerate(runs)]
    return compare_models(first.cfg, task, tensors, data, seeds, step, reference, success)
