"""The batched trainer: every seed (and each seed's candidate inits) in lockstep, one NumPy
program, on the engine its job chose (engine/select.py). What it trains is a `jobs.Job`, how
a `recipes.Recipe`; it writes run folders (store/) of checkpoints (checkpoints.py)."""

from __future__ import annotations

import dataclasses
import json
from typing import Callable

import numpy as np

from ..store.checkpoints import Snapshot, checkpoint_layout, read_checkpoint
from ..tasks.windows import TaskData
from ..engine.model import Params, init_params, keep_freed_memory
from ..engine.optim import AdamW
from ..errors import FlatformerError
from .evaluate import check_indices, evaluate
from .jobs import Job
from .recipes import RECIPES, Recipe, get_recipe
from ..store.resources import check_fits
from ..store.runs import read_metrics
from ..store.layout import CHECKPOINTS, METRICS, checkpoint_name, checkpoint_path
from ..store.lock import hold_all
from ..store.run import resume_step, start_run
from ..store.write import WriteFailed, append_write, atomic_write, claim_folder

# Kept importable from here, where scripts, tests and the notebook import them.
__all__ = ["RECIPES", "Diverged", "Job", "Recipe", "Snapshot", "Trainer", "get_recipe", "train"]

CHUNK = 1000  # batches are drawn per seed in chunks of this many steps, keyed by (seed, chunk)


class Diverged(FlatformerError):
    pass


STEPS_PER_CALL = 100  # the compiled path runs at most this many steps between two reports


def batch_indices(seed: int, candidate: int, chunk: int, n_windows: int, batch: int):
    rng = np.random.default_rng([seed, candidate, chunk])
    return rng.integers(n_windows, size=(CHUNK, batch))


class Trainer:
    """Trains every (seed, candidate) member in lockstep; after `select_step`, one per seed.
    Starts from fresh initialisations, or from a snapshot taken at step `step`."""

    def __init__(
        self,
        job: Job,
        data: TaskData,
        progress: Callable | None = None,
        start: Snapshot | None = None,
        step: int = 0,
    ):
        self.job, self.data, self.progress = job, data, progress
        keep_freed_memory()
        if start is None:
            r = job.recipe
            members = [(s, c) for s in job.seeds for c in range(r.candidates)]
            rngs = [np.random.default_rng([s, c]) for s, c in members]
            flat = init_params(job.cfg, rngs, r.embed_init_scale).flat.astype(r.dtype, copy=False)
            start = Snapshot(
                members,
                flat,
                np.zeros_like(flat),
                np.zeros_like(flat),
                0,
                np.zeros(len(members)),
                0,
            )
        self.load(start)
        self.step = step
        self.metrics: list[list[dict]] = [[] for _ in self.members]
        # Rows of each member's metrics.jsonl this trainer wrote (None: rewrite it whole).
        self.written: list[int | None] = [None] * len(self.members)
        # Each seed's metrics file and checkpoints folder (strings: the checkpoints of 64 seeds
        # are 13,000 files, and pathlib cost a tenth of the run's time).
        self.metrics_files = [f"{out}/{METRICS}" for out in job.out_dirs]
        self.folders = [f"{out}/{CHECKPOINTS}/" for out in job.out_dirs]
        # While the candidates are tried, evaluations and checkpoints wait for the choice:
        # step -> (snapshot, training loss since the last evaluation or None, row due).
        self.waiting: dict[int, tuple[Snapshot, np.ndarray | None, bool]] = {}

    def load(self, snapshot: Snapshot):
        """Continue from `snapshot` (its buffers are used, not copied)."""
        r = self.job.recipe
        self.members = snapshot.members
        self.params = Params(self.job.cfg, len(self.members), snapshot.params)
        self.opt = AdamW(self.params.flat, r.betas, r.eps, r.weight_decay)
        self.opt.m, self.opt.v, self.opt.t = snapshot.m, snapshot.v, snapshot.t
        self._loss_sum, self._loss_n = snapshot.loss_sum, snapshot.loss_n
        self._batches = (-1, None)

    @property
    def selecting(self) -> bool:
        """Still training every candidate: checkpoints and metrics wait for the choice."""
        return len(self.members) > len(self.job.seeds)

    def state(self, i: int) -> tuple[dict, dict]:
        """Member i's weights and optimizer state now, as a checkpoint holds them."""
        return self.snapshot().checkpoint(self.job.cfg, i)

    def snapshot(self, copy: bool = False) -> Snapshot:
        """Where every member stands now (copied, or sharing the live buffers)."""
        own = np.copy if copy else (lambda x: x)
        return Snapshot(
            list(self.members),
            own(self.params.flat),
            own(self.opt.m),
            own(self.opt.v),
            self.opt.t,
            own(self._loss_sum),
            self._loss_n,
        )

    @classmethod
    def resume(cls, job: Job, data: TaskData, progress: Callable | None, step: int) -> "Trainer":
        """Continue each seed's run from its checkpoint at `step` (after any selection)."""
        states = [read_checkpoint(checkpoint_path(out, step)) for out in job.out_dirs]
        trainer = cls(
            job,
            data,
            progress,
            Snapshot.from_checkpoints(job.cfg, job.seeds, states, job.recipe.dtype),
            step,
        )
        trainer.metrics = [
            [m for m in read_metrics(out) if m["step"] <= step] for out in job.out_dirs
        ]
        return trainer

    def batch_starts(self, n: int) -> np.ndarray:
        """Where the training windows of the next n steps start, (n, S, B) (with a full batch,
        B is every training window); n must not cross a multiple of CHUNK."""
        r, data = self.job.recipe, self.data
        if r.full_batch:
            return np.broadcast_to(
                data.train_starts, (n, len(self.members), len(data.train_starts))
            )
        chunk = self.step // CHUNK
        if self._batches[0] != chunk:
            idx = np.stack(
                [
                    batch_indices(s, c, chunk, len(data.train_starts), r.batch_size)
                    for s, c in self.members
                ],
                1,
            )  # (CHUNK, S, B)
            self._batches = (chunk, idx)
        lo = self.step % CHUNK
        return data.train_starts[self._batches[1][lo : lo + n]]

    def diverged(self, seed_index: int):
        raise Diverged(
            f"loss became NaN at step {self.step + 1} (seed "
            f"{self.members[seed_index][0]}); the last good checkpoint is kept: lower "
            f"the learning rate (--set lr=...) and retrain"
        )

    def advance(self, n: int):
        """n training steps, on the job's engine, in calls of at most STEPS_PER_CALL steps that
        stay within one CHUNK of batches."""
        # Bound the window starts (K x S x B) so that 1,024 seeds stay small in memory.
        batch = (
            len(self.data.train_starts)
            if self.job.recipe.full_batch
            else self.job.recipe.batch_size
        )
        per_call = max(1, min(STEPS_PER_CALL, (1 << 20) // self.params.n_seeds // batch))
        while n > 0:
            k = min(n, per_call, CHUNK - self.step % CHUNK)
            lrs = [self.job.recipe.lr_at(self.step + j) for j in range(k)]
            bad = self.job.engine.train_steps(
                self.params,
                self.opt,
                self.data.train,
                self.batch_starts(k),
                self.job.recipe.drop_unseen,
                lrs,
                self._loss_sum,
            )
            if np.any(bad >= 0):
                first = int(bad[bad >= 0].min())
                self.step += first
                self._loss_n += first
                self.diverged(int(np.flatnonzero(bad == first)[0]))
            self.step += k
            self._loss_n += k
            n -= k

    def take_train_loss(self) -> np.ndarray | None:
        loss = self._loss_sum / self._loss_n if self._loss_n else None
        self._loss_sum, self._loss_n = np.zeros(len(self.members)), 0
        return loss

    def rows(self, step: int, params: Params, train_loss) -> list[dict]:
        val_loss, rule_error = evaluate(params, self.data, engine=self.job.engine)
        lr = self.job.recipe.lr_at(min(step, self.job.recipe.steps - 1))
        return [
            {
                "step": step,
                "train_loss": float((val_loss if train_loss is None else train_loss)[i]),
                "val_loss": float(val_loss[i]),
                "rule_error": float(rule_error[i]),
                "lr": lr,
            }
            for i in range(params.n_seeds)
        ]

    def record(self):
        """Evaluate now. While selecting, only note the training loss: the held-out numbers of
        the chosen candidates are computed from their snapshots at selection."""
        train_loss = self.take_train_loss()
        if self.selecting:
            self.waiting[self.step] = (self.snapshot(copy=True), train_loss, True)
            return
        for i, row in enumerate(self.rows(self.step, self.params, train_loss)):
            self.metrics[i].append(row)
            self.write_metrics(i)

    def write_metrics(self, i: int):
        """Append member i's new rows to its metrics.jsonl; a trainer's first write rewrites
        the file whole (a resumed run's may hold rows past the checkpoint it resumed from)."""
        rows, done = self.metrics[i], self.written[i]
        lines = "".join(json.dumps(m) + "\n" for m in rows[done or 0 :]).encode()
        (atomic_write if done is None else append_write)(self.metrics_files[i], lines)
        self.written[i] = len(rows)

    def checkpoint(self):
        if self.selecting:
            self.waiting.setdefault(self.step, (self.snapshot(copy=True), None, False))
        else:
            self.save_checkpoints(self.step, self.snapshot())

    def save_checkpoints(self, step: int, snapshot: Snapshot):
        """The checkpoint at `step` of each member of `snapshot` (one per seed), in its run
        folder: the bytes of runs.checkpoint_bytes(*snapshot.checkpoint(cfg, i)), built for
        all members at once."""
        layout, name = checkpoint_layout(self.job.cfg), checkpoint_name(step)
        for folder, row in zip(self.folders, snapshot.checkpoint_rows(self.job.cfg, layout.order)):
            atomic_write(folder + name, layout.to_bytes(row))

    def select(self):
        """Keep each seed's candidate with the lowest held-out rule error now (then the lowest
        held-out loss); write its checkpoints and metrics so far."""
        val_loss, rule_error = evaluate(self.params, self.data, engine=self.job.engine)
        chosen = []
        for s in self.job.seeds:
            idx = [i for i, (seed, _) in enumerate(self.members) if seed == s]
            chosen.append(min(idx, key=lambda i: (rule_error[i], val_loss[i])))
        cfg, r = self.job.cfg, self.job.recipe
        self.metrics = [[] for _ in chosen]
        self.written = [None] * len(chosen)
        for step, (snapshot, train_loss, row_due) in sorted(self.waiting.items()):
            kept = snapshot.subset(cfg, chosen)
            if step % r.checkpoint_every == 0:
                self.save_checkpoints(step, kept)
            if row_due:  # evaluated in float64, as the checkpoints hold the weights
                rows = self.rows(
                    step,
                    Params(cfg, len(chosen), kept.params.astype(np.float64)),
                    None if train_loss is None else train_loss[chosen],
                )
                for k, row in enumerate(rows):
                    self.metrics[k].append(row)
        self.waiting.clear()
        self.load(self.snapshot().subset(cfg, chosen))
        for i in range(len(self.members)):
            self.write_metrics(i)

    def run(self, until: int | None = None):
        r = self.job.recipe
        if self.progress:  # at once: a first run says it is compiling before it does
            self.progress(self)
        if self.selecting:  # whatever the evaluation compiles, under the compile notice
            self.job.engine.warm(self.params, self.data)
        if self.step == 0:
            self.checkpoint()
            self.record()
        end = until or r.steps
        while self.step < end:
            stops = [
                end,
                *(
                    self.step // e * e + e
                    for e in (r.eval_every, r.checkpoint_every, STEPS_PER_CALL)
                ),
            ]
            if self.selecting and r.select_step > self.step:
                stops.append(r.select_step)
            self.advance(min(stops) - self.step)
            if self.step % r.eval_every == 0 or self.step == r.steps:
                self.record()
            if self.step % r.checkpoint_every == 0 or self.step == r.steps:
                self.checkpoint()
            if self.selecting and self.step == r.select_step:
                self.select()
            if self.progress:
                self.progress(self)


def prepare_dirs(job: Job, resume: bool) -> int | None:
    """Make each seed's run folder; with `resume`, the step to resume from (None: afresh)."""
    for out in job.out_dirs:  # every folder checked before the first is written
        claim_folder(out, "--out")
    for seed, out in zip(job.seeds, job.out_dirs):
        start_run(out, job.run_config(seed), resume)
    return resume_step(job.out_dirs, job.recipe, job.cfg.n_params) if resume else None


MAX_MEMBERS = 64  # models stepped in lockstep while trying candidates; more spill the CPU cache


def try_candidates(job: Job, data: TaskData, progress: Callable | None) -> Trainer:
    """Train every seed's candidates up to the selection, a group of seeds at a time, and join
    the chosen ones into one trainer (each member's arithmetic is independent of its group)."""
    per_group = max(1, MAX_MEMBERS // job.recipe.candidates)
    parts = []
    for lo in range(0, len(job.seeds), per_group):
        sub = dataclasses.replace(
            job, seeds=job.seeds[lo : lo + per_group], out_dirs=job.out_dirs[lo : lo + per_group]
        )
        part = Trainer(sub, data, progress)
        part.run(until=job.recipe.select_step)
        parts.append((part.snapshot(), part.metrics))  # not the trainer: its batch indices
    joined = Trainer(
        job, data, progress, Snapshot.join(job.cfg, [s for s, _ in parts]), job.recipe.select_step
    )
    joined.metrics = [m for _, metrics in parts for m in metrics]
    return joined


def train(job: Job, resume: bool = False, progress: Callable | None = None) -> Trainer:
    """Train the job's seeds together; writes each seed's run folder, holding each folder's
    lock throughout (one writer per run). Returns the trainer."""
    data = TaskData.build(job.task, job.cfg.n_ctx, job.data_seed)  # bounded by the config limits
    if len(data.train_starts) == 0:
        raise FlatformerError(
            f"task {job.task.name} has no sequence longer than the context "
            f"of {job.cfg.n_ctx} tokens"
        )
    check_indices(data, job.cfg, job.out_dirs[0])
    check_fits(job, batch=len(data.train_starts) if job.recipe.full_batch else None)
    for out in job.out_dirs:  # every folder ours to write, before the lock is the first write
        claim_folder(out, "--out")
    # Locked only now, just before the first write: a job refused earlier leaves no folder.
    with hold_all(job.out_dirs, "training"):
        job.engine.prepare()
        try:
            return _train(job, data, resume, progress)
        except WriteFailed as exc:
            raise WriteFailed(f"{exc}: free some space, then continue with --resume") from None


def _train(job: Job, data: TaskData, resume: bool, progress: Callable | None) -> Trainer:
    start = prepare_dirs(job, resume)
    if start is not None and job.recipe.candidates > 1 and start < job.recipe.select_step:
        start = None  # killed while the candidates were still being tried: try them again
    if start:
        trainer = Trainer.resume(job, data, progress, start)
    elif job.recipe.candidates > 1:
        trainer = try_candidates(job, data, progress)
    else:
        trainer = Trainer(job, data, progress)
    trainer.run()
    return trainer
