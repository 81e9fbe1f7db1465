"""What a training job will need, estimated before it starts, and a refusal when the machine
does not have it: peak memory (members x parameters x (weights, gradients, two AdamW moments,
AdamW's two scratch buffers, the snapshots kept while candidates are tried) + the activations of
a step and of evaluation) and disk (checkpoints x their size + metrics). The estimates are
upper-bound-minded, not exact: their job is to turn "starts, then hangs or dies" into one line
that says what would fit.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..tasks.windows import VAL_WINDOWS
from ..errors import FlatformerError
from ..engine.engines import CHUNK, GROUP
from .layout import checkpoint_steps

BASE_MEMORY = 200 * 2**20  # the interpreter, NumPy and the task's data
# train.MAX_MEMBERS and train.CHUNK (train imports this module, so they cannot be read from
# there; a test holds them equal): candidates are tried this many members at a time, and batch
# indices are drawn this many steps at a time.
GROUP_MEMBERS = 64
TRAIN_CHUNK = 1000
EVAL_PIECE = GROUP * CHUNK  # seeds x held-out windows per evaluation forward pass


@dataclass
class Needs:
    memory: int  # bytes, peak
    disk: int  # bytes still to be written
    checkpoints: int  # checkpoint files still to be written, all seeds together
    checkpoint_bytes: int
    metrics: int  # bytes of metrics.jsonl, all seeds together


def gb(n: float) -> str:
    if n >= 1e8:
        return f"{n / 1e9:,.1f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def per_token_floats(cfg) -> int:
    """Floats a forward pass keeps per token for the backward pass (an upper bound)."""
    d, h, dh, t = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.n_ctx
    return cfg.n_layers * (6 * d + 4 * h * dh + 3 * h * t + 3 * cfg.d_mlp) + 3 * cfg.d_vocab + 2 * d


def memory_needed(cfg, recipe, n_seeds: int, batch: int | None = None) -> int:
    """Peak bytes; `batch` is the windows a step reads when not the recipe's batch_size (a
    full-batch recipe reads every training window)."""
    P, C, B, T = cfg.n_params, recipe.candidates, batch or recipe.batch_size, cfg.n_ctx
    per_group = max(1, GROUP_MEMBERS // C) if C > 1 else n_seeds
    members = max(n_seeds, min(n_seeds, per_group) * C)
    snapshots = 0
    if C > 1:  # while selecting, every checkpoint and evaluation keeps a copy of the state
        snapshots = (
            recipe.select_step // recipe.checkpoint_every
            + recipe.select_step // recipe.eval_every
            + 1
        )
    state = members * P * 8 * (6 + 3 * snapshots)
    step = members * B * T * per_token_floats(cfg) * 8 * 2  # forward cache and gradients
    batches = TRAIN_CHUNK * members * B * 8  # batch indices
    evaluation = (
        EVAL_PIECE * T * per_token_floats(cfg) + members * VAL_WINDOWS * T * cfg.d_vocab
    ) * 8
    return BASE_MEMORY + state + step + batches + evaluation


def checkpoint_size(cfg) -> int:
    """Weights and both AdamW moments in float64, and the safetensors header."""
    return 3 * cfg.n_params * 8 + 120 * (len(cfg.param_shapes()) + 8) + 64


def is_checkpoint_step(recipe, step: int) -> bool:
    return 0 <= step <= recipe.steps and (
        step % recipe.checkpoint_every == 0 or step == recipe.steps
    )


def estimate(job, batch: int | None = None) -> Needs:
    """The job's peak memory and the disk its checkpoints and metrics still need (checkpoints
    already on disk, from a run being resumed, are not counted again)."""
    size, r = checkpoint_size(job.cfg), job.recipe
    per_seed = r.steps // r.checkpoint_every + 1 + (r.steps % r.checkpoint_every > 0)
    count = 0
    for out in job.out_dirs:
        count += per_seed - sum(is_checkpoint_step(r, s) for s in checkpoint_steps(out))
    metrics = (job.recipe.steps // job.recipe.eval_every + 2) * 200 * len(job.out_dirs)
    return Needs(
        memory_needed(job.cfg, job.recipe, len(job.seeds), batch),
        count * size + metrics,
        count,
        size,
        metrics,
    )


def available_memory() -> int | None:
    """Bytes the kernel says a new process can use without swapping (MemAvailable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def free_disk(path) -> int:
    """Free bytes on the filesystem that holds `path` (or would, once it is created)."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def sparser_every(recipe, fit: int) -> int | None:
    """The smallest checkpoint interval under which `fit` checkpoints a seed hold the run (each
    interval also writes step 0 and the last step), one the recipe accepts: with candidates,
    a divisor of select_step, where the candidates are compared. None if there is none."""
    every = math.ceil(recipe.steps / (fit - 2))
    if recipe.candidates == 1:
        return every
    return next(
        (d for d in range(every, recipe.select_step + 1) if recipe.select_step % d == 0), None
    )


def check_fits(job, memory: int | None = None, disk: int | None = None, batch: int | None = None):
    """Refuse, in one line with both numbers and what would fit, a job larger than the machine's
    available memory or the free disk under its folders. `memory`/`disk` override what the
    machine reports (for tests)."""
    needs = estimate(job, batch)
    memory = available_memory() if memory is None else memory
    if memory is not None and needs.memory > memory:
        seeds = len(job.seeds)
        fit = max(
            (n for n in range(1, seeds) if memory_needed(job.cfg, job.recipe, n, batch) <= memory),
            default=0,
        )
        first = job.seeds[0]
        hint = (
            f"at most {fit} seeds fit (--seeds {first}-{first + fit - 1})"
            if fit
            else "not even one seed fits: choose a smaller model, batch_size or number of "
            "candidates"
        )
        if fit and job.recipe.candidates > 1:
            hint += " or fewer candidates (--set candidates=...)"
        raise FlatformerError(
            f"this job needs about {gb(needs.memory)} of memory ({seeds} seeds x "
            f"{job.recipe.candidates} candidates x {job.cfg.n_params:,} parameters, with AdamW "
            f"state and activations) but this machine has {gb(memory)} available; {hint}"
        )
    disk = free_disk(job.out_dirs[0]) if disk is None else disk
    if needs.disk > disk:
        per_seed = max(1, needs.checkpoints // len(job.out_dirs))
        # Checkpoints per seed that fit; every interval also writes step 0 and the last step.
        fit = (disk - needs.metrics) // (needs.checkpoint_bytes * len(job.out_dirs))
        every = sparser_every(job.recipe, fit) if fit >= 3 else None
        hint = (
            f"--set checkpoint_every={every} would fit"
            if every
            else "too few checkpoints per seed fit: free some space"
        )
        raise FlatformerError(
            f"this job writes about {gb(needs.disk)} ({per_seed:,} checkpoints x "
            f"{len(job.out_dirs)} seeds x {gb(needs.checkpoint_bytes)}) but {gb(disk)} is free "
            f"under {job.out_dirs[0]}; {hint}"
        )


MOVIE_GRID = 160  # movies.scenes.LANDSCAPE_RESOLUTION (a test holds them equal)
RENDER_PROCESS = 150 * 2**20  # a rendering process: matplotlib, a 1,280 x 720 canvas, encoder


def movie_memory(cfg, frames: int, movies: int, workers: int = 1) -> int:
    """Peak bytes of `animate`, upper-bound-minded. Kept for every frame until the movies are
    written: its checkpoint three times (the weights read, the frame's model, the stacked copy
    evaluated for missing metrics rows) and each movie's points (every token at every position,
    a few arrays of d_model floats). Per rendering process, on top: its figure and encoder and
    one frame's output landscape (a grid of probabilities, colours and entropy)."""
    weights = 3 * cfg.n_params * 8
    points = 8 * cfg.d_vocab * cfg.n_ctx * max(cfg.d_model, cfg.n_ctx) * 8
    grid = MOVIE_GRID**2 * (cfg.d_vocab + 8) * 8 * 2
    return BASE_MEMORY + frames * (weights + movies * points) + workers * (RENDER_PROCESS + grid)


def grid_bytes(cfg, resolution: int) -> int:
    """An output landscape over a resolution x resolution grid: a probability per token, its
    colours, argmax and entropy, and the softmax's scratch copy."""
    return resolution**2 * (cfg.d_vocab + 8) * 8 * 2


PASS_BYTES = 256 * 2**20  # a forward pass's cache when only some positions are read


def rows_per_pass(cfg, width: int, budget: int = PASS_BYTES) -> int:
    """Sequences of `width` tokens one forward pass may take within `budget` bytes of cache
    (every activation is kept), at least one: how the views that read a few positions of
    many sequences (figures, geometry, dictionaries) batch their passes."""
    return max(1, budget // (max(width, 1) * per_token_floats(cfg) * 8))


def figures_memory(cfg, jobs: int, resolution: int = 200) -> int:
    """Peak bytes of `figures`: the weights, the landscape (a plane model's only) and one
    forward pass (its cache: a few sequences, at least one of n_ctx tokens) computed before
    forking (shared), then each drawing process's own figure, landscape and forward pass."""
    grid = grid_bytes(cfg, resolution) if cfg.d_model == 2 else 0
    forward = max(PASS_BYTES, cfg.n_ctx * per_token_floats(cfg) * 8)
    shared = 3 * cfg.n_params * 8 + grid + forward
    return BASE_MEMORY + shared + jobs * (RENDER_PROCESS + grid + forward)


def compare_memory(cfg, seeds: int, landscapes: bool) -> int:
    """Peak bytes of `compare`: every seed's weights (read and stacked) and its evaluation on
    the held-out windows (logits for every token), and with the figures of a plane model each
    seed's aligned landscape (120 x 120) and one figure."""
    per_seed = 3 * cfg.n_params * 8 + VAL_WINDOWS * cfg.n_ctx * cfg.d_vocab * 8 * 2
    return (
        BASE_MEMORY
        + seeds * (per_seed + (grid_bytes(cfg, 120) if landscapes else 0))
        + RENDER_PROCESS
    )


HEAD_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_rot_q", "hook_rot_k")


def geometry_activations(cfg) -> int:
    """The representations `geometry` compares: every hook of the forward pass, a hook with
    heads counted once per head (rsa.stimuli.representations)."""
    from ..engine.model import hook_names

    total = 0
    for name in hook_names(cfg):
        last = name.rsplit(".", 1)[-1]
        if last in ("hook_k", "hook_v", "hook_rot_k"):
            total += cfg.n_kv_heads
        elif last in HEAD_HOOKS or last in ("hook_attn_scores", "hook_pattern"):
            total += cfg.n_heads
        else:
            total += 1
    return total


def geometry_memory(cfg, stimuli: int, width: int, checkpoints: int = 1) -> int:
    """Peak bytes of `geometry` on `stimuli` prompts of `width` tokens, upper-bound-minded:
    one forward pass's cache (every activation of every token of `rows_per_pass` stimuli), each activation's
    representation at the read positions (kept for each of `checkpoints` with --training),
    and per activation its two RDMs over the stimulus pairs, as arrays and as the report's
    numbers (a Python float in a list, ~32 bytes), with the ranks its comparisons take; and
    per activation a stimulus x stimulus matrix (a CKA's centred kernel, a Procrustes factor),
    all of one comparison at once, and their batched products."""
    pairs = stimuli * (stimuli - 1) // 2
    forward = min(stimuli, rows_per_pass(cfg, width)) * width * per_token_floats(cfg) * 8
    reads = checkpoints * stimuli * per_token_floats(cfg) * 8
    rdms = geometry_activations(cfg) * pairs * (2 * 8 + 2 * 32 + 2 * 8)
    grams = 2 * geometry_activations(cfg) * stimuli * stimuli * 8
    return BASE_MEMORY + 3 * cfg.n_params * 8 + forward + reads + rdms + grams


def geometry_fit(cfg, width: int, memory: int, checkpoints: int = 1) -> int:
    """The most stimuli of `width` tokens whose geometry fits in `memory` (0: not even 3)."""
    lo, hi = 0, 1
    while geometry_memory(cfg, hi, width, checkpoints) <= memory and hi < 10**7:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if geometry_memory(cfg, mid, width, checkpoints) <= memory else (lo, mid)
    return lo if lo >= 3 else 0


def check_memory(needed: int, what: str, hint: str, memory: int | None = None):
    """Refuse, in one line with both numbers and what would fit, work needing more than the
    machine's available memory (`memory` overrides what the machine reports)."""
    memory = available_memory() if memory is None else memory
    if memory is not None and needed > memory:
        raise FlatformerError(
            f"{what} needs about {gb(needed)} of memory but this machine has "
            f"{gb(memory)} available; {hint}"
        )
