"""The `flatformer` command. Library code raises FlatformerError; only this layer prints."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from .errors import FlatformerError
from .jobs import build_job, capped_note

app = typer.Typer(
    help="flatformer: train a transformer small enough to see through, then look inside it.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    rich_markup_mode=None)
console = Console(stderr=True)
out = Console()


def print_version(value: bool):
    if value:
        from . import __version__
        print(f"flatformer {__version__}")
        raise typer.Exit()


@app.callback()
def options(version: bool = typer.Option(False, "--version", callback=print_version,
                                         is_eager=True, help="Print the version and exit.")):
    pass


def progress_display(*columns, transient: bool = False) -> Progress:
    """A rich progress display that degrades gracefully. Outside a terminal (a pipe, a log, CI)
    it draws nothing, and the command's own lines say what happened; the bar takes the width
    left over by the text, and under 100 columns the time left goes, so that at 80 columns
    nothing is cut to `0:00:…`."""
    if console.width < 100:
        columns = tuple(c for c in columns if not isinstance(c, TimeRemainingColumn))
    return Progress(*columns, console=console, transient=transient, expand=True,
                    disable=not console.is_interactive)


def training_progress(total_steps: int, label: str, note: str | None = None):
    """A rich progress bar and the trainer callback that feeds it every 100 steps; `note`, if
    any, is printed once above it."""
    progress = progress_display(TextColumn("{task.description}"), BarColumn(bar_width=None),
                                TextColumn("{task.completed:>5.0f}/{task.total:.0f}"),
                                TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                TimeRemainingColumn())
    bar = progress.add_task(label, total=total_steps, info="")
    shown = []

    def callback(trainer):
        if trainer.step % 100 and trainer.step != total_steps:
            return
        if not shown:  # the first report: a refused folder shows only its error
            shown.append(True)
            if note:
                console.print(note, markup=False, highlight=False, soft_wrap=True)
            progress.start()
        info = ""
        rows = [m[-1] for m in trainer.metrics if m]
        if rows:
            losses = [r["val_loss"] for r in rows]
            errors = [r["rule_error"] for r in rows]
            if len(rows) == 1:
                info = f"loss {losses[0]:.3f}, rule error {errors[0]:.1%}"
            else:
                info = (f"median loss {sorted(losses)[len(losses) // 2]:.3f}, "
                        f"rule error {sorted(errors)[len(errors) // 2]:.1%}")
        progress.update(bar, completed=trainer.step, info=info)
    return progress, callback


def run_training(job, resume: bool):
    from .train import train
    label = job.task.name if len(job.seeds) == 1 else f"{job.task.name} x{len(job.seeds)}"
    progress, callback = training_progress(job.recipe.steps, label, capped_note(job))
    try:
        return train(job, resume=resume, progress=callback)
    finally:
        progress.stop()


def floor_line(loss: float, floor: dict) -> str:
    """The held-out loss beside the lowest any model could reach (Task.loss_floor)."""
    return (f"held-out loss {loss:.4f} nats; the task's entropy rate {floor['entropy_rate']:.4f} "
            f"(the floor with endless context: {loss - floor['entropy_rate']:+.4f} above it), "
            f"the best possible on these held-out windows {floor['floor']:.4f} "
            f"({loss - floor['floor']:+.4f})")


@app.command()
def tasks():
    """List every task with its vocabulary size, default preset and measured rule error."""
    from .tasks import TASKS
    table = Table("task", "vocab", "default preset", "rule error", "what it asks")
    for name, cls in sorted(TASKS.items()):
        task = cls()
        table.add_row(name, str(len(task.vocab)), task.model_label(), task.measured or "-",
                      task.describe())
    out.print(table)


@app.command()
def train(
    task: Optional[str] = typer.Argument(None, help="Task name (see `flatformer tasks`); "
                                         "omit it with --corpus."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="Train on your own text file "
                                          "instead (see `flatformer corpus FILE`)."),
    tokenizer: Optional[str] = typer.Option(None, help="With --corpus: word (split at "
                                            "whitespace) or char [word]."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Run folder [runs/TASK-seedS]."),
    steps: Optional[int] = typer.Option(None, help="Training steps [recipe's, 20000]."),
    seed: int = typer.Option(0, min=0, help="Seed naming the initialisation and batch order."),
    seeds: Optional[str] = typer.Option(None, help="Train seeds A-B together, one folder each."),
    preset_name: Optional[str] = typer.Option(None, "--preset", help="Model preset [task's]."),
    recipe: Optional[str] = typer.Option(None, help="Recipe: default, paper or grokking "
                                         "[task's: default, or grokking for modular-addition]."),
    resume: bool = typer.Option(False, help="Continue a killed run where it stopped."),
    sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a model or recipe "
                                              "field, e.g. --set lr=3e-3 --set d_mlp=16."),
    dtype: Optional[str] = typer.Option(None, help="float64 (the default) or float32, for "
                                        "bigger models: half the memory, faster matrix "
                                        "products."),
    engine: str = typer.Option("auto", help="auto: compiled (numba) for models up to "
                               "d_model 32, else NumPy; numba; or numpy (the reference)."),
):
    """Train a model on a task and write its run folder."""
    sets = (list(sets or []) + ([f"steps={steps}"] if steps is not None else [])
            + ([f"dtype={dtype}"] if dtype is not None else []))
    job, folder = build_job(task, preset_name, recipe, seed, seeds, out_dir, sets, corpus,
                            tokenizer)
    job = dataclasses.replace(job, engine=engine)
    started = time.perf_counter()
    trainer = run_training(job, resume)
    finals = [m[-1] for m in trainer.metrics]
    seconds = time.perf_counter() - started
    if len(finals) == 1:
        out.print(f"{folder}: step {finals[0]['step']}, training loss "
                  f"{finals[0]['train_loss']:.4f}, held-out loss {finals[0]['val_loss']:.4f}, "
                  f"rule error {finals[0]['rule_error']:.2%} ({seconds:.1f} s)", markup=False,
                  soft_wrap=True)
        floor = job.task.loss_floor(trainer.data)
        if floor:
            out.print(floor_line(finals[0]["val_loss"], floor), markup=False, soft_wrap=True)
    else:
        learned = sum(f["rule_error"] <= 0.01 for f in finals)
        out.print(f"{folder}: {len(finals)} seeds, {learned} at rule error <= 1% "
                  f"({seconds:.1f} s)", markup=False, soft_wrap=True)


@app.command("eval")
def eval_cmd(run: Path = typer.Argument(..., help="A run folder."),
             step: Optional[int] = typer.Option(None, help="Checkpoint step [last]."),
             as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")):
    """Held-out loss and rule error of a run's checkpoint."""
    from .evaluate import evaluate_run
    result = evaluate_run(run, step)
    if as_json:
        print(json.dumps(result))
    else:
        out.print(f"{run}: step {result['step']}, held-out loss {result['loss']:.4f}, "
                  f"rule error {result['rule_error']:.2%}", markup=False, soft_wrap=True)
        if "loss_floor" in result:
            out.print(floor_line(result["loss"], result["loss_floor"]), markup=False,
                      soft_wrap=True)


@app.command()
def gradcheck(preset_name: str = typer.Option("paper-2d", "--preset", help="Model preset."),
              vocab: int = typer.Option(12, help="Vocabulary size."),
              layers: Optional[int] = typer.Option(None, help="Override n_layers.")):
    """Check the hand-written gradient against central differences: PASS when the worst
    relative error is at most 1e-6, else FAIL and a non-zero exit."""
    from .config import preset
    from .gradcheck import THRESHOLD
    from .gradcheck import gradcheck as check
    cfg = preset(preset_name, vocab, **({"n_layers": layers} if layers is not None else {}))
    worst = check(cfg)
    table = Table("tensor", "worst relative error")
    for name, err in worst.items():
        table.add_row(name, f"{err:.2e}")
    out.print(table)
    top = max(worst.values())
    verdict = "PASS" if top <= THRESHOLD else "FAIL"
    out.print(f"{verdict}: {preset_name} ({cfg.n_params} parameters), worst relative error "
              f"{top:.2e} {'<=' if top <= THRESHOLD else '>'} threshold {THRESHOLD:.0e}",
              markup=False, highlight=False, soft_wrap=True)
    if top > THRESHOLD:
        raise FlatformerError(f"gradient check failed: {top:.2e} > {THRESHOLD:.0e}")


@app.command()
def reproduce(task: str = typer.Option("plus-last-even", help="Task name."),
              preset_name: Optional[str] = typer.Option(None, "--preset", help="Preset [task's]."),
              out_dir: Path = typer.Option(Path("runs/reproduce"), "--out", help="Output folder."),
              force: bool = typer.Option(False, help="Replace a different run in --out."),
              sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a model "
                                                        "or recipe field, as for train.")):
    """The main job: train the paper's model, draw its figures and movies, write the explorer,
    the analysis and DIR/report.html. Re-running resumes the same run."""
    from .reproduce import reproduce as run_all
    run_all(task, preset_name, out_dir, force, console, list(sets or []))


def load_commands():
    """Import every module in flatformer/commands, each adding its commands to `app`."""
    import importlib
    import pkgutil

    from . import commands
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}")


def say_error(message: str):
    console.print(f"flatformer: error: {message}", markup=False, highlight=False, soft_wrap=True)


def refuse_empty_arguments(argv: list[str]):
    """An empty argument ('' from an unset shell variable, say) would become the current
    folder as a path: every value we take is non-empty."""
    for i, arg in enumerate(argv):
        if arg == "":
            after = f" after {argv[i - 1]}" if i else ""
            raise FlatformerError(f"an empty argument{after}: give a value")


def main(argv: list[str] | None = None):
    """The `flatformer` command (argv: the arguments, default sys.argv[1:])."""
    try:  # typer >= 0.20 carries its own copy of click
        from typer._click import exceptions as click
    except ImportError:
        from click import exceptions as click
    load_commands()
    argv = sys.argv[1:] if argv is None else argv
    import numpy as np
    np.seterr(all="ignore")  # a diverging run is reported once, by the trainer's NaN check
    try:
        refuse_empty_arguments(argv)
        # Not standalone: click's own usage errors (a bad option value) come here too, and are
        # said in the same one line as every other refusal.
        code = app(args=argv, prog_name="flatformer", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        exc.show()  # the help text, as `flatformer` alone has always shown
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = f" (see {exc.ctx.command_path} --help)" if exc.ctx else ""
        say_error(f"{' '.join(exc.format_message().split())}{where}")
        sys.exit(2)
    except click.ClickException as exc:
        say_error(" ".join(exc.format_message().split()))
        sys.exit(exc.exit_code or 2)
    except FlatformerError as exc:
        say_error(str(exc))
        sys.exit(2)
    except OSError as exc:
        say_error(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
        sys.exit(2)
    except (KeyboardInterrupt, typer.Abort):
        console.print("flatformer: interrupted (a training run continues with --resume)")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
