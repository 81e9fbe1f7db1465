"""What every frame of a movie shows, computed before anything is drawn.

A run's checkpoints are tiny (250 parameters for the paper's model), so all of them are loaded
once into `Checkpoints`; each frame's step, held-out loss and rule error come with them. Scenes
(scenes.py) then compute their per-frame arrays from these models with the figure suite's
compute functions, and fix their axis limits over the whole movie.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FlatformerError
from ..store.runs import Run
from ..model.transformer import Transformer


@dataclass
class Checkpoints:
    """Every checkpoint of a run as a model, with the metrics each frame's caption shows."""

    run: Run
    steps: np.ndarray  # (F,) ascending
    models: list[Transformer]
    loss: np.ndarray  # (F,) held-out loss at each step
    rule_error: np.ndarray  # (F,)
    evaluated: np.ndarray  # (F,) bool: measured here because metrics.jsonl has no row

    def __len__(self) -> int:
        return len(self.steps)


def every_nth(steps: list[int], every: int) -> list[int]:
    """Every `every`-th checkpoint step, the last one always kept (`animate --every`)."""
    chosen = list(steps[::every])
    return chosen + [steps[-1]] if steps and chosen[-1] != steps[-1] else chosen


def load_checkpoints(run: Run, evaluate_missing: bool = True, every: int = 1) -> Checkpoints:
    """Load all checkpoints once; a clear error when there are fewer than two (no motion).

    Metrics are written every `eval_every` steps (200) and checkpoints every 100, so half the
    frames have no row in metrics.jsonl. Those are measured here with the same `evaluate` the
    trainer uses (the rows that do exist agree with it exactly), so every caption is a
    measurement at that frame's own weights, never an interpolation.
    """
    steps = every_nth(run.steps, every)
    if len(steps) < 2:
        raise FlatformerError(
            f"run {run.path} has {len(steps)} checkpoint"
            f"{'' if len(steps) == 1 else 's'}; a movie needs at least 2 "
            f"(train longer, or with a smaller checkpoint_every)"
        )
    weights = [run.weights(s) for s in steps]
    models = [Transformer(run.cfg, w) for w in weights]
    rows = {m["step"]: m for m in run.metrics}
    loss = np.array([rows[s]["val_loss"] if s in rows else np.nan for s in steps], dtype=float)
    rule = np.array([rows[s]["rule_error"] if s in rows else np.nan for s in steps], dtype=float)
    missing = np.array([s not in rows for s in steps])
    if evaluate_missing and missing.any():
        from ..training.evaluate import evaluate
        from ..engine.model import Params

        params = Params.stack(run.cfg, [w for w, m in zip(weights, missing) if m])
        loss[missing], rule[missing] = evaluate(params, run.data())
    return Checkpoints(run, np.array(steps), models, loss, rule, missing & evaluate_missing)


def caption(ck: Checkpoints, i: int) -> str:
    """The line over frame i: where in training it is and how well the model does there."""
    run = ck.run
    name = run.config.get("task", "")
    preset = run.config.get("preset", "")
    parts = [f"{name} · {preset}" if preset else name, f"step {ck.steps[i]:,} / {ck.steps[-1]:,}"]
    if np.isfinite(ck.loss[i]):
        parts.append(f"held-out loss {ck.loss[i]:.3f}")
    if np.isfinite(ck.rule_error[i]):
        parts.append(f"rule error {ck.rule_error[i]:.1%}")
    return "   ".join(parts)
