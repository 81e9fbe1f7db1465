"""Model versus recordings: each activation's RDM compared with the data's RDM, with the noise
ceiling, a bootstrap interval over stimuli and a stimulus-label permutation test
(Nili et al. 2014, "A toolbox for representational similarity analysis")."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

from ..errors import FlatformerError
from ..store import read
from .crossnobis import NOISE_METHODS, crossnobis_rdm, noise_covariance, noisy_channels
from .measures import correlation_rdm, euclidean_rdm

MAX_VALUES = 50_000_000  # 400 MB of float64: recordings larger than this are refused
MAX_FILE_BYTES = 8 * MAX_VALUES + 10_000_000  # those values and room for headers or text
# Dissimilarities of every repeat's RDM held at once (400 MB in float64): 100,000 repeats of
# 96 stimuli would ask for 3.6 GB per copy and end in the kernel's kill.
MAX_RDM_VALUES = 50_000_000
MAX_RESAMPLES = 100_000
RDM_KINDS = {"euclidean": euclidean_rdm, "correlation": correlation_rdm}
DATA_RDMS = (*RDM_KINDS, "crossnobis")
COMPARISONS = ("spearman", "pearson")


def load_recordings(path: Path, n_stimuli: int) -> np.ndarray:
    """stimuli x channels or stimuli x repeats x channels, rows in stimulus order, from .npy,
    .npz or .mat (its one array, or the array named "data") or .csv (stimuli x channels).
    Never unpickles (.mat through scipy.io.loadmat, which reads numbers and executes
    nothing); read through the store's reader, which checks every array header before its
    values are allocated."""
    path = Path(path)
    try:
        if path.suffix == ".npy":
            x = read.read_npy(path, "--data", MAX_VALUES, MAX_FILE_BYTES)
        elif path.suffix == ".npz":
            arrays = read.read_npz(path, "--data", MAX_VALUES, MAX_FILE_BYTES)
            if "data" in arrays:
                x = arrays["data"]
            elif len(arrays) == 1:
                x = next(iter(arrays.values()))
            else:
                raise FlatformerError(f"--data {path}: {len(arrays)} arrays and none named 'data'")
        elif path.suffix == ".mat":
            raw = read.read_mat(path, "--data", MAX_FILE_BYTES)
            arrays = {k: v for k, v in raw.items() if not k.startswith("__")}
            if "data" in arrays:
                x = arrays["data"]
            elif len(arrays) == 1:
                x = next(iter(arrays.values()))
            else:
                raise FlatformerError(
                    f"--data {path}: {len(arrays)} variables and none named 'data'"
                )
        elif path.suffix == ".csv":
            with warnings.catch_warnings():  # an empty file: refused below, not warned about
                warnings.simplefilter("ignore", UserWarning)
                x = np.loadtxt(
                    read.text_stream(path, "--data", MAX_FILE_BYTES), delimiter=",", ndmin=2
                )
        else:
            raise FlatformerError(f"--data takes .npy, .npz, .mat or .csv, got {path.name}")
        x = np.asarray(x, dtype=np.float64)
    except FlatformerError:
        raise
    except (ValueError, OSError, TypeError, NotImplementedError) as e:
        raise FlatformerError(
            f"--data {path}: cannot read numbers: {str(e).splitlines()[0][:120]}"
        ) from None
    if x.size == 0:
        raise FlatformerError(f"--data {path}: holds no numbers")
    if x.ndim not in (2, 3):
        raise FlatformerError(
            f"--data {path}: expected stimuli x channels or stimuli x repeats"
            f" x channels, got {x.ndim} dimension(s) {x.shape}"
        )
    if x.size > MAX_VALUES:
        raise FlatformerError(f"--data {path}: {x.size:,} values, the limit is {MAX_VALUES:,}")
    if x.ndim == 3 and x.shape[1] * x.shape[0] * (x.shape[0] - 1) // 2 > MAX_RDM_VALUES:
        pairs = x.shape[0] * (x.shape[0] - 1) // 2
        raise FlatformerError(
            f"--data {path}: {x.shape[1]:,} repeats of {x.shape[0]} stimuli make "
            f"{x.shape[1] * pairs:,} dissimilarities, one RDM a repeat, over the limit of "
            f"{MAX_RDM_VALUES:,}: average them into at most {MAX_RDM_VALUES // pairs:,} repeats"
        )
    if x.shape[0] != n_stimuli:
        raise FlatformerError(
            f"--data {path}: {x.shape[0]} rows but the stimulus set has "
            f"{n_stimuli} stimuli (rows must be in stimulus order)"
        )
    if not np.isfinite(x).all():
        raise FlatformerError(
            f"--data {path}: {int((~np.isfinite(x)).sum())} values are NaN or infinite"
        )
    return x


def _square(v: np.ndarray, n: int) -> np.ndarray:
    m = np.zeros((n, n))
    i, j = np.triu_indices(n, 1)
    m[i, j] = m[j, i] = v
    return m


def _standardise(v: np.ndarray, method: str) -> np.ndarray:
    """Rows ranked (Spearman) and z-scored, so a correlation is a mean of products."""
    v = np.atleast_2d(v)
    if method == "spearman":
        v = rankdata(v, axis=1)
    v = v - v.mean(1, keepdims=True)
    sd = np.sqrt((v * v).mean(1, keepdims=True))
    return v / np.where(sd > 0, sd, np.inf)


def _scores(model: np.ndarray, data: np.ndarray, method: str) -> np.ndarray:
    """(activations,) mean over the data's RDMs (one per repeat) of corr(model RDM, data RDM)."""
    return (_standardise(model, method) @ _standardise(data, method).T).mean(1) / model.shape[1]


def noise_ceiling(repeat_rdms: np.ndarray, method: str = "spearman") -> tuple[float, float]:
    """[lower, upper] (Nili et al. 2014, "A toolbox for representational similarity analysis",
    the noise ceiling section): upper = mean over repeats of the correlation of that repeat's RDM
    with the mean RDM of all repeats; lower = the same with the mean of the other repeats
    (leave one out). RDMs are ranked (Spearman) or z-scored (Pearson) before averaging, as
    rsatoolbox's `pool_rdm` does, so this equals rsatoolbox's `boot_noise_ceiling` (tested)."""
    r = np.asarray(repeat_rdms, float)
    z = _standardise(r, method)
    pooled = rankdata(r, axis=1) if method == "spearman" else z
    upper = _standardise(pooled.mean(0), method)[0]
    lower, high = [], []
    for k in range(len(r)):
        rest = _standardise(np.delete(pooled, k, 0).mean(0), method)[0]
        lower.append((rest * z[k]).mean())
        high.append((upper * z[k]).mean())
    return float(np.mean(lower)), float(np.mean(high))


def _repeat_groups(repeats: int) -> list[np.ndarray]:
    """Consecutive pairs of repeats (the last group takes an odd one): the smallest groups a
    crossnobis RDM can be computed on, so the ceiling has as many RDMs as it can."""
    starts = list(range(0, repeats - repeats % 2 - 1, 2)) or [0]
    ends = starts[1:] + [repeats]
    return [np.arange(a, b) for a, b in zip(starts, ends)]


def data_rdms(x: np.ndarray, kind: str, noise: str = "shrinkage_diag") -> tuple[np.ndarray, int]:
    """(the data's RDMs, one per repeat, or one for stimuli x channels; channels left out).
    Crossnobis needs repeats: one RDM per group of two repeats (`_repeat_groups`), each
    whitened by the noise precision of all repeats, so every group RDM is unbiased and the
    ceiling and the score are computed on the same RDMs."""
    if kind != "crossnobis":
        f = RDM_KINDS[kind]
        rdms = np.stack([f(x[:, k]) for k in range(x.shape[1])]) if x.ndim == 3 else f(x)[None]
        return rdms, 0
    if x.ndim != 3 or x.shape[1] < 2:
        raise FlatformerError(
            "--rdm crossnobis needs repeats: stimuli x repeats x channels with 2 or more"
        )
    keep = noisy_channels(x)
    if not keep.any():
        raise FlatformerError("--rdm crossnobis: no channel varies across repeats (no noise)")
    x = x[:, :, keep]
    precision = np.linalg.inv(noise_covariance(x, noise))
    groups = _repeat_groups(x.shape[1])
    return np.stack([crossnobis_rdm(x[:, g], precision) for g in groups]), int((~keep).sum())


def compare_with_data(
    reps: dict,
    x: np.ndarray,
    rdm: str = "euclidean",
    method: str = "spearman",
    bootstrap: int = 1000,
    permutations: int = 1000,
    seed: int = 0,
    noise: str = "shrinkage_diag",
) -> dict:
    """JSON-ready: per activation its RDM correlation with the data, a 95% bootstrap interval
    over stimuli (resampled with replacement; pairs of a stimulus with its own copy are dropped,
    as rsatoolbox's bootstrap does) and a permutation p (stimulus labels of the data permuted,
    p = (1 + #{null >= observed}) / (1 + permutations)); the noise ceiling when the data has
    repeats; the best activation. With repeats the model is scored against each repeat's RDM
    and the scores averaged, the quantity the noise ceiling bounds. With `rdm="crossnobis"` the
    data's RDMs are crossnobis over groups of repeats (`data_rdms`, noise precision `noise`)
    and the model's the squared Euclidean distance, what crossnobis estimates without bias
    when the noise is white."""
    if rdm not in DATA_RDMS:
        raise FlatformerError(f"--rdm must be one of {', '.join(DATA_RDMS)}, got {rdm!r}")
    if noise not in NOISE_METHODS:
        raise FlatformerError(f"--noise must be one of {', '.join(NOISE_METHODS)}, got {noise!r}")
    if method not in COMPARISONS:
        raise FlatformerError(f"--compare must be one of {', '.join(COMPARISONS)}, got {method!r}")
    for name, count in (("--bootstrap", bootstrap), ("--permutations", permutations)):
        if not 0 <= count <= MAX_RESAMPLES:
            raise FlatformerError(f"{name} must be 0-{MAX_RESAMPLES:,}, got {count}")
    names = list(reps)
    n = len(x)
    model = np.stack([RDM_KINDS.get(rdm, euclidean_rdm)(reps[k]) for k in names])
    data, dropped = data_rdms(x, rdm, noise)
    observed = _scores(model, data, method)
    rng = np.random.default_rng(seed)

    model_sq = np.stack([_square(v, n) for v in model])
    data_sq = np.stack([_square(v, n) for v in data])
    boots = np.empty((bootstrap, len(names)))
    for b in range(bootstrap):
        idx = rng.integers(0, n, n)
        i, j = np.triu_indices(n, 1)
        keep = idx[i] != idx[j]
        a, c = idx[i][keep], idx[j][keep]
        boots[b] = _scores(model_sq[:, a, c], data_sq[:, a, c], method)

    # permuting the data's stimulus labels permutes its RDM's entries: ranks are computed once
    data_z = np.stack([_square(v, n) for v in _standardise(data, method)])
    model_z = _standardise(model, method)
    i, j = np.triu_indices(n, 1)
    null = np.empty((permutations, len(names)))
    for p in range(permutations):
        perm = rng.permutation(n)
        d = data_z[:, perm[i], perm[j]]
        null[p] = (model_z @ d.T).mean(1) / d.shape[1]
    pvals = (1 + (null >= observed).sum(0)) / (1 + permutations)

    by_activation = {}
    for k, name in enumerate(names):
        ci = np.percentile(boots[:, k], [2.5, 97.5]).tolist() if bootstrap else None
        by_activation[name] = {
            "correlation": float(observed[k]),
            "ci": ci,
            "p": float(pvals[k]) if permutations else None,
        }
    if len(data) >= 2:
        ceiling, reason = list(noise_ceiling(data, method)), None
    elif x.ndim == 2:
        ceiling, reason = None, "no repeats: give stimuli x repeats x channels"
    elif rdm == "crossnobis":
        ceiling, reason = None, "crossnobis: a ceiling needs 4 or more repeats (2 groups of 2)"
    else:
        ceiling, reason = None, "one repeat: a ceiling needs two or more"
    best = names[int(np.nanargmax(observed))]
    return {
        "rdm": rdm,
        "model_rdm": rdm if rdm in RDM_KINDS else "euclidean",
        "comparison": method,
        "shape": list(x.shape),
        "seed": seed,
        "bootstrap": bootstrap,
        "permutations": permutations,
        "activations": names,
        "by_activation": by_activation,
        "noise_ceiling": ceiling,
        "noise_ceiling_reason": reason,
        "best": best,
        **(
            {"noise": noise, "repeat_groups": len(data), "channels_left_out": dropped}
            if rdm == "crossnobis"
            else {}
        ),
    }
