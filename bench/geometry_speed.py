"""Speed of `flatformer geometry`'s parts (RDMs, crossnobis, CKA, RDM comparisons, noise
ceiling, bootstrap, permutation) at the paper's size and a bigger model, each against
rsatoolbox doing the same computation on the same numbers in this process, and the whole
command as a user runs it.

    python bench/geometry_speed.py [--run RUN] [--seeds SEEDS] [--quick]

Without --run it trains the paper model (plus-last-even, paper-2d, 20,000 steps) and a bigger
one (d_model 64, 4 heads, 2 layers, d_mlp 256, 300 steps: the weights do not matter for time),
not counted. Paper size: the 96 token-position stimuli and every activation. Bigger: the first
192 held-out rule windows. Recordings are planted (6 repeats of 30 channels). Each time is the
best of 3 (the least disturbed by the other processes on the shared cores). rsatoolbox has no
CKA or Procrustes: their reference is each pair by its definition, in a loop. rsatoolbox's bootstrap and permutation are its
primitives in the same loop as ours (`RDMs.subsample_pattern("index", ...)` and
`permute_rdms`, then `compare`), so both sides compute the same statistic. --seeds times
`flatformer geometry SEEDS --seeds` on a seed folder you trained (64 seeds: the issue's 60 s).
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: the cores are shared

import numpy as np  # noqa: E402

from flatformer.rsa import (  # noqa: E402
    correlation_rdm,
    euclidean_rdm,
    linear_cka,
    procrustes_distance,
    rbf_cka,
    representations,
    stimuli,
)
from flatformer.rsa.measures import similarity_matrix, spearman_matrix  # noqa: E402
from flatformer.rsa.crossnobis import whitened_crossnobis  # noqa: E402
from flatformer.rsa.data import compare_with_data, noise_ceiling  # noqa: E402
from flatformer.store.runs import load_run  # noqa: E402

BIGGER = [
    "--preset",
    "simulator-16d",
    *("--set", "d_model=64", "--set", "n_heads=4", "--set", "d_head=16"),
    *("--set", "n_layers=2", "--set", "d_mlp=256", "--steps", "300"),
]


def best(f, repeats=3):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def train(folder: Path, *extra):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "flatformer",
            "train",
            "plus-last-even",
            "--out",
            str(folder),
            *extra,
        ],
        check=True,
        capture_output=True,
    )
    return folder


def reps_of(run, windows=None):
    if windows is None:
        tokens, read, _ = stimuli(run)
    else:
        data = run.data()
        tokens, read = data.rule_inputs[:windows], np.asarray(data.rule_index[:windows])
    reps = representations(run.model(None), tokens, read)
    return {k: v for k, v in reps.items() if np.ptp(v, axis=0).max() > 1e-12}


def planted(x, repeats=6, channels=30):
    g = np.random.default_rng(0)
    clean = x @ g.normal(size=(x.shape[1], channels))
    return clean[:, None] + clean.std() * g.normal(size=(len(x), repeats, channels))


def rsatoolbox_side(reps, rec, resamples):
    """name -> a function computing with rsatoolbox what the same-named flatformer part does."""
    from rsatoolbox.data import Dataset
    from rsatoolbox.data.noise import prec_from_residuals
    from rsatoolbox.inference import boot_noise_ceiling
    from rsatoolbox.rdm import RDMs, calc_rdm, compare
    from rsatoolbox.rdm.rdms import permute_rdms

    xs = list(reps.values())
    n, r, c = rec.shape
    datasets = [Dataset(x) for x in xs]
    stacked = Dataset(
        rec.reshape(n * r, c),
        obs_descriptors={"stim": np.repeat(np.arange(n), r), "rep": np.tile(np.arange(r), n)},
    )
    model = RDMs(np.stack([euclidean_rdm(x) for x in xs]))
    data = RDMs(np.stack([euclidean_rdm(rec[:, k]) for k in range(r)]))
    corr = RDMs(np.stack([correlation_rdm(x) for x in xs]))

    def crossnobis():
        res = (rec - rec.mean(1, keepdims=True)).reshape(n * r, c)
        precision = prec_from_residuals(res, dof=n * (r - 1))
        calc_rdm(stacked, "crossnobis", descriptor="stim", cv_descriptor="rep", noise=precision)

    def bootstrap():
        g = np.random.default_rng(0)
        for _ in range(resamples):
            idx = g.integers(0, n, n)
            compare(
                model.subsample_pattern("index", idx),
                data.subsample_pattern("index", idx),
                "spearman",
            )

    def permutation():
        g = np.random.default_rng(0)
        for _ in range(resamples):
            compare(model, permute_rdms(data, p=g.permutation(n)), "spearman")

    return {
        "RDMs (Euclidean + correlation)": lambda: [
            calc_rdm(d, method=m) for d in datasets for m in ("euclidean", "correlation")
        ],
        "crossnobis of the recordings": crossnobis,
        "RDM Spearman, activation x activation": lambda: compare(corr, corr, "spearman"),
        "RDM tau-a, activation x activation": lambda: compare(corr, corr, "tau-a"),
        "noise ceiling": lambda: boot_noise_ceiling(data, method="spearman"),
        f"bootstrap, {resamples} resamples": bootstrap,
        f"permutation, {resamples} permutations": permutation,
    }


def our_side(reps, rec, resamples):
    xs = list(reps.values())
    r = rec.shape[1]
    data = np.stack([euclidean_rdm(rec[:, k]) for k in range(r)])
    vectors = {k: correlation_rdm(x) for k, x in reps.items()}
    options = {"rdm": "euclidean", "method": "spearman"}
    return {
        "RDMs (Euclidean + correlation)": lambda: [
            f(x) for x in xs for f in (euclidean_rdm, correlation_rdm)
        ],
        "crossnobis of the recordings": lambda: whitened_crossnobis(rec),
        "RDM Spearman, activation x activation": lambda: spearman_matrix(list(vectors.values())),
        "RDM tau-a, activation x activation": lambda: similarity_matrix(
            list(vectors.values()), measure="tau-a"
        ),
        "noise ceiling": lambda: noise_ceiling(data),
        f"bootstrap, {resamples} resamples": lambda: compare_with_data(
            reps, rec, bootstrap=resamples, permutations=0, **options
        ),
        f"permutation, {resamples} permutations": lambda: compare_with_data(
            reps, rec, bootstrap=0, permutations=resamples, **options
        ),
        "linear CKA, activation x activation": lambda: similarity_matrix(xs, measure="cka"),
        "RBF CKA, activation x activation": lambda: similarity_matrix(xs, measure="cka-rbf"),
        "Procrustes, activation x activation": lambda: similarity_matrix(xs, measure="procrustes"),
    }


def pair_by_pair(reps):
    """rsatoolbox has no CKA or Procrustes: the reference is each pair by its definition, in a
    loop over the pairs, as a user computes them from the functions."""

    def loop(f):
        xs = list(reps.values())
        return lambda: [f(xs[a], xs[b]) for a in range(len(xs)) for b in range(a + 1, len(xs))]

    return {
        "linear CKA, activation x activation": loop(linear_cka),
        "RBF CKA, activation x activation": loop(rbf_cka),
        "Procrustes, activation x activation": loop(procrustes_distance),
    }


def table(label, reps, resamples):
    x = next(iter(reps.values()))
    rec = planted(x)
    ours = our_side(reps, rec, resamples)
    theirs = rsatoolbox_side(reps, rec, resamples) | pair_by_pair(reps)
    n = len(x)
    print(
        f"\n{label}: {n} stimuli, {len(reps)} activations (widths "
        f"{min(v.shape[1] for v in reps.values())}-{max(v.shape[1] for v in reps.values())}), "
        f"recordings {rec.shape}"
    )
    print(f"{'part':42s} {'flatformer':>11s} {'reference':>11s} {'ratio':>7s}")
    for part, f in ours.items():
        long = "resamples" in part or "permutations" in part  # seconds: once is enough
        a = best(f, 1 if long else 3)
        b = best(theirs[part], 1 if long else 3)
        print(f"{part:42s} {a * 1e3:9.1f}ms {b * 1e3:9.1f}ms {b / a:6.1f}x")


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command(*args):
    cpu, wall = children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flatformer", "geometry", *map(str, args), "--json"],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        sys.exit(done.stderr)
    return time.perf_counter() - wall, children_cpu() - cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="a trained paper-2d run [train one]")
    parser.add_argument("--seeds", type=Path, help="a seed folder to time --seeds on")
    parser.add_argument("--quick", action="store_true", help="100 resamples, not 1,000")
    args = parser.parse_args()
    resamples = 100 if args.quick else 1000
    with tempfile.TemporaryDirectory() as tmp:
        paper = args.run or train(Path(tmp) / "paper")
        bigger = train(Path(tmp) / "bigger", *BIGGER)
        table("paper-2d", reps_of(load_run(paper)), resamples)
        table("d64 2L 4h", reps_of(load_run(bigger), 192), resamples)
        print("\nthe whole command, as its own process (imports included):")
        load = os.getloadavg()[0]
        for label, extra in (
            ("default report, one paper-2d checkpoint (budget 10 s)", ()),
            ("with --crossnobis (the model's held-out windows)", ("--crossnobis",)),
            ("with --training (every checkpoint, linear CKA)", ("--training",)),
        ):
            wall, cpu = command(paper, *extra)
            print(f"  {label}: {wall:.1f} s wall, {cpu:.1f} s CPU")
        if args.seeds:
            n = len([p for p in args.seeds.iterdir() if p.name.startswith("seed_")])
            wall, cpu = command(args.seeds, "--seeds")
            print(
                f"  --seeds over {n} seeds (budget 60 s for 64): {wall:.1f} s wall, {cpu:.1f} s CPU"
            )
        print(f"  (load average {load:.1f} on {os.cpu_count()} cores when the commands started)")


if __name__ == "__main__":
    warnings.simplefilter("ignore", RuntimeWarning)  # rsatoolbox's own casts of NaN fill values
    from common import record  # bench/, the script's own folder

    with record(__file__, "Geometry: flatformer's parts against rsatoolbox"):
        main()
