"""`flatformer tasks`, `train`, `eval` and `gradcheck`: the tasks, training a job and checking
the engine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer
from rich import box
from rich.table import Table

from ..store.limits import strict_json
from ..errors import FlatformerError
from ..training.jobs import JobSpec, parse_seeds, parse_sets
from ..tasks.base import LEARNED
from .app import ProgressDisplay, app, out


def train_with_progress(job, resume: bool):
    """`pipeline.train_job` with a progress bar named after the task."""
    from ..publish.pipeline import train_job

    label = job.task.name if len(job.seeds) == 1 else f"{job.task.name} x{len(job.seeds)}"
    with ProgressDisplay({"train": label}) as progress:
        return train_job(job, resume, progress)


def floor_line(loss: float, floor: dict) -> str:
    """The held-out loss beside the lowest any model could reach (Task.loss_floor)."""
    return (
        f"held-out loss {loss:.4f} nats; the task's entropy rate {floor['entropy_rate']:.4f} "
        f"(the floor with endless context: {loss - floor['entropy_rate']:+.4f} above it), "
        f"the best possible on these held-out windows {floor['floor']:.4f} "
        f"({loss - floor['floor']:+.4f})"
    )


@app.command()
def tasks():
    """List every task with its vocabulary size, default preset and measured rule error."""
    from ..tasks import TASKS

    # Names never cut (they are what one types next); the description takes what is left.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("task", no_wrap=True)
    table.add_column("vocab", justify="right", no_wrap=True)
    table.add_column("default preset")
    table.add_column("rule error")
    table.add_column("what it asks")
    for name, cls in sorted(TASKS.items()):
        task = cls()
        table.add_row(
            name, str(len(task.vocab)), task.model_label(), task.measured or "-", task.describe()
        )
    out.print(table)


def rule_text(rule) -> str:
    """A run's rule error as shown, or that its task has no rule there to check (NaN: no
    held-out position is forced, as in a context too short for the task's rule)."""
    return "no rule to check" if rule is None or rule != rule else f"rule error {rule:.2%}"


@app.command()
def train(
    task: Optional[str] = typer.Argument(
        None, help="Task name (see `flatformer tasks`); omit it with --corpus."
    ),
    corpus: Optional[Path] = typer.Option(
        None, "--corpus", help="Train on your own text file instead (see `flatformer corpus FILE`)."
    ),
    tokenizer: Optional[str] = typer.Option(
        None, help="With --corpus: word (split at whitespace) or char [word]."
    ),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Run folder [runs/TASK-seedS]."),
    steps: Optional[int] = typer.Option(None, help="Training steps [recipe's, 20000]."),
    seed: int = typer.Option(0, min=0, help="Seed naming the initialisation and batch order."),
    seeds: Optional[str] = typer.Option(None, help="Train seeds A-B together, one folder each."),
    preset_name: Optional[str] = typer.Option(None, "--preset", help="Model preset [task's]."),
    recipe: Optional[str] = typer.Option(
        None,
        help="Recipe: default, paper or grokking "
        "[task's: default, or grokking for modular-addition].",
    ),
    resume: bool = typer.Option(False, help="Continue a killed run where it stopped."),
    sets: Optional[List[str]] = typer.Option(
        None, "--set", help="Override a model or recipe field, e.g. --set lr=3e-3 --set d_mlp=16."
    ),
    dtype: Optional[str] = typer.Option(
        None,
        help="float64, float32 (half the memory, faster matrix products) or auto: float64 "
        "for small steps (every preset), float32 from a few million parameters x positions "
        "a step or 100k parameters, whichever is the faster [auto].",
    ),
    engine: str = typer.Option(
        "auto",
        help="auto: compiled (numba) for float64 models up to "
        "d_model 32, else NumPy; numba; or numpy (the reference).",
    ),
):
    """Train a model on a task and write its run folder."""
    overrides = {
        **parse_sets(sets),
        **({"steps": steps} if steps is not None else {}),
        **({"dtype": dtype} if dtype is not None else {}),
    }
    seed_list = parse_seeds(seeds)
    job, folder = JobSpec(
        task,
        preset_name,
        recipe,
        seed,
        tuple(seed_list or ()) or None,
        out_dir,
        overrides,
        corpus,
        tokenizer,
        engine,
    ).build()
    started = time.perf_counter()
    trainer = train_with_progress(job, resume)
    finals = [m[-1] for m in trainer.metrics]
    seconds = time.perf_counter() - started
    if len(finals) == 1:
        out.print(
            f"{folder}: step {finals[0]['step']}, training loss "
            f"{finals[0]['train_loss']:.4f}, held-out loss {finals[0]['val_loss']:.4f}, "
            f"{rule_text(finals[0]['rule_error'])} ({seconds:.1f} s)",
            markup=False,
            soft_wrap=True,
        )
        floor = job.task.loss_floor(trainer.data)
        if floor:
            out.print(floor_line(finals[0]["val_loss"], floor), markup=False, soft_wrap=True)
    else:
        learned = sum(f["rule_error"] <= LEARNED for f in finals)
        out.print(
            f"{folder}: {len(finals)} seeds, {learned} at rule error <= {LEARNED:.0%} "
            f"({seconds:.1f} s)",
            markup=False,
            soft_wrap=True,
        )


@app.command("eval")
def eval_cmd(
    run: Path = typer.Argument(..., help="A run folder."),
    step: Optional[int] = typer.Option(None, help="Checkpoint step [last]."),
    corpus: Optional[Path] = typer.Option(
        None,
        "--corpus",
        help="A text in the run's vocabulary: its loss instead of the task's held-out set.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Held-out loss and rule error of a run's checkpoint, or its loss on a text (--corpus)."""
    if corpus is not None:
        return _eval_text(run, step, corpus, as_json)
    from ..training.evaluate import evaluate_run

    result = evaluate_run(run, step)
    if as_json:
        print(strict_json(result))
    else:
        rule = result["rule_error"]
        kept = result.get("rule_positions")
        sample = f" (on {kept[0]:,} of {kept[1]:,} positions, evenly spaced)" if kept else ""
        out.print(
            f"{run}: step {result['step']}, held-out loss {result['loss']:.4f}, "
            + rule_text(rule)
            + sample,
            markup=False,
            soft_wrap=True,
        )
        if "loss_floor" in result:
            out.print(
                floor_line(result["loss"], result["loss_floor"]), markup=False, soft_wrap=True
            )


def _eval_text(run: Path, step: Optional[int], corpus: Path, as_json: bool):
    from ..store.runs import load_run
    from ..training.text_loss import text_loss

    loaded = load_run(run)
    step = loaded.resolve_step(step)
    result = {"step": step, "corpus": str(corpus)}
    result.update(text_loss(loaded.model(step), loaded.task, corpus))
    if as_json:
        print(strict_json(result))
        return
    cut = f", its last {result['tokens']:,} tokens" if result["cut"] else ""
    out.print(
        f"{run}: step {step}, loss {result['loss']:.4f} nats per token on {corpus} "
        f"({result['predictions']:,} predictions{cut})",
        markup=False,
        soft_wrap=True,
    )


@app.command()
def gradcheck(
    preset_name: str = typer.Option("paper-2d", "--preset", help="Model preset."),
    vocab: int = typer.Option(12, help="Vocabulary size."),
    layers: Optional[int] = typer.Option(None, help="Override n_layers."),
):
    """Check the hand-written gradient against central differences: PASS when the worst
    relative error is at most 1e-6, else FAIL and a non-zero exit."""
    from ..config import preset
    from ..engine.gradcheck import THRESHOLD
    from ..engine.gradcheck import gradcheck as check

    cfg = preset(preset_name, vocab, **({"n_layers": layers} if layers is not None else {}))
    worst = check(cfg)
    table = Table("tensor", "worst relative error")
    for name, err in worst.items():
        table.add_row(name, f"{err:.2e}")
    out.print(table)
    top = max(worst.values())
    verdict = "PASS" if top <= THRESHOLD else "FAIL"
    out.print(
        f"{verdict}: {preset_name} ({cfg.n_params} parameters), worst relative error "
        f"{top:.2e} {'<=' if top <= THRESHOLD else '>'} threshold {THRESHOLD:.0e}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if top > THRESHOLD:
        raise FlatformerError(f"gradient check failed: {top:.2e} > {THRESHOLD:.0e}")
