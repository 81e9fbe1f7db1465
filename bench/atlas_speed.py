"""Atlas throughput: runs per core-hour at Zhong et al.'s main setting, locally and on a local
Ray cluster of two workers, against the eager PyTorch loop a user would otherwise write.

    python bench/atlas_speed.py [--steps 20] [--seeds 0-1]

The spec: modular addition at p = 59, 80% of the pairs training, one layer, d_model 128, four
heads of 32 with W_O, a ReLU MLP of 512, full-batch AdamW at lr 1e-3 and weight decay 2 (the
paper's), attn_coeff 0 and 1 as two jobs of `--seeds` each (the seeds of a job train batched).
The paper trains 20,000 steps; this trains `--steps` (shortened: the time per step does not
depend on how far training has got, so the projection to 20,000 steps is a product), measures
each run (the atlas's measures) and writes no explorer pages.

1. The atlas in this process (--workers 1): wall and CPU seconds, and runs per core-hour from
   the CPU time each job spent in the process that ran it (results.csv's job_cpu_seconds:
   training, measuring; on a shared machine wall time says more about the other users).
2. The same atlas on a local Ray cluster of 2 workers (`--ray auto`): wall seconds, runs per
   core-hour from the jobs' CPU time in the Ray workers; the table must equal the local one,
   every measure, or the script fails.
3. The reference, in this process: the same model and full batch as an eager PyTorch (float32)
   AdamW step, the loop a user would write; ms per step for each engine and the ratio.
4. The projection: a run's CPU at the paper's 20,000 steps (the steps at the measured step
   cost, plus the run's fixed part: setup, evaluation, measures), and what N machines of this
   kind would do with a Ray worker on each core (the Ray jobs' CPU per run relative to local
   kept).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import record  # noqa: E402

from flatformer.atlas import run_atlas  # noqa: E402
from flatformer.training.jobs import JobSpec  # noqa: E402

PAPER_STEPS = 20_000
SPEC = """
tasks = ["modular-addition"]
recipes = ["grokking"]
seeds = "{seeds}"
sets = [{{attn_coeff = 0.0}}, {{attn_coeff = 1.0}}]
[set]
p = 59
train_fraction = 0.8
d_model = 128
n_heads = 4
d_head = 32
d_mlp = 512
lr = 0.001
weight_decay = 2.0
betas = [0.9, 0.98]
steps = {steps}
checkpoint_every = {checkpoint_every}
eval_every = {eval_every}
"""
OVERRIDES = dict(
    p=59,
    train_fraction=0.8,
    d_model=128,
    n_heads=4,
    d_head=32,
    d_mlp=512,
    lr=1e-3,
    weight_decay=2.0,
)


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def without_time(rows):
    return [
        {k: v for k, v in r.items() if k not in ("job_seconds", "job_cpu_seconds")} for r in rows
    ]


def job_seconds(rows) -> float:
    """The CPU seconds the jobs spent in the processes that ran them (one value per job)."""
    return sum({r["job"]: r["job_cpu_seconds"] for r in rows}.values())


def timed_atlas(spec: Path, out: Path, **kwargs):
    cpu, wall = cpu_seconds(), time.perf_counter()
    rows, failed = run_atlas(spec, out, explore=0, **kwargs)
    if failed:
        raise SystemExit(f"atlas failed: {failed[0]}")
    return rows, time.perf_counter() - wall, cpu_seconds() - cpu


def torch_step_ms(attn_coeff: float, repeat: int) -> float:
    """ms of CPU per full-batch AdamW step of the same model in eager PyTorch float32."""
    import torch

    torch.set_num_threads(1)
    job, _ = JobSpec(
        "modular-addition",
        overrides={**OVERRIDES, "attn_coeff": attn_coeff},
        out_dir=Path(tempfile.mkdtemp()) / "t",
    ).build()
    cfg, p = job.cfg, job.task.p
    train, _ = job.task.pairs(0)
    a, b = np.divmod(train, p)
    x = torch.tensor(np.stack([a, b, np.full_like(a, p)], 1))
    y = torch.tensor((a + b) % p)
    g = torch.Generator().manual_seed(0)
    d, h, dh, m, v = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab

    def param(*shape, scale):
        return torch.nn.Parameter(torch.randn(*shape, generator=g) * scale)

    W = dict(
        E=param(v, d, scale=d**-0.5),
        P=param(3, d, scale=d**-0.5),
        Q=param(h, d, dh, scale=d**-0.5),
        K=param(h, d, dh, scale=d**-0.5),
        V=param(h, d, dh, scale=d**-0.5),
        O=param(h, dh, d, scale=dh**-0.5),
        I=param(d, m, scale=d**-0.5),
        bI=param(m, scale=0.0),
        Out=param(m, d, scale=m**-0.5),
        bOut=param(d, scale=0.0),
        U=param(d, v, scale=d**-0.5),
    )
    mask = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    opt = torch.optim.AdamW(W.values(), lr=1e-3, weight_decay=2.0, betas=(0.9, 0.98))

    def step():
        e = W["E"][x] + W["P"]  # (B, 3, d)
        q = torch.einsum("btd,hde->bhte", e, W["Q"])
        k = torch.einsum("btd,hde->bhte", e, W["K"])
        val = torch.einsum("btd,hde->bhte", e, W["V"])
        scores = (q @ k.transpose(-1, -2)) / dh**0.5
        pattern = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
        pattern = attn_coeff * pattern + (1 - attn_coeff) * mask  # Zhong et al.'s rate
        z = e + torch.einsum("bhte,hed->btd", pattern @ val, W["O"])
        z = z + torch.relu(z @ W["I"] + W["bI"]) @ W["Out"] + W["bOut"]
        loss = torch.nn.functional.cross_entropy(z[:, -1] @ W["U"][:, :p], y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    start = time.process_time()
    for _ in range(repeat):
        step()
    return (time.process_time() - start) / repeat * 1000


def engine_step_ms(folder: Path, coeff: float, repeat: int) -> float:
    """CPU ms per training step of one seed in flatformer: the difference between trainings of
    2 x `repeat` and `repeat` steps (each evaluates and checkpoints at its start and end only,
    so the difference is `repeat` steps alone), after a warm-up run."""
    from flatformer.training.trainer import train

    def cost(steps: int, name: str) -> float:
        job, _ = JobSpec(
            "modular-addition",
            overrides={
                **OVERRIDES,
                "attn_coeff": coeff,
                "steps": steps,
                "eval_every": steps,
                "checkpoint_every": steps,
            },
            out_dir=folder / f"{name}{coeff}",
        ).build()
        start = time.process_time()
        train(job)
        return time.process_time() - start

    cost(1, "warm")
    return (cost(2 * repeat, "long") - cost(repeat, "short")) / repeat * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", default="0-1")
    parser.add_argument("--repeat", type=int, default=5, help="PyTorch steps timed")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    n_seeds = int(last or first) - int(first) + 1
    runs = 2 * n_seeds
    title = "Atlas throughput at the paper's setting"
    with record(__file__, title), tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        spec = folder / "paper.toml"
        spec.write_text(
            SPEC.format(
                seeds=args.seeds,
                steps=args.steps,
                checkpoint_every=args.steps,
                eval_every=args.steps,
            )
        )
        print(
            f"spec: p 59, d_model 128, 4 heads, d_mlp 512, 1 layer, full batch; attn_coeff 0 and "
            f"1 x seeds {args.seeds} = {runs} runs of {args.steps} steps (shortened from "
            f"{PAPER_STEPS:,}); every run measured; no explorer pages"
        )
        print(f"load average before: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        local, wall, cpu = timed_atlas(spec, folder / "local", workers=1)
        job_cpu = job_seconds(local)
        per_run = job_cpu / runs
        print(
            f"local, 1 process:  {wall:7.1f} s wall {cpu:7.1f} s CPU (the jobs' own "
            f"{job_cpu:.1f})  {3600 / per_run:7.1f} runs per core-hour ({per_run:.2f} CPU s a run)"
        )
        ray_rows, ray_wall, _ = timed_atlas(spec, folder / "ray", workers=2, ray="auto")
        ray_cpu = job_seconds(ray_rows)
        ray_per_run = ray_cpu / runs
        same = without_time(ray_rows) == without_time(local)
        print(
            f"Ray, 2 workers:    {ray_wall:7.1f} s wall  the jobs' CPU {ray_cpu:7.1f} s  "
            f"{3600 / ray_per_run:7.1f} runs per core-hour; table equal to the local one: {same}"
        )
        if not same:
            raise SystemExit("the Ray table differs from the local one")
        ms = {coeff: engine_step_ms(folder, coeff, args.repeat) for coeff in (0.0, 1.0)}
        print("per full-batch AdamW step of one seed, CPU ms")
        for coeff in (0.0, 1.0):
            t = torch_step_ms(coeff, args.repeat)
            print(
                f"  attn_coeff {coeff:.0f}: flatformer {ms[coeff]:7.1f}  eager PyTorch f32 "
                f"{t:7.1f}  x torch {t / ms[coeff]:.2f}"
            )
        # A run's CPU is its steps and a fixed part (setup, evaluation, measures): the steps
        # scale to the paper's length, the fixed part does not.
        step = sum(ms.values()) / len(ms) / 1000
        fixed = max(per_run - args.steps * step, 0.0)
        paper_run = PAPER_STEPS * step + fixed
        print(
            f"projection at {PAPER_STEPS:,} steps: {PAPER_STEPS:,} x {step * 1000:.1f} ms + "
            f"{fixed:.1f} s a run = {paper_run / 3600:.2f} core-hours, "
            f"{3600 / paper_run:.2f} runs per core-hour"
        )
        cores = os.cpu_count() or 1
        ray_ratio = per_run / ray_per_run
        for n in (1, 10, 100):
            rate = n * cores * ray_ratio * 3600 / paper_run
            print(
                f"  {n:>3} machines of {cores} cores on Ray, a worker a core: {rate:8.2f} runs "
                f"an hour; the paper's 7,843 fixed-width runs in {7843 / rate:,.0f} h"
            )
        print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
