"""The playground's trainer before and after its forward pass moved into model.js.

Steps per second of the page's own training loop (flatformer/explorer/session.js, the loop the
playground's Worker runs: batches, loss and gradient, AdamW, held-out evaluation, checkpoints)
with each version's scripts, in one node process, alternating chunks of steps so both meet
the same machine load; and whether the two trained the same numbers, bit for bit (every
metrics row and the final weights).

    python bench/page_train_speed.py [--before REV] [--quick]

The earlier scripts (session.js, train.js, model.js, tasks.js) are read from git at REV, by
default the last commit whose train.js had a forward pass of its own. Writes
bench/results/page_train_speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import write_results

from flatformer.explorer.page import CONSTANTS

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("session.js", "train.js", "model.js", "tasks.js")
BEFORE = "9705885"  # train.js with its own forward pass beside model.js's
# (task, preset, steps, chunk): the playground's presets, each on a task it offers.
CASES = [
    ("plus-last-even", "paper-2d", 3000, 100),
    ("successor", "small-4d-2head", 1500, 50),
    ("plus-last-even", "simulator-16d", 600, 30),
    ("induction", "attn-only-2l", 120, 6),
]


def checkout(rev: str, folder: Path):
    for name in SCRIPTS:
        text = subprocess.run(
            ["git", "show", f"{rev}:flatformer/explorer/{name}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (folder / name).write_text(text, encoding="utf-8")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default=BEFORE, help="git revision of the earlier scripts")
    parser.add_argument("--quick", action="store_true", help="a tenth of the steps (a check)")
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None:
        sys.exit("node is not installed")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    scale = 10 if args.quick else 1
    cases = [
        {
            "task": task,
            "preset": preset,
            "seed": 0,
            "steps": steps // scale,
            "chunk": max(1, chunk // scale),
            "warmup": max(1, chunk // scale),
        }
        for task, preset, steps, chunk in CASES
    ]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        before.mkdir()
        checkout(args.before, before)
        (Path(tmp) / "constants.json").write_text(json.dumps(CONSTANTS))
        (Path(tmp) / "cases.json").write_text(json.dumps(cases))
        done = subprocess.run(
            [
                node,
                str(ROOT / "bench/page_train_speed.js"),
                str(before),
                str(ROOT / "flatformer/explorer"),
                str(Path(tmp) / "constants.json"),
                str(Path(tmp) / "cases.json"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        sys.exit(done.stderr[-2000:])
    results = json.loads(done.stdout)
    load_after = os.getloadavg()[0]
    rows = [
        "| preset (task) | steps | before: steps/s | after: steps/s | after / before "
        "(whole run) | after / before (median chunk) | after / before (process CPU) "
        "| same numbers |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        sps, cpu = r["steps_per_s"], r["steps_per_cpu_s"]
        rows.append(
            f"| {r['preset']} ({r['task']}) | {r['steps']} | {sps['before']:.1f} | "
            f"{sps['after']:.1f} | {sps['after'] / sps['before']:.2f}x | "
            f"{1 / r['median_chunk_time_after_over_before']:.2f}x | "
            f"{cpu['after'] / cpu['before']:.2f}x | {'yes' if r['identical'] else 'NO'} |"
        )
    body = "\n".join(rows) + (
        f"\n\nnode {version}; revision before: {args.before}; machine load "
        f"{load_before:.1f} before, {load_after:.1f} after, on {os.cpu_count()} cores."
        "\n\nEach case trains one playground Session (seed 0, the default recipe for that many "
        "steps: 8 candidate initialisations up to the selection step, held-out evaluation "
        "every 200 steps) with the scripts before and after, in one node process, in "
        "alternating chunks of steps. A ratio above 1 means the trainer that runs model.js's "
        "forward pass is faster; the median over chunks compares the same steps on each side "
        "and is the least sensitive to other processes. Same numbers: every metrics row and "
        "the final weights equal bit for bit."
    )
    print(body)
    if not args.quick:
        path = write_results(__file__, "The playground's trainer on model.js's forward pass", body)
        print(f"written to {path}", file=sys.stderr)
    if not all(r["identical"] for r in results):
        sys.exit("the two trainers trained different numbers")


if __name__ == "__main__":
    main()
