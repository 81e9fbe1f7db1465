"""The held-out loss and the rule error, the headline metric."""

from __future__ import annotations

import numpy as np

from ..engine.model import Params
from ..engine.select import Engine, for_params
from ..tasks.windows import TaskData
from ..errors import FlatformerError
from ..store.runs import load_run


def logits_at(
    params: Params,
    inputs: np.ndarray,
    index: np.ndarray | None = None,
    engine: Engine | None = None,
):
    """Logits (S, W, T, V) for windows (W, T) shared by every seed; with `index` (W,), only the
    logits at that position of each window, (S, W, V). On `engine` (None: the one `auto`
    chooses for these weights, select.for_params)."""
    return (engine or for_params(params)).logits_at(params, inputs, index)


def evaluate(params: Params, data: TaskData, with_loss: bool = True, engine: Engine | None = None):
    """Per-seed held-out loss and rule error, each (S,), over the whole held-out set.

    The loss covers 400 fixed held-out windows (every held-out example for a task of fixed
    examples, only where the rule forces the target); the rule error every held-out position
    the rule constrains and the context can see, each read from the window that ends just before
    it: the fraction where the top prediction is not among the tokens the rule allows. On
    `engine`, as logits_at.
    """
    return (engine or for_params(params)).evaluate(params, data, with_loss)


def check_indices(data: TaskData, cfg, path):
    """Prove every index the kernels will read in range before they run: token ids below
    d_vocab (rows of W_E and W_U), windows no longer than n_ctx (rows of W_pos). The compiled
    kernels do not check bounds, so a violation would read past a weight matrix; the trainer
    and `evaluate_run`, which hand the kernels this data, both call it first."""
    arrays = {
        name: getattr(data, name, None) for name in ("val_inputs", "rule_inputs", "val_targets")
    }
    train = getattr(data, "train", None)
    if train is not None:  # a training stream's masked targets are -1: only the top is checked
        arrays["train"] = train.tokens
        arrays["train targets"] = np.maximum(train.target, 0)
    for name, ids in arrays.items():
        ids = np.asarray(ids if ids is not None else np.zeros((0, 0), int))
        if ids.size and (ids.min() < 0 or ids.max() >= cfg.d_vocab):
            raise FlatformerError(
                f"run {path}: the task's token ids reach {ids.max()}, beyond "
                f"the model's vocabulary of {cfg.d_vocab}"
            )
        if name in ("val_inputs", "rule_inputs") and ids.ndim == 2 and ids.shape[1] > cfg.n_ctx:
            raise FlatformerError(
                f"run {path}: the task's windows are {ids.shape[1]} tokens, "
                f"longer than the model's context of {cfg.n_ctx}"
            )


def evaluate_run(path, step: int | None = None) -> dict:
    """{"step", "loss", "rule_error"} of a run folder's checkpoint (default: the last), and
    "loss_floor" when the task knows the lowest loss any model could reach (Task.loss_floor);
    "rule_positions" [measured, all] when the rule error read a sample of its positions."""
    run = load_run(path)
    step = run.resolve_step(step)
    params = Params.stack(run.cfg, [run.weights(step)])
    data = TaskData.build(run.task, run.cfg.n_ctx, run.config.get("data_seed", 0))
    check_indices(data, run.cfg, path)
    if len(data.val_inputs) == 0 and len(data.rule_targets) == 0:
        raise FlatformerError(
            f"run {path} has no held-out windows of {run.cfg.n_ctx} tokens "
            f"to evaluate on: its loss and rule error are undefined"
        )
    loss, rule_error = evaluate(params, data)
    if not (np.isfinite(loss[0]) or len(data.val_inputs) == 0):
        raise FlatformerError(
            f"run {path}, step {step}: the held-out loss is not finite (its "
            f"weights are so large that softmax overflows)"
        )
    result = {"step": step, "loss": float(loss[0]), "rule_error": float(rule_error[0])}
    if len(data.rule_inputs) < data.rule_total:  # a sample of the positions (windows.py)
        result["rule_positions"] = [len(data.rule_inputs), data.rule_total]
    floor = run.task.loss_floor(data)
    return {**result, "loss_floor": floor} if floor else result
