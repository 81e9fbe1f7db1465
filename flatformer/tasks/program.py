"""The task of a compiled program: its inputs, and the program's value at every position.

A compiled model (`flatformer compile`) reads BOS followed by the input values, and its logits
at position i + 1 name the program's value at position i among the output classes
(`Run.vocab_out`). Its targets are those classes, not next tokens: what `eval`, `analyze`,
`figures` and `geometry` measure on is the held-out set recorded at compile time, every input
of `max_len` values (a seeded sample where there are more), with the interpreter's value at each
position as the class id (-1 where the program gives no value, or one outside the classes).

Its rule error is the program's: the fraction of positions where the model's top class is not
the program's value. Held-out windows are whole inputs, read at every position: a model that
attends both ways sees the whole input wherever it is read.
"""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .imported import ImportedTask

MAX_INPUTS = 4096  # the held-out inputs a run records


class ProgramTask(ImportedTask):
    name = "program"
    answer_only = True  # only positions with a value count, as the program's rule says
    labelled = True

    def __init__(self, vocab: list[str], classes: list[str], inputs, targets):
        super().__init__(vocab)
        self.classes = list(classes)
        self.inputs = np.asarray(inputs, dtype=np.int64)
        self.targets = np.asarray(targets, dtype=np.int64)
        ok = (
            self.inputs.ndim == 2
            and self.inputs.shape == self.targets.shape
            and 0 < len(self.inputs) <= MAX_INPUTS
            and self.inputs.shape[1] > 1
            and ((self.inputs >= 0) & (self.inputs < len(self.vocab))).all()
            and ((self.targets >= -1) & (self.targets < len(self.classes))).all()
        )
        if not ok:
            raise FlatformerError(
                "a compiled run's held-out set must be inputs and class ids of one shape, "
                f"at most {MAX_INPUTS} inputs, tokens and classes in range"
            )
        # The figures trace an input of as many different values as any
        varied = self.inputs[np.argmax([len(set(row)) for row in self.inputs])]
        self.demo = self.decode(varied)
        self.focus = self.vocab[int(varied[1])]

    def config_extra(self) -> dict:
        return {}  # the held-out set lives in the run's `imported.rasp` record

    def split(self, data_seed: int = 0):
        """The recorded inputs, as both sets: a compiled model is never trained."""
        rows = list(self.inputs)
        return rows, rows

    def rule(self, seq):
        """No next-token rule: the program's values are classes, read by `labelled_data`."""
        return np.full(len(seq), -1), np.full(len(seq), -1)

    def allowed(self, seq):
        return np.ones((len(seq), len(self.vocab)), dtype=bool), np.full(len(seq), -1)

    def labelled_data(self, n_ctx: int):
        """The held-out set as `TaskData`: every input whole (`val_inputs`), its class ids as
        targets (weight 0 where the program gives none, BOS among them), and one rule window
        per valued position: the whole input, read there, its class the only one allowed."""
        from .windows import Corpus, TaskData

        if self.inputs.shape[1] > n_ctx:
            raise FlatformerError(
                f"a compiled run's inputs are {self.inputs.shape[1]} tokens; the model reads "
                f"{n_ctx}"
            )
        lengths = np.full(len(self.inputs), self.inputs.shape[1])
        starts = np.arange(len(self.inputs)) * self.inputs.shape[1]
        flat = self.inputs.reshape(-1)
        none = np.full(len(flat), -1)
        corpus = Corpus(flat, none, none, starts, starts + lengths)
        valued = self.targets >= 0
        row, position = np.nonzero(valued)
        allowed = np.zeros((len(row), len(self.classes)), dtype=bool)
        allowed[np.arange(len(row)), self.targets[row, position]] = True
        return TaskData(
            train=corpus,
            held_out=corpus,
            train_starts=np.zeros(0, dtype=np.int64),  # nothing to train on
            val_inputs=self.inputs,
            val_targets=np.where(valued, self.targets, 0),
            val_weights=valued.astype(np.float64),
            rule_inputs=self.inputs[row],
            rule_index=position,
            rule_targets=self.targets[row, position],
            rule_allowed=allowed,
        )


def program_for_run(config: dict, record: dict) -> ProgramTask:
    """The task of a compiled run from its config's `imported.rasp` record; one line when the
    run was compiled before runs recorded their held-out set."""
    held = record.get("held_out")
    if not isinstance(held, dict):
        raise FlatformerError(
            "this compiled run records no held-out inputs to measure on: compile it again "
            "with flatformer compile"
        )
    classes = record.get("classes")
    if not isinstance(classes, list):
        raise FlatformerError("a compiled run's config names no output classes")
    try:
        return ProgramTask(config["vocab"], classes, held.get("inputs"), held.get("targets"))
    except (TypeError, ValueError):  # ragged or non-numeric lists from a hand-edited config
        raise FlatformerError(
            "a compiled run's held-out set must be inputs and class ids of one shape"
        ) from None
