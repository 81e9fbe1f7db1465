"""The first run and every run after it: `flatformer train plus-last-even`, cold and warm.

    python bench/first_run.py [--warm 2]

Cold: numba's cache is an empty folder (NUMBA_CACHE_DIR), as on a fresh install, so the run
compiles the engine's kernels before it trains. Warm: the same command again with that cache
filled, as every later run is. Then cold again on one core, where no second process compiles
beside the command. Each run trains into its own temporary folder with the task's default
preset and recipe, and prints one row: wall seconds, CPU seconds (of the command and
everything it started) and the machine's load average (1 min) before it. On a shared machine
the CPU seconds are the better guess at an idle machine's wall time.
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_run(out: Path, cache: Path, cores=None) -> tuple[float, float, float]:
    """(wall s, CPU s, load before) of one `flatformer train` into `out`, on `cores` (a set of
    core numbers; None: every core this process may use)."""
    load = os.getloadavg()[0]
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    env.pop("FLATFORMER_MAX_STEPS", None)  # the whole default run, as a user's first is
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "flatformer", "train", "plus-last-even", "--out", str(out)],
        env=env,
        check=True,
        capture_output=True,
        preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores),
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, load


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=2, help="warm runs after the cold one")
    args = parser.parse_args()
    print("| run | wall s | CPU s | load (1 min) before |")
    print("| --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "numba-cache"
        cache.mkdir()
        for i in range(1 + args.warm):
            kind = "cold: empty compile cache" if i == 0 else f"warm {i}: cache filled"
            wall, cpu, load = timed_run(Path(tmp) / f"run{i}", cache)
            print(f"| {kind} | {wall:.1f} | {cpu:.1f} | {load:.1f} |", flush=True)
        if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
            one = Path(tmp) / "numba-cache-one-core"
            one.mkdir()
            wall, cpu, load = timed_run(Path(tmp) / "one-core", one, {min(os.sched_getaffinity(0))})
            print(f"| cold, on one core | {wall:.1f} | {cpu:.1f} | {load:.1f} |", flush=True)
    print(
        "\nThe cold run's extra time over a warm one is numba compiling the kernels, once; "
        "`flatformer train plus-last-even` at its default preset and recipe (20,000 steps)."
    )


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "The first run, cold and warm", markdown=True):
        main()
