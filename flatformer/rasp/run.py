"""A compiled program as a run folder: the importers' writer (one checkpoint, config.json),
the program's ground truth (each residual direction's variable and value, the step each head
and MLP unit computes) and its validation recorded under the config's `imported` entry."""

from __future__ import annotations

import itertools
import runpy
from pathlib import Path

import numpy as np

from ..errors import FlatformerError
from . import rasp as r
from .compile import CompiledProgram
from .rasp import evaluate
from .validate import Validation, same


def load_program(path: Path, name: str = "program") -> r.SOp:
    """The S-op (or function of no arguments making one) called `name` in the Python file."""
    path = Path(path)
    if not path.is_file():
        raise FlatformerError(f"{path}: no such file")
    try:
        namespace = runpy.run_path(str(path))
    except Exception as e:
        raise FlatformerError(f"{path}: running it raised {type(e).__name__}: {e}") from None
    if name not in namespace:
        raise FlatformerError(f"{path} defines no {name!r}; name the program's S-op {name}")
    program = namespace[name]
    if callable(program) and not isinstance(program, r.RASPExpr):
        program = program()
    if not isinstance(program, r.SOp):
        raise FlatformerError(f"{path}: {name} is a {type(program).__name__}, not a RASP S-op")
    return program


def parse_vocab(text: str) -> list:
    """'1,2,3' -> [1, 2, 3]; items that are not whole numbers stay strings ('a,b')."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(item == "" for item in items):
        raise FlatformerError(f"--vocab takes comma-separated values, got {text!r}")
    try:
        return [int(item) for item in items]
    except ValueError:
        return items


def domain(compiled: CompiledProgram, per_length: int = 512, seed: int = 0):
    """The program's inputs as token arrays, one per length (a model that attends both ways
    reads no padding): every input of each length up to `per_length` of them, else a seeded
    random sample of that many. Returns (batches, inputs in them, whether that is all)."""
    rng = np.random.default_rng(seed)
    vocab, batches, every = compiled.vocab, [], True
    for n in range(1, compiled.max_len + 1):
        if len(vocab) ** n <= per_length:
            rows = list(itertools.product(vocab, repeat=n))
        else:
            every = False
            rows = [[vocab[i] for i in rng.integers(0, len(vocab), n)] for _ in range(per_length)]
        batches.append(np.array([compiled.encode(list(xs)) for xs in rows]))
    return batches, sum(len(b) for b in batches), every


def present_directions(model, batches, residual: list[str]) -> dict[str, list[str]]:
    """For each activation the stream's directions pass through (hook_resid_*, hook_attn_out,
    hook_mlp_out), the directions (`residual` labels) that vary there over the inputs: the
    variables computed by then, one feature per value. A direction constant everywhere (`one`)
    is a bias, not a feature."""
    sums: dict[str, list] = {}
    for tokens in batches:
        _, cache = model.run_with_cache(tokens)
        for name, x in cache.items():
            if name.endswith(("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")):
                x = x.reshape(-1, x.shape[-1])
                low, high = sums.get(name, (x.min(0), x.max(0)))
                sums[name] = (np.minimum(low, x.min(0)), np.maximum(high, x.max(0)))
    return {
        name: [residual[i] for i in np.flatnonzero(high - low > 1e-9)]
        for name, (low, high) in sums.items()
    }


def held_out_set(program, compiled: CompiledProgram, n_inputs: int = 1024, seed: int = 0):
    """What a compiled run is measured on: every input of max_len values (a seeded sample of
    `n_inputs` where there are more), BOS first, and the interpreter's value at each position
    as a class id: -1 at BOS, and where the program gives no value or one outside the classes.
    Whole inputs only: a model that attends both ways reads no padding."""
    n, vocab = compiled.max_len, compiled.vocab
    every = len(vocab) ** n <= n_inputs
    if every:
        rows = [list(xs) for xs in itertools.product(vocab, repeat=n)]
    else:
        rng = np.random.default_rng(seed)
        rows = [[vocab[i] for i in rng.integers(0, len(vocab), n)] for _ in range(n_inputs)]
    targets = np.full((len(rows), n + 1), -1)
    for row, xs in enumerate(rows):
        try:
            values = evaluate(program, xs)
        except Exception:  # the program fails on this input: no value anywhere
            continue
        for i, value in enumerate(values):
            match = [c for c, cls in enumerate(compiled.classes) if same(cls, value)]
            targets[row, i + 1] = match[0] if match else -1
    inputs = [compiled.encode(xs) for xs in rows]
    return {"inputs": inputs, "targets": targets.tolist(), "exhaustive": every}


def write_compiled_run(
    program,
    compiled: CompiledProgram,
    validation: Validation,
    source: str,
    out: Path,
    compression=None,
) -> Path:
    """The compiled model of `program` as a run folder, with its ground truth and its held-out
    set (`held_out_set`); with `compression` (`compress.Compression`), the compressed model
    instead, its map's rows recorded as the true feature directions, its accuracy and the
    validation of the compressed model (the circuit stays the program's: the same heads and
    MLPs compute the same steps)."""
    from ..importers.common import Imported
    from ..importers.run import write_run
    from ..tasks.imported import ImportedTask

    provenance = {
        "format": "rasp",
        "source": source,
        "changes": [],
        "rasp": {
            **compiled.ground_truth(),
            "causal": compiled.cfg.causal,
            "compile_seconds": round(compiled.seconds, 4),
            "held_out": held_out_set(program, compiled),
            "validation": {
                "checked": validation.checked,
                "inputs": validation.total,
                "exhaustive": validation.exhaustive,
                "mismatches": len(validation.mismatches),
            },
        },
    }
    from ..model.transformer import Transformer
    from .circuit import known_edges, live_edges

    model = Transformer(compiled.cfg, compiled.tensors)
    wired = known_edges(model)
    batches, checked, every = domain(compiled)
    provenance["circuit"] = {
        "source": "compiled program",
        "edges": live_edges(model, wired, batches),
        "wired": wired,
        "live_on": {"inputs": checked, "exhaustive": every},
    }
    provenance["rasp"]["present"] = present_directions(model, batches, compiled.residual)
    if compression is not None:
        provenance["compression"] = {
            "width": int(compression.P.shape[1]),
            "from": int(compression.P.shape[0]),
            "steps": compression.steps,
            "loss": compression.loss,
            "position_accuracy": compression.accuracy,
            "validation": compression.validation_record(),
            # row i: where residual[i] (a variable's value) lives in the compressed stream
            "directions": compression.P.tolist(),
        }
        compiled = compression.compressed
    imported = Imported(compiled.cfg, compiled.tensors, compiled.token_names, provenance)
    return write_run(imported, ImportedTask(compiled.token_names), out)


def is_compiled(run) -> bool:
    return (run.config.get("imported") or {}).get("format") == "rasp"


def program_windows(run, n_inputs: int = 5000, seed: int = 0) -> dict:
    """A compiled run's data, as `dictionary.activations.windows` gives a trained run's: every
    input of max_len values (a seeded sample of `n_inputs` where there are more), BOS first,
    one in five held out; the targets are the model's outputs (the program's values: the
    compiled model was validated), read at every position after BOS."""
    record = run.config["imported"]["rasp"]
    # the token names are BOS, the input values, then the rows padding the embedding
    n_values = len(record["vocab"]) - 1 - sum(n.startswith("(unused ") for n in record["vocab"])
    max_len = int(record["max_len"])
    if n_values**max_len <= n_inputs:
        inputs = np.array(list(itertools.product(range(1, n_values + 1), repeat=max_len)))
    else:
        rng = np.random.default_rng(seed)
        inputs = rng.integers(1, n_values + 1, (n_inputs, max_len))
    tokens = np.concatenate([np.zeros((len(inputs), 1), int), inputs], axis=1)
    held = np.arange(len(tokens)) % 5 == 4
    targets = run.model()(tokens[held]).argmax(-1)
    weights = np.ones(targets.shape)
    weights[:, 0] = 0.0
    return {"train": tokens[~held], "eval": tokens[held], "targets": targets, "weights": weights}


def known_features(run, hook: str) -> dict[str, np.ndarray] | None:
    """The true features of a compiled run at `hook`: each direction that varies there, named
    by its variable and value, as a vector of the stream (a row of the compression map, or a
    unit vector of the uncompressed stream); None where the run knows none."""
    imported = run.config.get("imported") or {}
    present = (imported.get("rasp") or {}).get("present", {}).get(hook)
    if not is_compiled(run) or present is None:
        return None
    residual = imported["rasp"]["residual"]
    compression = imported.get("compression")
    rows = np.array(compression["directions"]) if compression else np.eye(len(residual))
    return {label: rows[residual.index(label)] for label in present}
