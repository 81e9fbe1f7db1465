"""An atlas of 200 runs on this machine: its cost (runs per core-hour) and its phase diagram.

    python bench/atlas_run.py [--atlas examples/atlas.toml] [--out runs/atlas-bench] [--workers 2]
    python bench/atlas_run.py --out DIR --time-log LOG    # an atlas already run under
                                                          # `/usr/bin/time -v flatformer atlas ...`
    python bench/atlas_run.py --ray                       # then the same atlas on local Ray

Runs `flatformer atlas` on the example atlas (50 drawn configurations x 4 seeds, p = 23,
d_model 32 or 48, 1,000 steps; examples/atlas.toml) in a subprocess with one BLAS thread per
process, and counts its CPU time (the command and its worker processes) and wall time. Or, with
--time-log, reads both from GNU time's report of the same command run earlier. Then prints runs
per core-hour and the diagram's counts: per bin of attn_coeff and width, each mechanism's runs,
with the median gradient symmetricity and distance irrelevance. With --ray, the same atlas file
runs again with `--ray auto` (a local Ray instance of --workers CPUs) into OUT-ray, timed the
same way, and its table is compared with the local one, every column but the times.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import record  # noqa: E402

from flatformer.atlas import MECHANISMS, phase_diagram, read_atlas  # noqa: E402
from flatformer.store.read import read_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


TIMES = ("job_seconds", "job_cpu_seconds")


def run(atlas: Path, out: Path, workers: int, ray: bool = False) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of `flatformer atlas` in a subprocess (on a local Ray
    instance with `ray`: its workers are the command's children too)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    where = ["--ray", "auto"] if ray else []
    subprocess.run(
        [sys.executable, "-m", "flatformer", "atlas", str(atlas), "--out", str(out)]
        + ["--workers", str(workers), "--y", "d_model", *where],
        check=True,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, time.perf_counter() - start


def from_time_log(path: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) from GNU time -v's report."""
    text = read_text(path, "time report", 1_000_000)
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", text).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", text).group(1))
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text).group(1)
    wall = 0.0
    for part in clock.split(":"):
        wall = wall * 60 + float(part)
    return user + system, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--atlas", type=Path, default=ROOT / "examples" / "atlas.toml")
    parser.add_argument("--out", type=Path, default=Path("runs") / "atlas-bench")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--time-log", type=Path)
    parser.add_argument("--ray", action="store_true", help="then the same on local Ray")
    args = parser.parse_args()
    load = os.getloadavg()
    cpu, wall = (
        from_time_log(args.time_log) if args.time_log else run(args.atlas, args.out, args.workers)
    )
    rows = read_atlas(args.out / "results.csv")
    if args.ray:
        ray_out = args.out.with_name(args.out.name + "-ray")
        _, ray_wall = run(args.atlas, ray_out, args.workers, ray=True)
        ray_rows = read_atlas(ray_out / "results.csv")
        # Ray's workers are the raylet's children, not this process's: their CPU is the jobs'
        # own, as each job measured it (one value per job).
        ray_cpu = sum({r["job"]: r["job_cpu_seconds"] for r in ray_rows}.values())
    with record(__file__, "An atlas of 200 runs on this machine"):
        print(f"atlas: {args.atlas.name}, {len(rows)} runs ({len({r['job'] for r in rows})} jobs)")
        print(
            f"{wall / 60:.1f} min wall, {cpu / 60:.1f} CPU-min (the command and its "
            f"{args.workers} worker processes, one BLAS thread each): "
            f"{len(rows) / (cpu / 3600):.0f} runs per core-hour"
        )
        print(
            f"load average {'at the start' if not args.time_log else 'now'}: "
            f"{', '.join(f'{x:.1f}' for x in load)} (on {os.cpu_count()} cores)"
        )
        if args.ray:

            def untimed(table):
                return sorted(
                    [{k: v for k, v in r.items() if k not in TIMES} for r in table],
                    key=lambda r: (r["job"], r["seed"]),
                )

            print(
                f"the same on local Ray ({args.workers} CPUs): {ray_wall / 60:.1f} min wall, "
                f"{ray_cpu / 60:.1f} CPU-min in the jobs, {len(ray_rows) / (ray_cpu / 3600):.0f} "
                f"runs per core-hour; table equal to the local one (every column but the times): "
                f"{untimed(ray_rows) == untimed(rows)}"
            )
        diagram = phase_diagram(rows, "attn_coeff", "d_model", bins=5)
        counts = diagram["counts"]
        print("\nruns per mechanism (clock/pizza/other) by attn_coeff bin, for each d_model")
        print(f"{'d_model':>8} " + " ".join(f"{label:>11}" for label in diagram["x_labels"]))
        for i, width in enumerate(diagram["y_labels"]):
            cells = ["/".join(str(int(n)) for n in counts[i, j]) for j in range(counts.shape[1])]
            print(f"{width:>8} " + " ".join(f"{c:>11}" for c in cells))
        print(
            "\nby mechanism: runs, median gradient_sim, median distance_irrelevance, median accuracy"
        )
        for kind in MECHANISMS:
            chosen = [r for r in rows if r["mechanism"] == kind]
            if chosen:
                print(
                    f"  {kind:<6} {len(chosen):>4}  "
                    + "  ".join(
                        f"{statistics.median(r[m] for r in chosen):.3f}"
                        for m in ("gradient_sim", "distance_irrelevance", "accuracy")
                    )
                )


if __name__ == "__main__":
    main()
