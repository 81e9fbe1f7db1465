"""Figure-suite speed: wall and CPU seconds of `flatformer figures` drawing all 21 figures of one
checkpoint of a trained plus-last-even run.

    python bench/figures_speed.py [--run RUN] [--format png] [--jobs 1,2]

Without --run it first trains the run (about 5 s, not counted). Each setting runs the command as
its own process, as a user would (imports included), and reports the wall time and the CPU time
of the process and its workers, plus the machine's load average (other processes share the two
cores, and wall time follows them). Budget: 15 s; the paper's code took about 75 s here for a
comparable set.
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="a trained run folder [train one]")
    parser.add_argument("--format", default="png")
    parser.add_argument("--jobs", default="1,2", help="comma list of process counts to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run
        if run is None:
            run = Path(tmp) / "run"
            subprocess.run(
                [sys.executable, "-m", "flatformer", "train", "plus-last-even", "--out", str(run)],
                check=True,
                capture_output=True,
            )
        for jobs in (int(j) for j in args.jobs.split(",")):
            out = Path(tmp) / f"figures_{jobs}"
            cpu0, wall0 = children_cpu(), time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "flatformer",
                    "figures",
                    str(run),
                    "--format",
                    args.format,
                    "--jobs",
                    str(jobs),
                    "--out",
                    str(out),
                ],
                capture_output=True,
                text=True,
            )
            wall, cpu = time.perf_counter() - wall0, children_cpu() - cpu0
            if done.returncode:
                sys.exit(done.stderr)
            n = len(list(out.glob(f"*.{args.format}")))
            load = os.getloadavg()[0]
            print(
                f"{n} figures ({args.format}), {jobs} process{'es' if jobs > 1 else ''}: "
                f"{wall:.1f} s wall, {cpu:.1f} s CPU (load average {load:.1f} on "
                f"{os.cpu_count()} cores); budget 15 s, the paper's code about 75 s"
            )


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "Drawing one checkpoint's figures"):
        main()
