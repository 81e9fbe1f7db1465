"""`flatformer compile PROGRAM.py --vocab 1,2,3 --max-len N --out RUN`: a RASP program
compiled into a transformer, checked against the interpreter, written as a run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

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
    compress: Optional[int] = typer.Option(
        None,
        "--compress",
        help="Squeeze the residual stream to this width through a learned map (superposition, "
        "as tracr's compressed models); the map's rows are recorded as the true features.",
    ),
    compress_steps: int = typer.Option(300, help="Adam steps that learn the --compress map."),
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
    squeezed = None
    if compress is not None:
        squeezed = compressed(compiled, program, compress, compress_steps, limit)
    write_compiled_run(program, compiled, result, str(source), out_dir, squeezed)
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
    if squeezed is not None:
        v = squeezed.validation_record()
        out.print(
            Text(
                f"compressed to d_model {compress} (from {cfg.d_model}) in {compress_steps} steps: "
                f"{squeezed.accuracy:.1%} of positions and {v['input_accuracy']:.1%} of inputs "
                f"({v['checked']:,} checked) give the program's value"
            ),
            soft_wrap=True,
        )


def compressed(compiled, program, width: int, steps: int, limit: int):
    """The compiled program compressed to `width` with a progress bar, validated."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

    from ..rasp.compress import compress
    from ..rasp.run import domain
    from ..rasp.validate import validate
    from .app import progress_display

    whole("--compress-steps", steps, 0, 1_000_000)
    with progress_display(
        TextColumn("compress"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()
    ) as bar:
        task = bar.add_task("compress", total=steps)
        result = compress(
            compiled,
            domain(compiled)[0],
            width,
            steps,
            progress=lambda s: bar.update(task, completed=s),
        )
    result.validation = validate(program, result.compressed, limit=limit)
    return result
