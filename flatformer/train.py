"""Recipes and the batched trainer: many seeds, one NumPy program."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__
from .config import ModelConfig
from .data import TaskData
from .evaluate import evaluate
from .errors import FlatformerError
from .limits import MAX_STEPS, number, whole
from . import kernels
from .lock import hold_all
from .model import Params, backward, cross_entropy, forward, init_params, keep_freed_memory
from .optim import AdamW
from .resources import check_fits
from .runs import (CheckpointLayout, WriteFailed, append_write, atomic_write, check_optim,
                   checkpoint_name, checkpoint_path, read_checkpoint, read_metrics)
from .tasks.base import Task

CHUNK = 1000  # batches are drawn per seed in chunks of this many steps, keyed by (seed, chunk)


@dataclass(frozen=True)
class Recipe:
    """How to train. See RECIPES for the two named ones and why they differ."""

    steps: int = 20_000
    batch_size: int = 8
    full_batch: bool = False            # every training window each step (batch_size unused)
    lr: float = 1e-3
    schedule: str = "constant"          # constant | cosine (to lr * min_lr_ratio)
    min_lr_ratio: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-2
    drop_unseen: bool = False           # drop targets whose source lies before the window
    embed_init_scale: float = 1.0
    candidates: int = 1                 # inits tried per seed; the best at select_step goes on
    select_step: int = 0
    eval_every: int = 200
    checkpoint_every: int = 100
    dtype: str = "float64"              # float32: half the memory and twice BLAS's speed

    def __post_init__(self):
        for name, hi in (("steps", MAX_STEPS), ("batch_size", 4096), ("candidates", 64),
                         ("eval_every", MAX_STEPS), ("checkpoint_every", MAX_STEPS)):
            whole(f"recipe: {name}", getattr(self, name), 1, hi)
        whole("recipe: select_step", self.select_step, 0, MAX_STEPS)
        for name, lo, hi in (("lr", 1e-9, 1e6), ("min_lr_ratio", 0, 1), ("eps", 1e-30, 1),
                             ("weight_decay", 0, 10), ("embed_init_scale", 1e-6, 100)):
            number(f"recipe: {name}", getattr(self, name), lo, hi)
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise FlatformerError(f"recipe: betas must be two numbers, got {self.betas!r}")
        for b in self.betas:
            number("recipe: each of betas", b, 0, 0.999999)
        for name in ("full_batch", "drop_unseen"):
            if not isinstance(getattr(self, name), bool):
                raise FlatformerError(f"recipe: {name} must be true or false, got "
                                      f"{getattr(self, name)!r}")
        if self.schedule not in ("constant", "cosine"):
            raise FlatformerError("recipe: schedule must be constant or cosine")
        if self.dtype not in ("float64", "float32"):
            raise FlatformerError(f"recipe: dtype must be float64 or float32, got {self.dtype!r}")
        checks = [
            (self.candidates == 1 or 0 < self.select_step <= self.steps,
             "select_step must be in 1..steps when candidates > 1"),
            (self.candidates == 1 or self.select_step % self.checkpoint_every == 0,
             "select_step must be a multiple of checkpoint_every"),
        ]
        for ok, message in checks:
            if not ok:
                raise FlatformerError(f"recipe: {message}")

    def lr_at(self, step: int) -> float:
        """Learning rate for the update that takes the model from `step` to `step + 1`."""
        if self.schedule == "constant":
            return self.lr
        floor = self.lr * self.min_lr_ratio
        return floor + (self.lr - floor) * 0.5 * (1 + math.cos(math.pi * step / self.steps))

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["betas"] = list(self.betas)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Recipe":
        if not isinstance(data, dict):
            raise FlatformerError(f"recipe: must be an object of fields, got {data!r:.60}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise FlatformerError(f"recipe: unknown field(s) {', '.join(unknown)}")
        if isinstance(data.get("betas"), list):
            data = {**data, "betas": tuple(data["betas"])}
        return cls(**data)


RECIPES: dict[str, Recipe] = {
    # The source, literally: AdamW 1e-3, batch 8 of random windows, every target in the loss.
    "paper": Recipe(),
    # Ours. Each change, and why (measured over seeds 0-63 with bench/recipes.py):
    # - drop_unseen: about 18% of after-`+` targets in a random window name an even number that
    #   lies before the window starts; they are noise the model can only fit by guessing.
    # - lr 3e-3 with cosine decay: escapes the plateau sooner and settles at the end.
    # - embeddings initialised at 0.3x: big random embeddings start tokens in arbitrary places of
    #   the plane; in stalled runs `+` never moves away from the digits.
    # - 8 candidate inits per seed, trained batched for 1,000 steps; the one with the lowest
    #   held-out rule error (then held-out loss) goes on. Seeds that stall leave the plateau
    #   last, so the earliest leaver is a good bet; the batched engine makes the 8 trials cost
    #   about 1,500 single steps. The seed still names one reproducible final model.
    "default": Recipe(lr=3e-3, schedule="cosine", min_lr_ratio=0.1, drop_unseen=True,
                      embed_init_scale=0.3, candidates=8, select_step=1000),
    # Grokking (modular-addition): full-batch AdamW with weight decay 1.0 and betas 0.9/0.98, as
    # in Nanda et al. 2023, at 3x their learning rate, embeddings at N(0, 1/d_model) as theirs.
    # Tried at p = 53 (on a loaded machine): with 30% of the pairs no variant (lr 3e-3, 5e-3 or
    # 1e-2, weight decay 1 or 2, embeddings at N(0, 1) or N(0, 1/64); seed 0, an eager-PyTorch
    # replica and this engine) got past 3% test accuracy by step 3,500, and seed 0 was at 2.7%
    # after 6,000 float32 steps, though all memorised by step 500; 35% gave 3.7% and 40% 15.5%
    # at step 2,500. With 50%, float32, seeds 0-4 memorised by step 200-400 and passed 99% at
    # steps 1,000-2,000; in float64 only 2 of 5 had by step 1,500. Weight decay 2 groks by step
    # 300-600 but with memorisation (200-300): no gap to watch. So: 50% of the pairs, float32,
    # 4,000 steps (the last 2,000 clean up), a checkpoint every 200. Adam's eps 1e-6, not 1e-8:
    # once the pairs are fit the gradients are 1e-7 to 1e-6 per weight, which eps 1e-8 scales up
    # to full-size steps; they kept frequencies that nothing else uses in the embedding against
    # weight decay (seed 3: 10 and 19 held 13% of it at step 4,000). With 1e-6 weight decay
    # clears them: the key frequencies hold 94-99% of the embedding (seeds 0-4), not 79-93%.
    "grokking": Recipe(steps=4000, full_batch=True, lr=3e-3, betas=(0.9, 0.98), eps=1e-6,
                       weight_decay=1.0, embed_init_scale=0.125, eval_every=100,
                       checkpoint_every=200, dtype="float32"),
}


def get_recipe(name: str, **overrides) -> Recipe:
    """A named recipe with field overrides. A run shorter than the recipe's selection step
    chooses its candidate at the last checkpoint before its middle (or tries just one)."""
    if name not in RECIPES:
        raise FlatformerError(f"unknown recipe {name!r}; choose one of {', '.join(RECIPES)}")
    data = {**RECIPES[name].to_dict(), **overrides}
    steps, every = data["steps"], data["checkpoint_every"]
    if ("select_step" not in overrides and data["candidates"] > 1 and isinstance(steps, int)
            and isinstance(every, int) and every > 0 and data["select_step"] > steps // 2):
        data["select_step"] = min(data["select_step"], steps // 2 // every * every)
        if data["select_step"] == 0:
            data["candidates"] = 1
    return Recipe.from_dict(data)


class Diverged(FlatformerError):
    pass


ENGINES = ("auto", "numba", "numpy")
STEPS_PER_CALL = 100   # the compiled path runs at most this many steps between two reports


@dataclass
class Job:
    """One training program: a task, a model config, a recipe and the seeds to train together."""

    task: Task
    cfg: ModelConfig
    recipe: Recipe
    seeds: list[int]
    out_dirs: list[Path]
    data_seed: int = 0
    config_extra: dict = dataclasses.field(default_factory=dict)
    capped_from: int | None = None      # the steps asked for, when FLATFORMER_MAX_STEPS cut them
    engine: str = "auto"   # auto (compiled for small models it covers) | numba | numpy

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise FlatformerError(f"engine must be one of {', '.join(ENGINES)}, "
                                  f"got {self.engine!r}")
        if self.engine == "numba" and not self.coverable:
            raise FlatformerError("the compiled engine does not cover this model in "
                                  f"{self.recipe.dtype} (or numba is not installed); use "
                                  "--engine numpy")

    @property
    def coverable(self) -> bool:
        return kernels.supports(self.cfg) and self.recipe.dtype == "float64"

    @property
    def compiled(self) -> bool:
        """Whether training runs on the compiled path (kernels.py) rather than model.py: when
        forced, or by default where it is the faster (kernels.preferred). `auto` also leaves
        full-batch recipes to the NumPy engine: with every window in each step its matrix
        products win (modular-addition's default model, measured: 55 ms a step on the NumPy
        engine, 155 ms compiled, after a 4-minute compile on a loaded machine)."""
        if self.engine == "auto":
            return not self.recipe.full_batch and kernels.preferred(self.cfg, self.recipe.dtype)
        return self.engine == "numba"

    def run_config(self, seed: int) -> dict:
        return {"flatformer": __version__, "task": self.task.name, "seed": seed,
                "data_seed": self.data_seed, "vocab": list(self.task.vocab),
                "model": self.cfg.to_dict(), "recipe": self.recipe.to_dict(),
                **self.config_extra}


@dataclass
class Snapshot:
    """Every member's weights and optimizer state at one step, with the running training loss
    (so that a resumed or joined run writes the same metrics)."""

    members: list[tuple[int, int]]      # (seed, candidate) of each member, in order
    params: np.ndarray                  # the flat buffers of Params and AdamW
    m: np.ndarray
    v: np.ndarray
    t: int
    loss_sum: np.ndarray
    loss_n: int

    def subset(self, cfg: ModelConfig, chosen: list[int]) -> "Snapshot":
        """Only the members at indices `chosen`, in that order."""
        n = len(self.members)
        params, m, v = (Params(cfg, n, buf).select(chosen).flat
                        for buf in (self.params, self.m, self.v))
        return Snapshot([self.members[i] for i in chosen], params, m, v, self.t,
                        self.loss_sum[chosen], self.loss_n)

    @classmethod
    def join(cls, cfg: ModelConfig, parts: list["Snapshot"]) -> "Snapshot":
        """The members of several snapshots taken at the same step, one after another."""
        def joined(get):
            return Params.from_members(cfg, [row for p in parts for row in
                                             Params(cfg, len(p.members), get(p)).members()],
                                       get(parts[0]).dtype).flat
        return cls([m for p in parts for m in p.members], joined(lambda p: p.params),
                   joined(lambda p: p.m), joined(lambda p: p.v), parts[0].t,
                   np.concatenate([p.loss_sum for p in parts]), parts[0].loss_n)

    def checkpoint(self, cfg: ModelConfig, i: int) -> tuple[dict, dict]:
        """Member i's weights and optimizer state as a checkpoint holds them (float64 whatever
        the training dtype)."""
        n = len(self.members)
        m, v = (Params(cfg, n, buf).member(i).astype(np.float64) for buf in (self.m, self.v))
        optim = {"m": m, "v": v, "t": np.array([float(self.t)]),
                 "candidate": np.array([float(self.members[i][1])]),
                 "loss_sum": np.array([self.loss_sum[i]]),
                 "loss_n": np.array([float(self.loss_n)])}
        weights = {k: w.astype(np.float64) for k, w in Params(cfg, n, self.params).seed(i)
                   .items()}
        return weights, optim

    def checkpoint_rows(self, cfg: ModelConfig, order: list[str]) -> np.ndarray:
        """`checkpoint` of every member at once: one row of float64 numbers each, the tensors
        (the optimizer's as "optim.<key>") raveled in `order`."""
        n = len(self.members)
        weights = Params(cfg, n, self.params)
        columns = {**{name: view.reshape(n, -1) for name, view in weights.views.items()},
                   "optim.m": Params(cfg, n, self.m).members(),
                   "optim.v": Params(cfg, n, self.v).members(),
                   "optim.t": np.full(n, float(self.t)),
                   "optim.candidate": np.array([float(c) for _, c in self.members]),
                   "optim.loss_sum": self.loss_sum, "optim.loss_n": np.full(n, float(self.loss_n))}
        return np.concatenate([np.asarray(columns[name], dtype=np.float64).reshape(n, -1)
                               for name in order], axis=1)

    @classmethod
    def from_checkpoints(cls, cfg: ModelConfig, seeds: list[int],
                         states: list[tuple[dict, dict]], dtype) -> "Snapshot":
        """The inverse of `checkpoint`, one checkpoint per seed."""
        params = Params.stack(cfg, [w for w, _ in states]).flat.astype(dtype)
        m, v = (Params.from_members(cfg, [o[key] for _, o in states], dtype).flat
                for key in ("m", "v"))
        optims = [o for _, o in states]
        return cls([(s, int(o["candidate"][0])) for s, o in zip(seeds, optims)], params, m, v,
                   int(optims[0]["t"][0]), np.array([o["loss_sum"][0] for o in optims]),
                   int(optims[0]["loss_n"][0]))


@lru_cache(maxsize=16)
def checkpoint_layout(cfg: ModelConfig) -> CheckpointLayout:
    """Where each tensor lies in this model's checkpoint files (Snapshot.checkpoint's)."""
    n = cfg.n_params
    return CheckpointLayout({**cfg.param_shapes(), "optim.m": (n,), "optim.v": (n,),
                             **{f"optim.{key}": (1,) for key in ("t", "candidate", "loss_sum",
                                                                 "loss_n")}})


def batch_indices(seed: int, candidate: int, chunk: int, n_windows: int, batch: int):
    rng = np.random.default_rng([seed, candidate, chunk])
    return rng.integers(n_windows, size=(CHUNK, batch))


class Trainer:
    """Trains every (seed, candidate) member in lockstep; after `select_step`, one per seed.
    Starts from fresh initialisations, or from a snapshot taken at step `step`."""

    def __init__(self, job: Job, data: TaskData, progress: Callable | None = None,
                 start: Snapshot | None = None, step: int = 0):
        self.job, self.data, self.progress = job, data, progress
        keep_freed_memory()
        if start is None:
            r = job.recipe
            members = [(s, c) for s in job.seeds for c in range(r.candidates)]
            rngs = [np.random.default_rng([s, c]) for s, c in members]
            flat = init_params(job.cfg, rngs, r.embed_init_scale).flat.astype(r.dtype, copy=False)
            start = Snapshot(members, flat, np.zeros_like(flat), np.zeros_like(flat), 0,
                             np.zeros(len(members)), 0)
        self.load(start)
        self.step = step
        self.metrics: list[list[dict]] = [[] for _ in self.members]
        # Rows of each member's metrics.jsonl this trainer wrote (None: rewrite it whole).
        self.written: list[int | None] = [None] * len(self.members)
        # Each seed's metrics file and checkpoints folder (strings: the checkpoints of 64 seeds
        # are 13,000 files, and pathlib cost a tenth of the run's time).
        self.metrics_files = [f"{out}/metrics.jsonl" for out in job.out_dirs]
        self.folders = [f"{out}/checkpoints/" for out in job.out_dirs]
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
        return Snapshot(list(self.members), own(self.params.flat), own(self.opt.m),
                        own(self.opt.v), self.opt.t, own(self._loss_sum), self._loss_n)

    @classmethod
    def resume(cls, job: Job, data: TaskData, progress: Callable | None, step: int) -> "Trainer":
        """Continue each seed's run from its checkpoint at `step` (after any selection)."""
        states = [read_checkpoint(checkpoint_path(out, step)) for out in job.out_dirs]
        trainer = cls(job, data, progress, Snapshot.from_checkpoints(
            job.cfg, job.seeds, states, job.recipe.dtype), step)
        trainer.metrics = [[m for m in read_metrics(out) if m["step"] <= step]
                           for out in job.out_dirs]
        return trainer

    def batches(self, n: int):
        """Inputs, targets and loss weights of the next n steps, each (n, S, B, T)."""
        return self.data.train.windows(self.batch_starts(n), self.job.cfg.n_ctx,
                                       self.job.recipe.drop_unseen)

    def batch_starts(self, n: int) -> np.ndarray:
        """Where the training windows of the next n steps start, (n, S, B) (with a full batch,
        B is every training window); n must not cross a multiple of CHUNK."""
        r, data = self.job.recipe, self.data
        if r.full_batch:
            return np.broadcast_to(data.train_starts, (n, len(self.members),
                                                       len(data.train_starts)))
        chunk = self.step // CHUNK
        if self._batches[0] != chunk:
            idx = np.stack([batch_indices(s, c, chunk, len(data.train_starts), r.batch_size)
                            for s, c in self.members], 1)                     # (CHUNK, S, B)
            self._batches = (chunk, idx)
        lo = self.step % CHUNK
        return data.train_starts[self._batches[1][lo:lo + n]]

    def diverged(self, seed_index: int):
        raise Diverged(f"loss became NaN at step {self.step + 1} (seed "
                       f"{self.members[seed_index][0]}); the last good checkpoint is kept: lower "
                       f"the learning rate (--set lr=...) and retrain")

    def train_step(self):
        """One step on the NumPy engine (model.py), the reference."""
        (inputs,), (targets,), (weights,) = self.batches(1)
        # Only the positions some loss weight reads need logits (e.g. the answer position).
        read = np.flatnonzero(weights.any((0, 1)))
        if len(read) < weights.shape[2]:
            targets, weights = targets[..., read], weights[..., read]
        else:
            read = None
        logits, cache = forward(self.params, inputs, read=read)
        loss, dlogits = cross_entropy(logits, targets, weights)
        if not np.all(np.isfinite(loss)):
            self.diverged(int(np.flatnonzero(~np.isfinite(loss))[0]))
        grads = backward(self.params, cache, dlogits)
        self.opt.step(grads.flat, self.job.recipe.lr_at(self.step))
        self.step += 1
        self._loss_sum += loss
        self._loss_n += 1

    def advance(self, n: int):
        """n training steps, on the compiled path when it covers the model."""
        if not self.job.compiled:
            for _ in range(n):
                self.train_step()
            return
        # Bound the window starts (K x S x B) so that 1,024 seeds stay small in memory.
        batch = len(self.data.train_starts) if self.job.recipe.full_batch else \
            self.job.recipe.batch_size
        per_call = max(1, min(STEPS_PER_CALL, (1 << 20) // self.params.n_seeds // batch))
        while n > 0:
            k = min(n, per_call, CHUNK - self.step % CHUNK)
            lrs = [self.job.recipe.lr_at(self.step + j) for j in range(k)]
            bad = kernels.train_steps(self.params, self.opt, self.data.train,
                                      self.batch_starts(k), self.job.recipe.drop_unseen, lrs,
                                      self._loss_sum)
            if np.any(bad >= 0):
                first = int(bad[bad >= 0].min())
                self.step += first
                self.diverged(int(np.flatnonzero(bad == first)[0]))
            self.step += k
            self._loss_n += k
            n -= k

    def take_train_loss(self) -> np.ndarray | None:
        loss = self._loss_sum / self._loss_n if self._loss_n else None
        self._loss_sum, self._loss_n = np.zeros(len(self.members)), 0
        return loss

    def rows(self, step: int, params: Params, train_loss) -> list[dict]:
        val_loss, rule_error = evaluate(params, self.data)
        lr = self.job.recipe.lr_at(min(step, self.job.recipe.steps - 1))
        return [{"step": step, "train_loss": float((val_loss if train_loss is None
                                                    else train_loss)[i]),
                 "val_loss": float(val_loss[i]), "rule_error": float(rule_error[i]), "lr": lr}
                for i in range(params.n_seeds)]

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
        lines = "".join(json.dumps(m) + "\n" for m in rows[done or 0:]).encode()
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
        for folder, row in zip(self.folders, snapshot.checkpoint_rows(self.job.cfg,
                                                                      layout.order)):
            atomic_write(folder + name, layout.to_bytes(row))

    def select(self):
        """Keep each seed's candidate with the lowest held-out rule error now (then the lowest
        held-out loss); write its checkpoints and metrics so far."""
        val_loss, rule_error = evaluate(self.params, self.data)
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
            if row_due:   # evaluated in float64, as the checkpoints hold the weights
                rows = self.rows(step, Params(cfg, len(chosen), kept.params.astype(np.float64)),
                                 None if train_loss is None else train_loss[chosen])
                for k, row in enumerate(rows):
                    self.metrics[k].append(row)
        self.waiting.clear()
        self.load(self.snapshot().subset(cfg, chosen))
        for i in range(len(self.members)):
            self.write_metrics(i)

    def run(self, until: int | None = None):
        r = self.job.recipe
        if self.step == 0:
            self.checkpoint()
            self.record()
        end = until or r.steps
        while self.step < end:
            stops = [end, *(self.step // e * e + e for e in (r.eval_every, r.checkpoint_every,
                                                          STEPS_PER_CALL))]
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
    """Create run folders; with `resume`, the step to resume from (None: start afresh)."""
    for seed, out in zip(job.seeds, job.out_dirs):
        out = Path(out)
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        config_file = out / "config.json"
        wanted = job.run_config(seed)
        if config_file.exists():
            try:
                have = json.loads(config_file.read_text())
            except json.JSONDecodeError:
                have = None
            if have != wanted:
                raise FlatformerError(f"{out} holds a different run; choose another --out or "
                                      f"delete it")
            if not resume and any((out / "checkpoints").glob("step_*.safetensors")):
                raise FlatformerError(f"{out} already holds this run; pass --resume to continue "
                                      f"it or choose another --out")
        atomic_write(config_file, (json.dumps(wanted, indent=2) + "\n").encode())
    if not resume:
        return None
    common = None
    for out in job.out_dirs:
        steps = {int(p.stem[5:]) for p in (Path(out) / "checkpoints").glob("step_*.safetensors")
                 if p.stem[5:].isdigit()}
        common = steps if common is None else common & steps
    for step in sorted(common or (), reverse=True):
        try:
            for out in job.out_dirs:
                path = checkpoint_path(out, step)
                optim = read_checkpoint(path)[1]
                check_optim(path, optim, job.cfg.n_params)
                if not 0 <= optim["candidate"][0] < job.recipe.candidates:
                    raise FlatformerError(f"checkpoint {path} names an unknown candidate")
            return step
        except FlatformerError:
            continue
    return None


MAX_MEMBERS = 64  # models stepped in lockstep while trying candidates; more spill the CPU cache


def try_candidates(job: Job, data: TaskData, progress: Callable | None) -> Trainer:
    """Train every seed's candidates up to the selection, a group of seeds at a time, and join
    the chosen ones into one trainer (each member's arithmetic is independent of its group)."""
    per_group = max(1, MAX_MEMBERS // job.recipe.candidates)
    parts = []
    for lo in range(0, len(job.seeds), per_group):
        sub = dataclasses.replace(job, seeds=job.seeds[lo:lo + per_group],
                                  out_dirs=job.out_dirs[lo:lo + per_group])
        part = Trainer(sub, data, progress)
        part.run(until=job.recipe.select_step)
        parts.append((part.snapshot(), part.metrics))   # not the trainer: its batch indices
    joined = Trainer(job, data, progress, Snapshot.join(job.cfg, [s for s, _ in parts]),
                     job.recipe.select_step)
    joined.metrics = [m for _, metrics in parts for m in metrics]
    return joined


def train(job: Job, resume: bool = False, progress: Callable | None = None) -> Trainer:
    """Train the job's seeds together; writes each seed's run folder, holding each folder's
    lock throughout (one writer per run). Returns the trainer."""
    data = TaskData.build(job.task, job.cfg.n_ctx, job.data_seed)  # bounded by the config limits
    if len(data.train_starts) == 0:
        raise FlatformerError(f"task {job.task.name} has no sequence longer than the context "
                              f"of {job.cfg.n_ctx} tokens")
    check_fits(job, batch=len(data.train_starts) if job.recipe.full_batch else None)
    # Locked only now, just before the first write: a job refused earlier leaves no folder.
    with hold_all(job.out_dirs, "training"):
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
