"""Movie speed: wall time and peak memory of `flatformer animate` making all five movies as MP4
and GIF for a 20,000-step plus-last-even run (201 checkpoints, so 201 frames a movie).

    python bench/movies_speed.py [--run RUN] [--workers 2]

Without --run it first trains the run (about 5 s, not counted). The command runs as its own
process; memory is sampled every 50 ms over that process and all its descendants (render
workers and their ffmpeg encoders): the peak of the summed RSS (counts pages shared by the forked
workers once per process, so it overstates) and of the summed PSS (shares them out; the honest
total). The budget is 90 s and 1 GB; the paper's code took 30 minutes and 11.5 GB here for 149
frames a movie. Linux only (reads /proc).
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import imageio.v2 as imageio
import imageio.v3 as iio

MOVIES = ["mov1_embeddings", "mov2_landscape", "mov3_qkv", "mov4_qk_space", "mov5_qk_attention"]


def descendants(root: int) -> list[int]:
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        tree += frontier
    return tree


def kib(path: str, field: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(cmd: list[str]):
    """(seconds, CPU seconds, peak summed RSS MB, peak summed PSS MB, finished process) of
    `cmd`; CPU time counts the whole tree (every process waits for its own children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_rss = peak_pss = 0
    while proc.poll() is None:
        pids = descendants(proc.pid)
        peak_rss = max(peak_rss, sum(kib(f"/proc/{p}/status", "VmRSS:") for p in pids))
        peak_pss = max(peak_pss, sum(kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids))
        time.sleep(0.05)
    seconds = time.perf_counter() - start
    out, err = proc.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (
        seconds,
        cpu,
        peak_rss / 1024,
        peak_pss / 1024,
        subprocess.CompletedProcess(cmd, proc.returncode, out, err),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="an existing run folder [train one]")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    flatformer = [sys.executable, "-m", "flatformer"]
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run
        if run is None:
            run = Path(tmp) / "run"
            subprocess.run(
                flatformer + ["train", "plus-last-even", "--out", str(run)],
                check=True,
                capture_output=True,
            )
        out = Path(tmp) / "movies"
        load = os.getloadavg()[0]
        seconds, cpu, rss, pss, proc = measure(
            flatformer + ["animate", str(run), "--out", str(out), "--workers", str(args.workers)]
        )
        if proc.returncode:
            sys.exit(f"animate failed: {proc.stderr.strip()}")
        n_checkpoints = len(list((run / "checkpoints").glob("step_*.safetensors")))
        print(
            f"run: {n_checkpoints} checkpoints; load average before: {load:.1f} "
            f"on {os.cpu_count()} cores"
        )
        for name in MOVIES:
            mp4 = imageio.get_reader(out / f"{name}.mp4")
            frames_mp4, size = mp4.count_frames(), mp4.get_meta_data()["size"]
            mp4.close()
            frames_gif = iio.improps(out / f"{name}.gif", index=None).shape[0]
            print(
                f"  {name:18s} {size[0]}x{size[1]}  mp4 {frames_mp4} frames "
                f"{(out / f'{name}.mp4').stat().st_size / 1e6:5.1f} MB   gif {frames_gif} "
                f"frames {(out / f'{name}.gif').stat().st_size / 1e6:5.1f} MB"
            )
        verdict = "within" if seconds <= 90 and pss <= 1024 else "OVER"
        print(
            f"all five movies, mp4 + gif, {args.workers} workers: {seconds:.1f} s wall "
            f"({cpu:.1f} s CPU over all processes), peak memory {pss:.0f} MB PSS "
            f"({rss:.0f} MB summed RSS); budget 90 s / 1 GB: {verdict}"
        )


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "The five learning-dynamics movies"):
        main()
