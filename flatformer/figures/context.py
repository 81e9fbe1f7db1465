"""Everything the figures of one checkpoint share, each computed once on first use."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ..readout.labels import labels
from ..errors import FlatformerError
from ..store.runs import Run
from . import compute as C
from .style import OTHER_COLOR, token_colors


class FigureContext:
    """A run at one checkpoint, with the traced sequence and the shared computations.

    Figure compute functions take this and read what they need: `embeddings`, `projections`,
    `trace`, `landscape` (one grid, reused by every landscape figure), `rule_windows`...
    """

    def __init__(
        self, run: Run, step: int | None = None, sequence: str | None = None, resolution: int = 200
    ):
        self.run = run
        self.step = run.resolve_step(step)
        self.task = run.task
        self.vocab = labels(run.vocab)  # display text: escaped for matplotlib and cut
        self.cfg = run.cfg
        self.resolution = resolution
        self.model = run.model(self.step)
        self.sequence = self._sequence(sequence)

    def _sequence(self, text: str | None) -> np.ndarray:
        if text is None:
            text = self.task.demo
            if not text:  # a task without a demo: the start of the first held-out sequence
                return np.asarray(self.held_out[0][: self.cfg.n_ctx])
        if not text.split():
            raise FlatformerError(
                "--sequence is empty: give space-separated tokens, e.g. "
                f"{self.task.demo or ' '.join(self.vocab[:4])!r}"
            )
        tokens = self.task.encode(text)
        return self.model.check_tokens(tokens)[0]

    @cached_property
    def split(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The task's (training, held-out) sequences for the run's data seed."""
        return self.task.split(self.run.config.get("data_seed", 0))

    @property
    def held_out(self) -> list[np.ndarray]:
        return self.split[1]

    @cached_property
    def shown(self) -> C.Shown:
        """The tokens and positions the point figures show (every one of a small model)."""
        counts = np.zeros(self.cfg.d_vocab)
        if self.cfg.d_vocab * self.cfg.n_ctx > C.MAX_POINTS:  # only then are tokens chosen
            seed = self.run.config.get("data_seed", 0)
            counts = C.held_out_counts(self.task, seed, self.cfg.d_vocab)
        return C.shown_points(
            self.cfg.d_vocab, self.cfg.n_ctx, counts, self.focus, self.focus_position
        )

    @cached_property
    def colors(self) -> list[str]:
        """A colour per token of the vocabulary: when the figures show only some tokens, those
        take the palette's distinct colours and the others one gray."""
        focus = self.task.focus or None
        if len(self.shown.tokens) == self.cfg.d_vocab:
            return token_colors(self.run.vocab, focus)
        picked = token_colors([self.run.vocab[t] for t in self.shown.tokens], focus)
        colors = [OTHER_COLOR] * self.cfg.d_vocab
        for t, color in zip(self.shown.tokens, picked):
            colors[t] = color
        return colors

    @cached_property
    def classes(self) -> list[str]:
        """The logits' names as display text: the vocabulary's, or a compiled program's
        output values."""
        return labels(self.run.vocab_out) if self.task.labelled else self.vocab

    @cached_property
    def class_colors(self) -> list[str]:
        """A colour per logit: the tokens' own, or a compiled program's values' in turn."""
        return token_colors(self.run.vocab_out) if self.task.labelled else self.colors

    @property
    def shown_vocab(self) -> list[str]:
        return [self.vocab[t] for t in self.shown.tokens]

    @property
    def shown_colors(self) -> list[str]:
        return [self.colors[t] for t in self.shown.tokens]

    @property
    def shown_focus(self) -> tuple[int, int]:
        """The focus token and position as indices into the shown points."""
        return self.shown.local(self.focus, self.focus_position)

    @cached_property
    def focus(self) -> int:
        return C.focus_token(self.task)

    @cached_property
    def focus_position(self) -> int:
        return C.default_focus_position(self.cfg.n_ctx)

    @cached_property
    def embeddings(self) -> C.Embeddings:
        """The shown points' embeddings (every point's, for a small model)."""
        if self.shown.every:
            return C.embeddings(self.model, self.vocab)
        return C.embeddings(
            self.model, self.vocab, tokens=self.shown.tokens, positions=self.shown.positions
        )

    @cached_property
    def projections(self) -> C.Projections:
        """The shown points' queries, keys and values (every point's, for a small model)."""
        if self.shown.every:
            return C.projections(self.model)
        return C.projections(self.model, self.shown.tokens, self.shown.positions)

    @cached_property
    def trace(self) -> C.Trace:
        return C.trace(self.model, self.sequence, self.vocab)

    @cached_property
    def written(self) -> np.ndarray:
        """(V, T, d): what block 0's attention adds to the residual when every head attends only
        to this key point: the "value vectors" drawn in the residual plane."""
        return self.projections.written.sum(2)

    @cached_property
    def limits(self):
        """Shared limits of every figure drawn in the residual plane: they cover the combined
        points, the value vectors and the traced sequence before and after attention."""
        plane = self.embeddings.plane
        last = self.trace.blocks[-1]
        return C.square_limits(
            self.embeddings.combined_2d,
            plane.project(self.written),
            plane.project(last.resid_pre),
            plane.project(last.resid_mid),
        )

    @cached_property
    def landscape(self) -> C.Landscape:
        return C.landscape(self.model, self.limits, self.resolution)

    @cached_property
    def rule_windows(self):
        """Held-out windows ending just before a rule-constrained position, as the rule error
        counts them: (inputs (R, T), index (R,) of the prediction in each window, forced target
        (R,) or -1 where several tokens are allowed, allowed tokens (R, V))."""
        from ..tasks.windows import Corpus

        if self.task.labelled:  # a compiled program: whole inputs, read at every position
            data = self.task.labelled_data(self.cfg.n_ctx)
            return data.rule_inputs, data.rule_index, data.rule_targets, data.rule_allowed
        held = Corpus.from_sequences(self.task, self.held_out, with_allowed=True)
        return held.rule_windows(self.cfg.n_ctx)

    @cached_property
    def grokking(self) -> dict:
        """The modular-addition progress measures over the checkpoints up to this one."""
        from ..analysis.grokking import progress

        return progress(self.run, [s for s in self.run.steps if s <= self.step])

    @property
    def positions_note(self) -> str:
        """Why p is zero where positions do not enter the residual stream ("" where they do)."""
        if self.cfg.rotary:
            return "p = 0: rotary positions turn the queries and keys, the stream holds none"
        if self.cfg.shortformer:
            return "p = 0 in the stream: shortformer positions enter the queries' and keys' inputs"
        return ""

    def block_note(self, layer: int = 0) -> str:
        """A remark naming the block (and head) shown, for models with more than one."""
        parts = []
        if self.cfg.n_layers > 1:
            parts.append(f"block {layer} of {self.cfg.n_layers}")
        if self.cfg.n_heads > 1:
            parts.append(f"head 0 of {self.cfg.n_heads}")
        if self.cfg.grouped:
            parts.append(
                f"its keys and values shared by {self.cfg.n_heads // self.cfg.n_kv_heads} heads"
            )
        if self.cfg.rotary:
            parts.append("queries and keys rotated by position (rotary)")
        if self.cfg.shortformer:
            parts.append("positions enter the queries and keys only (shortformer)")
        return ", ".join(parts)

    @property
    def title(self) -> str:
        return f"{self.task.name}, step {self.step}"
