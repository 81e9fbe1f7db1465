"""How reliably each recipe learns plus-last-even: seeds at held-out rule error <= 1%.

    python bench/recipes.py [--seeds 0-19] [--recipes paper,default]

Each recipe trains all the seeds as one batched run (into a temporary folder) and prints one
line: seeds learned, median and worst rule error, and the wall time.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from flatformer.training.jobs import build_job
from flatformer.tasks.base import LEARNED
from flatformer.training.trainer import train


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-19")
    parser.add_argument("--recipes", default="paper,default")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in args.recipes.split(","):
            job, _ = build_job(
                "plus-last-even", None, recipe, 0, args.seeds, Path(tmp) / recipe, []
            )
            start = time.perf_counter()
            trainer = train(job)
            seconds = time.perf_counter() - start
            errors = np.array([m[-1]["rule_error"] for m in trainer.metrics])
            print(
                f"{recipe:8s} seeds {args.seeds}: {np.sum(errors <= LEARNED)}/{len(errors)} at "
                f"<= 1%, median {np.median(errors):.2%}, worst {errors.max():.2%}, "
                f"{seconds:.0f} s"
            )


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "The paper's recipe against the default"):
        main()
