"""Everything the explorer page needs, as one deterministic JSON-ready dict.

Weights travel as base64 of little-endian float64 bytes: exact (the page computes in float64
too) and a third the size of decimal text. An imported float32 model's travel as float32 bytes,
half that, when every number round-trips exactly (`weights_dtype` says which); the page widens
them to float64 before computing. Every checkpoint goes along, or an evenly spaced
subset when there are many, so the page's slider can replay training. The reference logits are
computed here by the NumPy engine (every one, or evenly spaced columns of a large
vocabulary's); the page recomputes them on every load and shows the worst difference, so a
page that disagrees with Python cannot go unnoticed. The measures the page
shares with `flatformer analyze` (the KL direction, the betas, the top-k, the held-out windows
mean ablation averages over) travel from their one definition in Python.
"""

from __future__ import annotations

import base64
import math
from pathlib import Path

import numpy as np

from ..analysis.circuits import TOP_K
from ..config import ModelConfig
from ..tasks.windows import TaskData, evenly_spaced
from ..errors import FlatformerError
from ..engine.model import Params, hook_names
from ..readout import BETAS, KL_DIRECTION, reference_windows
from ..readout.points import MAX_POINTS, default_focus_position, held_out_counts, shown_points
from ..store.runs import Run, load_run
from ..model.transformer import Transformer

FORMAT = "flatformer-explorer-1"
MIN_PROMPTS = 9
MAX_CHECKPOINTS = 201  # the paper's 200 frames plus step 0
NUMBER_BUDGET = 250_000  # weights carried at most (2 MB of float64) unless asked otherwise


DTYPES = {"float64": "<f8", "float32": "<f4"}

# What explorer/model.js computes beyond the classic GPT-2 block (config.newer_features's words),
# and any normalisation eps: a feature the engine learns later is refused until the page has it.
PAGE_FEATURES = (
    "RMSNorm", "rotary positions", "shortformer positions", "gated MLP",
    "parallel attention and MLP", "grouped-query attention", "SiLU", "SoLU", "local attention",
)  # fmt: skip


def require_page(cfg: ModelConfig) -> None:
    """One line refusing a model with features the page's forward pass does not compute."""
    missing = [
        f for f in cfg.newer_features() if f not in PAGE_FEATURES and not f.startswith("eps ")
    ]
    if missing:
        raise FlatformerError(
            f"the explorer page does not compute {', '.join(missing)}, which this model has"
        )


def pack(array: np.ndarray, dtype: str = "float64") -> str:
    """Base64 of the array's little-endian bytes (float64, or float32), in C order."""
    return base64.b64encode(np.ascontiguousarray(array, dtype=DTYPES[dtype]).tobytes()).decode()


def unpack(text: str, dtype: str = "float64") -> np.ndarray:
    """The float64 numbers `pack` wrote (float32 ones widened, exactly)."""
    return np.frombuffer(base64.b64decode(text), dtype=DTYPES[dtype]).astype(np.float64)


def weights_of(data: dict) -> np.ndarray:
    """The page data's weights as float64, whichever width they travel in."""
    return unpack(data["weights"], data.get("weights_dtype", "float64"))


def fits_float32(weights: np.ndarray) -> bool:
    """True when every number survives float32 bit for bit (the source was float32 and
    nothing since has used the extra precision)."""
    with np.errstate(over="ignore"):
        return bool(np.array_equal(weights.astype(np.float32).astype(np.float64), weights))


def pick_steps(steps: list[int], keep: int, must: int) -> list[int]:
    """At most `keep` evenly spaced steps (first and last always), plus `must`."""
    if len(steps) <= keep:
        return list(steps)
    return sorted({steps[i] for i in evenly_spaced(len(steps), max(keep, 2))} | {must})


def reference_prompts(d_vocab: int, n_ctx: int, demo: list[int] | None = None) -> list[list[int]]:
    """At least nine prompts that together hold every token and reach every position.

    Tokens come from shuffled copies of the vocabulary (a fixed seed: the prompts are part of the
    snapshot); one prompt is shorter than the context, so the page's short-sequence path is
    checked as well.
    """
    rng = np.random.default_rng(0)
    prompts = [list(demo)] if demo else []
    n_full = max(MIN_PROMPTS - 1 - len(prompts), math.ceil(d_vocab / n_ctx))
    stream: list[int] = []
    while len(stream) < n_full * n_ctx + n_ctx:
        stream += rng.permutation(d_vocab).tolist()
    for i in range(n_full):
        prompts.append(stream[i * n_ctx : (i + 1) * n_ctx])
    short = max(1, n_ctx // 2)
    prompts.append(stream[n_full * n_ctx : n_full * n_ctx + short])
    return [[int(t) for t in p] for p in prompts]


# The logits the page's self-check compares: every one while this many hold them (a model's
# every token and position), else this many of evenly spaced columns at every position.
REFERENCE_NUMBERS = 500_000


def reference_columns(vocab_out: int, positions: int) -> list[int] | None:
    """The logit columns the self-check compares at each of `positions`: None for all of them,
    else evenly spaced ones (the first and the last among them) within REFERENCE_NUMBERS."""
    keep = REFERENCE_NUMBERS // max(positions, 1)
    if vocab_out <= keep:
        return None
    return [int(v) for v in evenly_spaced(vocab_out, max(keep, 2))]


def flat_weights(cfg: ModelConfig, tensors: dict[str, np.ndarray]) -> np.ndarray:
    """One checkpoint as one vector: the engine's own flat layout for one seed (tensors in
    `param_shapes` order, each in C order; `model.Params`), which `model.js` unpacks."""
    return Params.stack(cfg, [tensors]).flat


def check_vocab(cfg: ModelConfig, vocab: list[str]) -> list[str]:
    vocab = [str(v) for v in vocab]
    if len(vocab) != cfg.d_vocab:
        raise FlatformerError(
            f"vocabulary has {len(vocab)} words but the model reads {cfg.d_vocab}"
        )
    if len(set(vocab)) != len(vocab):
        raise FlatformerError("vocabulary words must be distinct")
    if any(not v.strip() for v in vocab):
        raise FlatformerError("vocabulary words must not be empty or blank")
    return vocab


def encode_demo(text: str, vocab: list[str], n_ctx: int) -> list[int] | None:
    """The task's demo sequence in this vocabulary, or None when it does not fit."""
    index = {w: i for i, w in enumerate(vocab)}
    words = (text or "").split()
    if not words or len(words) > n_ctx or any(w not in index for w in words):
        return None
    return [index[w] for w in words]


def build_export(
    cfg: ModelConfig,
    vocab: list[str],
    checkpoints: list[tuple[int, dict]],
    step: int,
    *,
    title: str,
    task: str | None = None,
    preset: str | None = None,
    demo: str = "",
    focus: str = "",
    metrics: list[dict] | None = None,
    mean_windows: np.ndarray | None = None,
    float32: bool = False,
    demo_tokens: list[int] | None = None,
    input_note: str | None = None,
    vocab_out: list[str] | None = None,
    program: str | None = None,
) -> dict:
    """The page's data for checkpoints [(step, tensors)], ascending, showing `step` first.

    `mean_windows` are the held-out windows mean ablation averages over (the analysis's own,
    `readout.reference_windows`); without them the page offers no mean ablation. With `float32`
    (a float32 source) the weights travel as float32 if every one fits it exactly. The page
    opens on `demo_tokens` when given (the task's own reading of its demo or of a prompt), else
    on `demo` read as space-separated vocabulary words; `input_note` is shown under its input
    box. `vocab_out` names the logits' classes (`Run.vocab_out`; default the first
    `cfg.vocab_out` words); `program` says what a compiled program's outputs are (the page
    then shows them as its values, not as next tokens)."""
    require_page(cfg)
    vocab = check_vocab(cfg, vocab)
    vocab_out = [str(v) for v in (vocab_out if vocab_out is not None else vocab[: cfg.vocab_out])]
    if len(vocab_out) != cfg.vocab_out:
        raise FlatformerError(
            f"{len(vocab_out)} output class names but the model has {cfg.vocab_out} logits"
        )
    steps = [s for s, _ in checkpoints]
    if step not in steps:
        raise FlatformerError(f"step {step} is not among the exported checkpoints")
    weights = np.concatenate([flat_weights(cfg, t) for _, t in checkpoints])
    dtype = "float32" if float32 and fits_float32(weights) else "float64"
    demo_tokens = demo_tokens or encode_demo(demo, vocab, cfg.n_ctx)
    prompts = reference_prompts(cfg.d_vocab, cfg.n_ctx, demo_tokens)
    model = Transformer(cfg, dict(checkpoints)[step])
    columns = reference_columns(cfg.vocab_out, sum(len(p) for p in prompts))
    logits = np.concatenate([model(p)[0][:, columns or slice(None)].ravel() for p in prompts])
    rows = [m for m in (metrics or []) if "step" in m]
    curve = {
        key: [_finite(m.get(key)) for m in rows]
        for key in ("step", "train_loss", "val_loss", "rule_error")
    }
    return {
        "format": FORMAT,
        "title": title,
        "task": task,
        "preset": preset,
        "config": cfg.to_dict(),
        "n_params": cfg.n_params,
        "vocab": vocab,
        "vocab_out": vocab_out,
        "program": program,
        "demo": demo_tokens or list(range(min(cfg.n_ctx, cfg.d_vocab))),
        "focus": vocab.index(focus) if focus in vocab else None,
        "input_note": input_note,
        # The layout of `weights` and the names of the activations, from their one definition:
        # the page unpacks by the first and checks its forward pass against the second.
        "tensors": [[name, list(shape)] for name, shape in cfg.param_shapes().items()],
        "hooks": hook_names(cfg),
        "steps": steps,
        "step": step,
        "weights": pack(weights, dtype),
        "weights_dtype": dtype,
        "metrics": curve,
        "reference": {"step": step, "prompts": prompts, "logits": pack(logits)}
        | ({"columns": columns} if columns else {}),
        # One definition of every measure the page shares with `flatformer analyze`.
        "measures": {
            "kl": KL_DIRECTION,
            "betas": list(BETAS),
            "top_k": TOP_K,
            "mean_windows": None
            if mean_windows is None
            else np.asarray(mean_windows).astype(int).tolist(),
        },
    }


def _finite(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def export_run(
    run: Run | str | Path,
    step: int | None = None,
    max_checkpoints: int | None = None,
    prompt: str | None = None,
) -> dict:
    """A run's page data: all its checkpoints (or an evenly spaced subset), opening at `step`
    on `prompt` (read by the run's task: text, for a model with a tokenizer) or its demo.

    Without `max_checkpoints` at most 201 go along, fewer for big models (about 250,000
    numbers in all), so the file stays a few megabytes at most.
    """
    run = run if isinstance(run, Run) else load_run(run)
    step = run.resolve_step(step)
    if max_checkpoints is None:
        max_checkpoints = min(MAX_CHECKPOINTS, max(2, NUMBER_BUDGET // run.cfg.n_params))
    if max_checkpoints < 1:
        raise FlatformerError("max_checkpoints must be at least 1")
    steps = [step] if max_checkpoints == 1 else pick_steps(run.steps, max_checkpoints, step)
    # a compiled program (flatformer.rasp.run.is_compiled; importing it here makes a cycle)
    compiled = (run.config.get("imported") or {}).get("format") == "rasp"
    try:
        task = run.task
        task_name, demo, focus, known = task.name, task.demo, task.focus, True
        task_data = run.data()
        windows = reference_windows(task_data)
    except FlatformerError:  # a task this version does not know: the page works without it
        task, task_name, demo, focus, known, windows = (
            run.task if compiled else None,  # no held-out text, but it reads a prompt
            run.config.get("task"),
            "",
            "",
            False,
            None,
        )
    opening = opening_tokens(task, prompt, run.cfg.n_ctx) if prompt is not None else None
    if compiled and opening and opening[0] != 0:  # a program's input, read after BOS (token 0)
        opening = opening_tokens(task, f"BOS {prompt}", run.cfg.n_ctx)
    checkpoints = [(s, run.weights(s)) for s in steps]
    data = build_export(
        run.cfg,
        run.vocab,
        checkpoints,
        step,
        title=Path(run.path).name,
        task=task_name,
        preset=run.config.get("preset"),
        demo=demo,
        focus=focus,
        metrics=run.metrics,
        mean_windows=windows,
        float32=(run.config.get("imported") or {}).get("dtype") == "float32",
        demo_tokens=opening or (read_demo(task, demo, run.cfg.n_ctx) if known else None),
        input_note=TOKENIZER_NOTE if getattr(task, "tokenizer", None) == "hf" else None,
        vocab_out=run.vocab_out,
        program=PROGRAM_NOTE if compiled else None,
    )
    if compiled:  # its stream's directions are named, its circuit known: no search
        data["residual"] = stream_names(run)
        circuit = program_circuit(run, step)
    else:
        circuit = circuit_export(run, step, task_data) if known else None
    if circuit:
        data["circuit"] = circuit
    elif compiled:
        data["circuit_note"] = PROGRAM_CIRCUIT
    elif known:
        data["circuit_note"] = (
            "The search for this model's circuit takes minutes: flatformer circuits finds it."
        )
    shown = shown_export(run, task if known else None)
    if shown:
        data["shown"] = shown
    if known and task_name == "modular-addition":
        data["key_phase"] = key_phase(run, task.p)
    if task_name == "induction":
        data["induction"] = induction_scores(run.cfg, checkpoints)
    return data


def shown_export(run, task) -> dict | None:
    """The tokens and positions the page's token+position clouds show when not every one
    (readout.points.shown_points, the figures' choice): the most frequent tokens of the held-out
    text and the task's focus token, at evenly spaced positions. None for a small model."""
    cfg = run.cfg
    if cfg.d_vocab * cfg.n_ctx <= MAX_POINTS:
        return None
    counts = np.zeros(cfg.d_vocab)
    if task is not None:
        counts = held_out_counts(task, run.config.get("data_seed", 0), cfg.d_vocab)
    focus = task.focus if task is not None else None
    focus = run.vocab.index(focus) if focus in run.vocab else int(np.argmax(counts))
    shown = shown_points(cfg.d_vocab, cfg.n_ctx, counts, focus, default_focus_position(cfg.n_ctx))
    return {
        "tokens": shown.tokens.tolist(),
        "positions": shown.positions.tolist(),
        "note": shown.note,
    }


def stream_names(run) -> list[str] | None:
    """Each residual direction of a compiled run by its variable and value ("length:3"), as
    the page labels the stream's columns; None where the stream was compressed (a direction is
    then a mix of them) or the record does not fit the model."""
    imported = run.config.get("imported") or {}
    names = (imported.get("rasp") or {}).get("residual")
    if imported.get("compression") or not isinstance(names, list):
        return None
    if len(names) != run.cfg.d_model or not all(isinstance(n, str) for n in names):
        return None
    return names


# A compiled program's run contract (flatformer.rasp.run), as the page states it.
PROGRAM_NOTE = (
    "A compiled RASP program: the model reads BOS followed by the program's input, and its "
    "output at position i + 1 is the program's value at position i."
)
PROGRAM_CIRCUIT = "This compiled run records no known circuit: compile it again to get one."


def program_circuit(run: Run, step: int) -> dict | None:
    """A compiled program's known circuit (`imported.circuit.edges`, in the edge graph's
    names), for the page's circuit panel to highlight; None when the run records none."""
    from ..edges.graph import EdgeGraph

    edges = ((run.config.get("imported") or {}).get("circuit") or {}).get("edges")
    if not isinstance(edges, list):
        return None
    return {
        "step": step,
        "source": "the compiled program's known circuit",
        "metric": None,
        "edges": [list(e) for e in edges],
        "faithfulness": None,
        "edges_total": EdgeGraph(run.model(step)).n_edges,
    }


# The page cannot apply a BPE tokenizer (it would need one written again in JavaScript), so
# its input box reads the tokenizer's pieces; text goes through the real one in Python.
TOKENIZER_NOTE = (
    "This model's tokenizer runs in Python: type its pieces here (as the vocabulary below "
    "names them), or open the page on a text with flatformer explore RUN --prompt TEXT."
)


def opening_tokens(task, prompt: str, n_ctx: int) -> list[int]:
    """The tokens of `--prompt`, read by the run's task."""
    if task is None:
        raise FlatformerError("--prompt needs the run's task, which this version does not know")
    tokens = task.encode(prompt)
    if not 1 <= len(tokens) <= n_ctx:
        raise FlatformerError(f"--prompt has {len(tokens)} tokens; the page reads 1..{n_ctx}")
    return tokens


def read_demo(task, demo: str, n_ctx: int) -> list[int] | None:
    """The task's demo as the task reads it (a text, for a tokenizer or characters), or None
    when it is no sequence the page can open on."""
    try:
        tokens = task.encode(demo)
    except FlatformerError:
        return None
    return tokens if 1 <= len(tokens) <= n_ctx else None


def circuit_export(run: Run, step: int, data: TaskData) -> dict | None:
    """What the page's circuit panel needs beyond the weights and the mean-ablation windows
    (`measures.mean_windows`, over which the page averages the senders' outputs itself, at any
    checkpoint): the circuit `flatformer circuits` finds at `step` (mean ablation, default
    metric); None when its search would take minutes."""
    from ..edges.budget import choose_scope, cut_windows
    from ..edges.methods import build_problem, find_circuits

    model = run.model(step)
    # The page is written in seconds: a model whose search would take longer gets it on
    # fewer, shorter held-out windows (edges.budget), or, past that, none (the panel says so).
    scope = choose_scope(model, data.val_inputs.shape[1], 200, budget=CIRCUIT_SECONDS)
    if scope.seconds > 3 * CIRCUIT_SECONDS:
        return None
    problem = build_problem(model, run.task, cut_windows(data, scope.length), "mean",
                            n_prompts=scope.prompts)  # fmt: skip
    found = find_circuits(problem, methods=("exact",))
    circuit = {
        "step": step,
        "metric": found["metric"],
        "edges": found["circuit"]["edges"],
        "faithfulness": found["circuit"]["faithfulness"],
        "edges_total": found["circuit"]["edges_total"],
    }
    if scope.narrowed:
        circuit["scope"] = {"prompts": scope.prompts, "length": scope.length}
    return circuit


CIRCUIT_SECONDS = 15.0  # the page's circuit search, at most (estimated)


def key_phase(run: Run, p: int) -> dict:
    """For the page's embedding view: each number's phase (in turns, 0..1) in the plane of the
    last checkpoint's strongest key frequency (analysis.grokking), one colour per number that
    stays the same while the slider replays training."""
    from ..analysis import grokking as G

    weights = run.weights()
    embed = weights["embed.W_E"][:p]
    keys, norms = G.key_frequencies(weights, p), G.spectrum(embed)
    k = max(keys, key=lambda f: norms[f])
    return {
        "frequency": int(k),
        "key_frequencies": keys,
        "phase": (G.phases_of(embed, k) / (2 * np.pi)).tolist(),
    }


def induction_scores(cfg: ModelConfig, checkpoints: list[tuple[int, dict]]) -> dict:
    """Head scores and composition at every exported checkpoint, computed here (the copying
    score needs eigenvalues) and shown by the page as they are: {"phase_step", "baseline",
    "steps": {step: {"heads": [...], "composition": {"q", "k", "v"}}}}."""
    from ..analysis.induction import head_scores, induction_score, locate_phase

    scores = {s: head_scores(Transformer(cfg, t)) for s, t in checkpoints}
    rising = induction_score(np.array([sc.prefix_matching for sc in scores.values()]))
    baseline = next(iter(scores.values())).baseline
    return {
        "phase_step": locate_phase(list(scores), rising),
        "baseline": baseline,
        "steps": {str(s): sc.to_json() for s, sc in scores.items()},
    }


def export_model(
    model: Transformer, vocab: list[str], *, title: str = "model", demo: str = "", step: int = 0
) -> dict:
    """Page data for one in-memory model (no run folder): a single checkpoint."""
    return build_export(model.cfg, vocab, [(step, model.tensors)], step, title=title, demo=demo)
