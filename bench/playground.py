"""The playground's learning check in headless Chromium: paper-2d on plus-last-even with the
default recipe (20,000 steps, 8 candidate inits tried for 1,000), seeds 0-9, each trained in
the page's Worker; held-out rule error and wall time per seed, against the Python trainer
(compiled engine, same recipe, seed 0) timed in the same process.

Usage: PYTHONPATH=. python bench/playground.py [--seeds 10] [--steps 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from browser import close, close_shared_browser, open_page, shared_browser
from common import write_results

from flatformer.training.evaluate import evaluate_run
from flatformer.explorer.playground_page import playground_html
from flatformer.training.jobs import build_job
from flatformer.training.trainer import train


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        page_file = Path(tmp) / "playground.html"
        page_file.write_text(playground_html(), encoding="utf-8")
        rows = []
        for seed in range(args.seeds):
            watched = open_page(shared_browser(), page_file.as_uri())
            start = time.perf_counter()
            result = watched.page.evaluate(
                f"() => window.flatformer.train({{task: 'plus-last-even', preset: 'paper-2d', "
                f"seed: {seed}, steps: {args.steps}}})"
            )
            wall = time.perf_counter() - start
            rows.append((seed, result["rule_error"], result["loss"], wall, result["seconds"]))
            print(
                f"seed {seed}: rule error {result['rule_error']:.2%}, {wall:.1f} s wall",
                file=sys.stderr,
            )
            close(watched)
        close_shared_browser()
        warm, _ = build_job(
            "plus-last-even", "paper-2d", "default", 0, None, Path(tmp) / "warm", ["steps=200"]
        )
        train(warm)  # compile outside the timing
        job, _ = build_job(
            "plus-last-even",
            "paper-2d",
            "default",
            0,
            None,
            Path(tmp) / "py",
            [f"steps={args.steps}"],
        )
        start = time.perf_counter()
        train(job)
        python_wall = time.perf_counter() - start
        python_error = evaluate_run(job.out_dirs[0])["rule_error"]
    load_after = os.getloadavg()[0]
    learned = sum(r[1] <= 0.01 for r in rows)
    walls = [r[3] for r in rows]
    median = statistics.median(walls)
    table = [
        "| seed | held-out rule error | held-out loss | wall (s) | in the Worker (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    table += [f"| {s} | {e:.2%} | {lo:.4f} | {w:.1f} | {sec:.1f} |" for s, e, lo, w, sec in rows]
    body = "\n".join(table) + (
        f"\n\nLearned (rule error <= 1%): {learned} of {len(rows)} seeds. Median wall time "
        f"{median:.1f} s for {args.steps:,} steps (max {max(walls):.1f} s). The Python trainer "
        f"(compiled engine, seed 0, same recipe) took {python_wall:.1f} s in this process "
        f"(rule error {python_error:.2%}): the page's median is {median / python_wall:.2f}x its "
        f"time. Load average (1 min) {load_before:.1f} before, {load_after:.1f} after, on a "
        f"machine shared with other work: absolute times are noisy.\n"
    )
    print(write_results(__file__, "Playground: training in the browser", body))


if __name__ == "__main__":
    main()
