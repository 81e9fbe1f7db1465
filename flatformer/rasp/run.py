"""A compiled program as a run folder: the importers' writer (one checkpoint, config.json),
the program's ground truth (each residual direction's variable and value, the step each head
and MLP unit computes) and its validation recorded under the config's `imported` entry."""

from __future__ import annotations

import runpy
from pathlib import Path

from ..errors import FlatformerError
from . import rasp as r
from .compile import CompiledProgram
from .validate import Validation


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


def write_compiled_run(
    compiled: CompiledProgram, validation: Validation, source: str, out: Path
) -> Path:
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
            "validation": {
                "checked": validation.checked,
                "inputs": validation.total,
                "exhaustive": validation.exhaustive,
                "mismatches": len(validation.mismatches),
            },
        },
    }
    from ..model.transformer import Transformer
    from .circuit import known_edges

    model = Transformer(compiled.cfg, compiled.tensors)
    provenance["circuit"] = {"source": "compiled program", "edges": known_edges(model)}
    imported = Imported(compiled.cfg, compiled.tensors, compiled.token_names, provenance)
    return write_run(imported, ImportedTask(compiled.token_names), out)
