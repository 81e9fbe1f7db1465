"""Ablations, metrics, the exact effect of every edge, path patching, the fast methods (EAP,
EAP-IG, ACDC) scored against the exact effects, and the circuit.

A `Problem` fixes what is measured: the prompts (held-out windows, read at the position the
rule constrains), the ablated value of every sender, and the metric. Effects are signed
changes of the metric when an edge is ablated (metric with the edge ablated minus the clean
metric), so an exact effect and its estimates compare directly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..tasks.windows import TaskData, evenly_spaced
from ..errors import FlatformerError
from ..readout import knob_kl, log_softmax, reference_windows
from ..model.transformer import Transformer
from .graph import EdgeGraph

ABLATIONS = ("mean", "resample", "zero")
METRICS = ("logprob", "kl", "logit-diff", "l2")
READOUTS = ("last", "all")
METHODS = ("exact", "eap", "eap-ig", "acdc")
CHUNK = 16  # variants per forward pass: bounds memory for the widest models


@dataclass
class Problem:
    """Prompts (B, T) read at R readouts: position `index[i]` of prompt `rows[i]` (one per
    prompt unless `rows` says otherwise), with their targets (R,), the corrupt prompts and
    targets (or None), each sender's ablated value, and the metric's name."""

    graph: EdgeGraph
    tokens: np.ndarray
    index: np.ndarray
    target: np.ndarray
    corrupt: np.ndarray | None
    corrupt_target: np.ndarray | None
    refs: dict
    metric: str
    ablation: str
    rows: np.ndarray | None = None

    def __post_init__(self):
        if self.rows is None:
            self.rows = np.arange(len(self.tokens))
        self.readouts = np.arange(len(self.rows))
        self.clean_logits = self.logits(np.ones((1, self.graph.n_edges)))[0]
        self.clean_logp = log_softmax(self.clean_logits)

    @property
    def positions(self):
        return self.rows, self.index

    def logits(self, masks, **kw) -> np.ndarray:
        return self.graph.forward(self.tokens, self.refs, masks, self.positions, **kw)[0]

    def value(self, logits) -> np.ndarray:
        """The metric (E,) of logits (E, R, V), averaged over readouts. logprob: log p(target);
        kl: KL(clean || variant) (Conmy et al.'s ACDC metric); logit-diff: logit of the clean
        target minus logit of the corrupt target; l2: the mean squared difference of the logits
        from the clean ones (Conmy et al. 2023's metric for compiled programs, whose one-hot
        outputs make KL ill-defined)."""
        r = self.readouts
        if self.metric == "logprob":
            return log_softmax(logits)[:, r, self.target].mean(1)
        if self.metric == "kl":
            return knob_kl(self.clean_logits, logits).mean(1)
        if self.metric == "l2":
            return ((logits - self.clean_logits) ** 2).mean((1, 2))
        return (logits[:, r, self.target] - logits[:, r, self.corrupt_target]).mean(1)

    def value_grad(self, logits) -> np.ndarray:
        """d value / d logits, (E, R, V)."""
        R, V = logits.shape[1:]
        onehot = np.eye(V)
        if self.metric == "logprob":
            return (onehot[self.target] - np.exp(log_softmax(logits))) / R
        if self.metric == "kl":
            return (np.exp(log_softmax(logits)) - np.exp(self.clean_logp)) / R
        if self.metric == "l2":
            return 2 * (logits - self.clean_logits) / (R * V)
        return (onehot[self.target] - onehot[self.corrupt_target])[None].repeat(len(logits), 0) / R

    def evaluate(self, masks, **kw) -> np.ndarray:
        """The metric of every mask row (E, n_edges) -> (E,)."""
        masks = np.atleast_2d(masks)
        return np.concatenate(
            [
                self.value(self.logits(masks[i : i + CHUNK], **kw))
                for i in range(0, len(masks), CHUNK)
            ]
        )

    @property
    def worse(self) -> float:
        """+1 when a larger metric is worse (KL, L2), -1 when smaller is worse."""
        return 1.0 if self.metric in ("kl", "l2") else -1.0


def prompts_for(task, data: TaskData, n: int):
    """Up to `n` held-out windows, evenly spaced, with a forced target at their prediction:
    (inputs, index, target); windows at their last position with the next token as the
    target when the task forces none."""
    keep = np.flatnonzero(data.rule_targets >= 0)
    if len(keep):
        inputs, index, target = data.rule_inputs, data.rule_index, data.rule_targets
    else:
        keep = np.arange(len(data.val_inputs))
        inputs, target = data.val_inputs, data.val_targets[:, -1]
        index = np.full(len(inputs), inputs.shape[1] - 1)
    keep = keep[evenly_spaced(len(keep), n)]
    return inputs[keep], index[keep], target[keep]


def sender_outputs(graph: EdgeGraph, tokens) -> dict:
    """Every sender's output (B, T, d) on the unablated model."""
    _, trace = graph.forward(tokens, graph.zero_refs(), np.ones((1, graph.n_edges)))
    return {s: np.broadcast_to(out, trace.shape)[0] for s, out in trace.outs.items()}


def build_problem(
    model: Transformer,
    task,
    data: TaskData,
    ablation: str = "mean",
    metric: str | None = None,
    n_prompts: int = 200,
    seed: int = 0,
    examples=None,
    positions: str = "last",
) -> Problem:
    """The problem a user asks for: `ablation` mean (each sender's output averaged over the
    held-out windows of `readout.reference_windows`, per position), resample (its output on the
    corrupted prompt) or zero; `metric` logprob (default when the task forces targets), kl,
    logit-diff or l2; `positions` last (each prompt read where its rule or target is) or all
    (every position after the first, each with the clean model's top class as its target: a
    compiled program's value there, as Conmy et al. 2023 read compiled programs)."""
    if ablation not in ABLATIONS:
        raise FlatformerError(f"--ablation must be one of {', '.join(ABLATIONS)}, got {ablation!r}")
    if positions not in READOUTS:
        raise FlatformerError(f"--positions must be last or all, got {positions!r}")
    forced = examples is not None or bool((data.rule_targets >= 0).any())
    metric = metric or ("logprob" if forced else "kl")
    if metric not in METRICS:
        raise FlatformerError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if positions == "all" and metric == "logit-diff":
        raise FlatformerError(
            "--positions all reads no corrupt target; use --metric logprob, kl or l2"
        )
    graph = EdgeGraph(model)
    if examples is not None:  # a prompts file (flatformer.tasks.prompts.read_examples)
        tokens, index, target, *given = examples
    else:
        tokens, index, target = prompts_for(task, data, n_prompts)
    if not len(tokens):
        raise FlatformerError("no held-out windows to measure circuits on")
    corrupt = corrupt_target = None
    if ablation == "resample" or metric == "logit-diff":
        if examples is not None:
            made = None if given[0] is None else tuple(given)
        else:
            made = task.corrupt(tokens, index, np.random.default_rng(seed)) if forced else None
        if made is None:
            raise FlatformerError(
                f"the task {task.name} declares no corruption, which "
                f"{'resample ablation' if ablation == 'resample' else 'the logit-diff metric'}"
                f" needs; use --ablation mean or zero and --metric logprob or kl"
            )
        corrupt, corrupt_target = made
    if ablation == "zero":
        refs = graph.zero_refs()
    elif ablation == "mean":
        T = tokens.shape[1]  # prompts from a file may be shorter than the context
        refs = {
            s: out.mean(0)[:T] for s, out in sender_outputs(graph, reference_windows(data)).items()
        }
    else:
        refs = sender_outputs(graph, corrupt)
    if positions == "last":
        return Problem(
            graph, tokens, index, target, corrupt, corrupt_target, refs, metric, ablation
        )
    B, T = tokens.shape
    if T < 2:
        raise FlatformerError("--positions all needs prompts of at least two tokens")
    rows, index = np.repeat(np.arange(B), T - 1), np.tile(np.arange(1, T), B)
    problem = Problem(graph, tokens, index, None, corrupt, None, refs, metric, ablation, rows)
    problem.target = problem.clean_logits.argmax(-1)  # each position's own output
    return problem


def prompt_bytes(cfg, width: int) -> int:
    """Peak bytes one prompt of `width` tokens adds, upper-bound-minded (measured within 1.5x
    on the paper model and attn-only-2l): CHUNK variants of the graph's forward pass, each
    keeping every sender's output and every head's q, k, v and attention row for each token
    of the layers before the last (the last layer, and the logits, read one position)."""
    d, H, dh, m, L = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.n_layers
    per_token = (2 + (L - 1) * (H + 1)) * d + (L - 1) * (H * (width + 3 * dh) + 2 * m)
    last = (H + 1) * d + H * (width + 3 * dh) + 2 * m + 3 * cfg.vocab_out
    return int(1.5 * 8 * CHUNK * (width * per_token + last))


def check_memory(cfg, n_prompts: int, width: int, from_file: bool):
    """Refuse, before the model reads the prompts, more than the machine's available memory
    (train's measure of it), with the number of prompts that would fit."""
    from ..store import resources

    per_prompt = prompt_bytes(cfg, width)
    memory = resources.available_memory()
    fit = max(0, ((memory or 0) - resources.BASE_MEMORY) // per_prompt)
    hint = (
        "not even one prompt fits: free some memory"
        if not fit
        else f"a prompts file of at most {fit:,} examples would fit"
        if from_file
        else f"--prompts {fit} would fit"
    )
    needed = resources.BASE_MEMORY + n_prompts * per_prompt
    what = f"circuits on {n_prompts:,} prompts of {width} tokens"
    resources.check_memory(needed, what, hint, memory)


# ---- exact effects and path patching ------------------------------------------------------


def exact_effects(problem: Problem) -> tuple[np.ndarray, float]:
    """Every edge ablated alone: metric(edge ablated) - metric(clean), (n_edges,); and the
    clean metric."""
    n = problem.graph.n_edges
    masks = np.ones((n + 1, n))
    masks[np.arange(1, n + 1), np.arange(n)] = 0.0
    values = problem.evaluate(masks)
    return values[1:] - values[0], float(values[0])


def path_patch(problem: Problem, path: list[tuple[str, str]]) -> float:
    """Path patching (Wang et al. 2022; Goldowsky-Dill et al. 2023) between the clean and the
    corrupt prompts: the sender of the first edge reaches the network with its corrupt output
    only along `path` (a chain of edges, each starting at the node the previous one enters);
    every other edge out of the path's inner nodes reads their clean output. Returns
    metric(patched) - metric(clean). A one-edge path is that edge's exact effect under
    resample ablation."""
    graph = problem.graph
    if problem.corrupt is None:
        raise FlatformerError("path patching needs corrupt prompts (a task that declares them)")
    if not path:
        raise FlatformerError("path patching needs at least one edge")
    for edge in path:
        if edge not in graph.edges:
            raise FlatformerError(f"no edge {edge[0]} -> {edge[1]} in this model")
    for (_, dst), (src, _) in zip(path, path[1:]):
        if graph.node_of(dst) != src:
            raise FlatformerError(
                f"the path breaks: an edge ends at {graph.node_of(dst)} but "
                f"the next one starts at {src}"
            )
    clean = sender_outputs(graph, problem.tokens)
    inner = {graph.node_of(dst) for _, dst in path[:-1]}
    ids = [graph.edges.index(e) for e in path]
    masks = np.array([0.0 if s in inner else 1.0 for s, _ in graph.edges])
    masks[ids[1:]] = 1.0
    masks[ids[0]] = 0.0
    first = path[0][0]
    patched = problem.graph.forward(
        problem.tokens,
        clean,
        masks[None],
        problem.positions,
        edge_refs={ids[0]: sender_outputs(graph, problem.corrupt)[first]},
    )[0]
    return float(problem.value(patched)[0] - problem.value(problem.clean_logits[None])[0])


# ---- fast methods ------------------------------------------------------------------------


def eap(problem: Problem) -> np.ndarray:
    """Edge attribution patching (Syed et al. 2023, "Attribution Patching Outperforms Automated
    Circuit Discovery"): the effect of ablating u -> v estimated as (a_u,ablated - a_u,clean) .
    d metric / d (input of v) at the clean run, for every edge from one forward and one backward
    pass. With the KL metric the gradient at the clean run is zero (KL is at its minimum), so
    every estimate is 0."""
    return eap_ig(problem, steps=1)


def eap_ig(problem: Problem, steps: int = 5) -> np.ndarray:
    """EAP with integrated gradients (Hanna et al. 2024, "Have Faith in Faithfulness"): the
    gradient at each receiver averaged over `steps` points alpha = 1/k ... k/k between the
    ablated and the clean model (every edge at mask alpha, so the embeddings move on the
    straight line from their ablated to their clean value), times the clean-minus-ablated
    activation difference. Returns the estimated effect of ablating each edge."""
    graph = problem.graph
    if steps < 1:
        raise FlatformerError(f"EAP-IG needs at least one step, got {steps}")
    alphas = np.arange(1, steps + 1) / steps
    total = {r: 0.0 for r in graph.receivers}
    for i in range(0, steps, CHUNK):
        masks = alphas[i : i + CHUNK, None] * np.ones((1, graph.n_edges))
        logits, trace = graph.forward(problem.tokens, problem.refs, masks, problem.positions)
        grads, _ = graph.backward(trace, problem.value_grad(logits))
        for r in graph.receivers:
            total[r] = total[r] + grads[r].sum(0)
    clean = sender_outputs(graph, problem.tokens)
    scores = np.empty(graph.n_edges)
    for e, (s, r) in enumerate(graph.edges):
        scores[e] = ((problem.refs[s] - clean[s]) * total[r]).sum() / steps
    return scores


def acdc(problem: Problem, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """ACDC (Conmy et al. 2023): receivers visited from the logits back; each incoming edge is
    ablated in turn and stays ablated when the metric gets worse by less than `tau` (in the
    metric's units) relative to the current graph. Edges into a node whose every outgoing edge
    is gone are dropped unvisited, as ACDC never reaches them. Returns the kept mask (n_edges,)
    and each edge's score, the |change of the metric| when it was tried (0 if never tried)."""
    graph = problem.graph
    keep = np.ones(graph.n_edges)
    scores = np.zeros(graph.n_edges)
    current = problem.evaluate(keep)[0]
    for r in reversed(graph.receivers):
        node = graph.node_of(r)
        if node != "logits" and not any(
            keep[e] for e, (s, _) in enumerate(graph.edges) if s == node
        ):
            for e, _ in graph.into[r]:
                keep[e] = 0.0
            continue
        for e, _ in reversed(graph.into[r]):
            keep[e] = 0.0
            new = problem.evaluate(keep)[0]
            scores[e] = abs(new - current)
            if problem.worse * (new - current) < tau:
                current = new
            else:
                keep[e] = 1.0
    return keep, scores


# ---- the circuit ---------------------------------------------------------------------------


def faithfulness(problem: Problem, masks) -> np.ndarray:
    """(metric with only the kept edges - metric with every edge ablated) / (clean metric -
    metric with every edge ablated), per mask row: 1 = the circuit alone does what the model
    does; nan when ablating everything changes nothing."""
    masks = np.atleast_2d(masks)
    n = problem.graph.n_edges
    ends = problem.evaluate(np.stack([np.ones(n), np.zeros(n)]))
    gap = ends[0] - ends[1]
    if abs(gap) < 1e-12:
        return np.full(len(masks), np.nan)
    return (problem.evaluate(masks) - ends[1]) / gap


def greedy_circuit(
    problem: Problem, effects: np.ndarray, target: float = 0.95, tolerance: float = 0.01
) -> np.ndarray:
    """The smallest prefix of the edges ranked by |exact effect| whose faithfulness reaches
    `target`, then pruned: while some edge can go with faithfulness staying >= target and
    falling by at most `tolerance`, the one whose removal costs least goes. Returns the mask."""
    n = problem.graph.n_edges
    order = np.argsort(-np.abs(effects), kind="stable")
    prefixes = np.zeros((n + 1, n))
    for k in range(1, n + 1):
        prefixes[k:, order[k - 1]] = 1.0
    faith = faithfulness(problem, prefixes)
    if np.isnan(faith).all():
        return np.ones(n)
    reached = np.flatnonzero(faith >= target)
    keep = prefixes[reached[0] if len(reached) else n].copy()
    while keep.sum() > 1:
        now = faithfulness(problem, keep)[0]
        kept = np.flatnonzero(keep)
        trials = np.repeat(keep[None], len(kept), 0)
        trials[np.arange(len(kept)), kept] = 0.0
        after = faithfulness(problem, trials)
        ok = (after >= target) & (now - after <= tolerance)
        if not ok.any():
            break
        keep[kept[np.argmax(np.where(ok, after, -np.inf))]] = 0.0
    return keep


def drop_losses(problem: Problem, keep: np.ndarray) -> np.ndarray:
    """For every kept edge, the faithfulness lost when it alone is dropped from the circuit."""
    kept = np.flatnonzero(keep)
    if not len(kept):
        return np.zeros(0)
    trials = np.repeat(keep[None], len(kept), 0)
    trials[np.arange(len(kept)), kept] = 0.0
    return faithfulness(problem, keep)[0] - faithfulness(problem, trials)


# ---- scoring a method against the exact effects -------------------------------------------


def rank(x: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties given their average rank."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve of `scores` for boolean `labels` (the Mann-Whitney U statistic
    over the positives and negatives, ties counted half); nan without both classes."""
    labels = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if not n_pos or not n_neg:
        return float("nan")
    r = rank(scores)
    return float((r[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def spearman(a, b) -> float:
    """Spearman's rank correlation (Pearson's of the average ranks); nan if either is constant."""
    ra, rb = rank(a), rank(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def rounding_to_zero(x: np.ndarray, rel: float = 1e-12) -> np.ndarray:
    """`x` with entries below `rel` times its largest magnitude set to 0: an edge whose effect
    is rounding (a mean-ablated `pos` edge moves the metric by 1e-17) ties with the other zeros
    instead of taking a random rank."""
    x = np.asarray(x, dtype=float)
    return np.where(np.abs(x) <= rel * np.abs(x).max(initial=0.0), 0.0, x)


def _num(x):
    """A float for JSON (nan -> None)."""
    x = float(x)
    return None if np.isnan(x) else x


def find_circuits(
    problem: Problem,
    methods=METHODS,
    target: float = 0.95,
    tolerance: float = 0.01,
    tau: float | None = None,
    ig_steps: int = 5,
    progress=None,
) -> dict:
    """Exact effects, the greedy circuit and every requested fast method scored against them:
    the JSON-ready report of `flatformer circuits`. `tau` (ACDC's threshold) defaults to 1% of
    the gap between the clean and the fully ablated metric. `progress(name)` is called before
    each stage."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise FlatformerError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    graph = problem.graph
    say = progress or (lambda name: None)
    say("exact")
    start = time.perf_counter()
    effects, clean = exact_effects(problem)
    exact_seconds = time.perf_counter() - start
    n = graph.n_edges
    ablated = float(problem.evaluate(np.zeros(n))[0])
    keep = greedy_circuit(problem, effects, target, tolerance)
    truth = keep.astype(bool)
    losses = drop_losses(problem, keep)
    estimates, report_methods = {}, {"exact": {"seconds": exact_seconds}}
    for name, fn in (("eap", lambda: eap(problem)), ("eap-ig", lambda: eap_ig(problem, ig_steps))):
        if name in methods:
            say(name)
            start = time.perf_counter()
            estimates[name] = fn()
            key = name.replace("-", "_")
            scores = rounding_to_zero(estimates[name])
            report_methods[key] = {
                "auc": _num(roc_auc(np.abs(scores), truth)),
                "spearman": _num(spearman(scores, rounding_to_zero(effects))),
                "seconds": time.perf_counter() - start,
            }
    if "acdc" in methods:
        say("acdc")
        tau = 0.01 * abs(clean - ablated) if tau is None else tau
        start = time.perf_counter()
        acdc_keep, acdc_scores = acdc(problem, tau)
        report_methods["acdc"] = {
            "auc": _num(roc_auc(acdc_scores, truth)),
            "tau": tau,
            "edges_kept": int(acdc_keep.sum()),
            "faithfulness": _num(faithfulness(problem, acdc_keep)[0]),
            "edges": [list(graph.edges[e]) for e in np.flatnonzero(acdc_keep)],
            "seconds": time.perf_counter() - start,
        }
    edges = []
    for e, (src, dst) in enumerate(graph.edges):
        row = {"src": src, "dst": dst, "exact": float(effects[e])}
        for name, values in estimates.items():
            row[name.replace("-", "_")] = float(values[e])
        if "acdc" in methods:
            row["acdc"] = float(acdc_scores[e])
        row["in_circuit"] = bool(keep[e])
        edges.append(row)
    kept = np.flatnonzero(keep)
    return {
        "metric": problem.metric,
        "ablation": problem.ablation,
        "prompts": len(problem.tokens),
        "readouts": len(problem.rows),
        "clean_metric": clean,
        "ablated_metric": ablated,
        "nodes": graph.nodes,
        "edges": edges,
        "methods": report_methods,
        "circuit": {
            "edges": [list(graph.edges[e]) for e in kept],
            "edges_kept": int(len(kept)),
            "edges_total": n,
            "faithfulness": _num(faithfulness(problem, keep)[0]),
            "target": target,
            "tolerance": tolerance,
            "drop_losses": [float(x) for x in losses],
            "minimal": bool((losses > tolerance).all()),
        },
    }


def shown_circuit(model: Transformer, task, data: TaskData) -> dict:
    """The circuit the circuit figure and the explorer page show: mean ablation, the task's
    default metric, exact effects only (`find_circuits`'s report)."""
    return find_circuits(build_problem(model, task, data, "mean"), methods=("exact",))
