"""`flatformer compile PROGRAM.py --vocab 1,2,3 --max-len N --out RUN`: a RASP program
compiled into a transformer, checked against the interpreter, written as a run."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from ..errors import FlatformerError
from ..store.limits import whole
from .app import app, out


@app.command("compile")
def compile_program(
    source: Path = typer.Argument(..., help="A Python file defining a RASP S-op `program`."),
    vocab: str = typer.Option(..., "--vocab", help="The input values, comma-separated: 1,2,3."),
    max_len: int = typer.Option(..., "--max-len", help="The longest input the model reads."),
    out_dir: Path = typer.Option(..., "--out", help="The run folder to write."),
    name: str = typer.Option("program", "--name", help="The S-op's name in the file."),
    limit: int = typer.Option(
        100_000, "--limit", help="Check every input up to this many, else a random sample of it."
    ),
):
    """Compile a RASP program (tracr's language) into a model whose directions are its
    variables; refuse it if the model differs from the program on any input checked."""
    from ..rasp.compile import compile_rasp_to_model
    from ..rasp.run import load_program, parse_vocab, write_compiled_run
    from ..rasp.validate import validate

    whole("--limit", limit, 1, 10_000_000)
    program = load_program(source, name)
    compiled = compile_rasp_to_model(program, parse_vocab(vocab), max_len)
    result = validate(program, compiled, limit=limit)
    if not result.ok:
        raise FlatformerError(f"{source}: {result.summary()}")
    write_compiled_run(compiled, result, str(source), out_dir)
    cfg = compiled.cfg
    out.print(
        Text(
            f"{out_dir}: {cfg.n_layers} layer{'s' * (cfg.n_layers > 1)}, {cfg.n_heads} "
            f"head{'s' * (cfg.n_heads > 1)}, d_model {cfg.d_model}, {cfg.n_params:,} parameters, "
            f"{'causal' if cfg.causal else 'non-causal'}, compiled in {compiled.seconds:.3f} s; "
            f"{result.summary()}"
        ),
        soft_wrap=True,
    )
