"""The main job: train the paper's model, then everything the later stages add."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console


def reproduce(task: str, preset: str | None, out_dir: Path, force: bool, console: Console):
    from .cli import build_job, run_training
    from .errors import FlatformerError
    import json
    import shutil

    job, _ = build_job(task, preset, "default", 0, None, Path(out_dir) / "run", [])
    run_dir = Path(out_dir) / "run"
    config = run_dir / "config.json"
    resume = False
    if config.exists():
        same = json.loads(config.read_text()) == job.run_config(0)
        if not same and not force:
            raise FlatformerError(f"{out_dir} holds a different run; pass --force to replace it "
                                  f"or choose another --out")
        if not same:
            shutil.rmtree(run_dir)
        else:
            resume = True
    console.print(f"[bold]1/1 train[/] {job.task.name} with {job.cfg.n_params} parameters "
                  f"into {run_dir}")
    run_training(job, resume)
