"""Crossnobis on hand-built repeats where the answer is known, equal to rsatoolbox's; wired into
`geometry --data --rdm crossnobis` and the model's own repeats (`--crossnobis`); and the
`--measure` choice for seeds, checkpoints and --against."""

import json

import numpy as np
import pytest
from clitools import assert_one_line_error, cli_here

from flatformer.rsa import euclidean_rdm, linear_cka, procrustes_distance, representations
from flatformer.rsa.crossnobis import (
    crossnobis_rdm,
    noise_covariance,
    whitened_crossnobis,
    window_conditions,
)


def _rsatoolbox_crossnobis(x, precision):
    from rsatoolbox.data import Dataset
    from rsatoolbox.rdm import calc_rdm

    n, r, c = x.shape
    ds = Dataset(
        x.reshape(n * r, c),
        obs_descriptors={"stim": np.repeat(np.arange(n), r), "rep": np.tile(np.arange(r), n)},
    )
    rdm = calc_rdm(ds, method="crossnobis", descriptor="stim", cv_descriptor="rep", noise=precision)
    return rdm.dissimilarities[0]


def test_crossnobis_is_exact_without_noise_and_unbiased_with_it():
    g = np.random.default_rng(0)
    clean = g.normal(size=(6, 1, 8))
    # noise-free repeats: the squared Mahalanobis distance itself, with any precision
    a = g.normal(size=(8, 8))
    p = a @ a.T + np.eye(8)
    d = clean[:, 0, None] - clean[None, :, 0]
    i, j = np.triu_indices(6, 1)
    want = np.einsum("abc,cd,abd->ab", d, p, d)[i, j] / 8
    assert np.allclose(crossnobis_rdm(np.repeat(clean, 3, 1), p), want, rtol=1e-12)
    assert np.allclose(crossnobis_rdm(np.repeat(clean, 3, 1)), euclidean_rdm(clean[:, 0]))
    # identical patterns + independent noise: the true distances are 0. Over 4000 draws the
    # mean crossnobis is 0 within 4 standard errors; the plain distance of the means is
    # biased by exactly 2 sigma^2 / repeats per channel (here 2 / 3)
    draws = np.stack([crossnobis_rdm(g.normal(size=(6, 3, 8))) for _ in range(4000)])
    mean, se = draws.mean(), draws.mean(1).std() / np.sqrt(len(draws))
    assert abs(mean) < 4 * se and (draws < 0).mean() > 0.3  # negative entries are expected
    plain = np.stack([euclidean_rdm(g.normal(size=(6, 3, 8)).mean(1)) for _ in range(4000)])
    assert plain.mean() == pytest.approx(2 / 3, rel=0.03)
    # distinct patterns + noise: the mean is the true distance
    noisy = np.stack(
        [crossnobis_rdm(np.repeat(clean, 4, 1) + g.normal(size=(6, 4, 8))) for _ in range(2000)]
    )
    assert np.allclose(noisy.mean(0), euclidean_rdm(clean[:, 0]), atol=5 * noisy.std(0).max() / 44)


def test_crossnobis_and_noise_covariances_equal_rsatoolbox():
    pytest.importorskip("rsatoolbox")  # flatformer[test] installs it
    from rsatoolbox.data.noise import cov_from_residuals

    g = np.random.default_rng(1)
    # correlated noise, unequal channel scales, so the shrinkage weights are not trivial
    mix = g.normal(size=(6, 6)) * [1, 2, 0.5, 3, 1, 1]
    x = g.normal(size=(9, 1, 6)) + g.normal(size=(9, 5, 6)) @ mix
    res = (x - x.mean(1, keepdims=True)).reshape(-1, 6)
    for method in ("shrinkage_diag", "shrinkage_eye", "diag"):
        theirs = cov_from_residuals(res, dof=9 * 4, method=method)
        assert np.allclose(noise_covariance(x, method), theirs, atol=1e-12, rtol=1e-12)
    for method in ("shrinkage_diag", "shrinkage_eye", "diag", "identity"):
        precision = np.linalg.inv(noise_covariance(x, method))
        ours, dropped = whitened_crossnobis(x, method)
        assert dropped == 0
        np.testing.assert_allclose(ours, _rsatoolbox_crossnobis(x, precision), atol=1e-9, rtol=0)


def _planted(paper_run, repeats, scale=1.0):
    from flatformer.rsa import stimuli
    from flatformer.store.runs import load_run

    run = load_run(paper_run)
    tokens, read, _ = stimuli(run)
    x = representations(run.model(run.resolve_step(None)), tokens, read)[PLANTED]
    g = np.random.default_rng(2)
    clean = x @ g.normal(size=(x.shape[1], 30))
    # noise correlated across channels (what the whitening is for), but mildly: strongly
    # correlated noise whitens the data's geometry away from the activation's plain Euclidean
    # one, and a model's RDM then falls below a ceiling that measures only the data's noise
    mix = np.eye(30) + 0.3 * g.normal(size=(30, 30)) / np.sqrt(30)
    return clean[:, None] + scale * clean.std() * g.normal(size=(96, repeats, 30)) @ mix


PLANTED = "blocks.0.attn.hook_pattern.h0"
FAST = ["--json", "--bootstrap", "100", "--permutations", "100"]


def test_data_crossnobis_recovers_the_planted_activation_inside_the_ceiling(paper_run, tmp_path):
    from scipy.io import savemat

    savemat(tmp_path / "rec.mat", {"data": _planted(paper_run, 6)})
    result = cli_here("geometry", paper_run, "--data", tmp_path / "rec.mat", "--rdm", "crossnobis")
    assert result.returncode == 0, result.stderr
    assert "crossnobis" in result.stdout and PLANTED in result.stdout
    result = cli_here(
        "geometry", paper_run, "--data", tmp_path / "rec.mat", "--rdm", "crossnobis", *FAST
    )
    d = json.loads(result.stdout)["data"]
    assert d["rdm"] == "crossnobis" and d["model_rdm"] == "euclidean"
    assert d["repeat_groups"] == 3 and d["channels_left_out"] == 0
    assert d["best"] == PLANTED
    best = d["by_activation"][PLANTED]
    lower, upper = d["noise_ceiling"]
    assert lower <= best["correlation"] <= upper and best["p"] < 0.05
    # three repeats: one group, so no ceiling, and the reason says why
    np.save(tmp_path / "three.npy", _planted(paper_run, 3))
    three = cli_here(
        "geometry", paper_run, "--data", tmp_path / "three.npy", "--rdm", "crossnobis", *FAST
    )
    t = json.loads(three.stdout)["data"]
    assert t["noise_ceiling"] is None and "4 or more" in t["noise_ceiling_reason"]
    assert t["best"] == PLANTED
    # the data's crossnobis RDM is rsatoolbox's (one group of three, shrinkage_diag)
    pytest.importorskip("rsatoolbox")
    from rsatoolbox.data.noise import prec_from_residuals

    from flatformer.rsa.data import data_rdms

    x = np.load(tmp_path / "three.npy")
    res = (x - x.mean(1, keepdims=True)).reshape(-1, 30)
    theirs = _rsatoolbox_crossnobis(x, prec_from_residuals(res, dof=96 * 2))
    np.testing.assert_allclose(data_rdms(x, "crossnobis")[0][0], theirs, atol=1e-9, rtol=0)


def test_data_crossnobis_bad_input_is_one_line(paper_run, tmp_path):
    np.save(tmp_path / "flat.npy", np.random.default_rng(0).normal(size=(96, 5)))
    np.save(tmp_path / "still.npy", np.ones((96, 3, 4)))
    args = ("--rdm", "crossnobis")
    assert_one_line_error(
        cli_here("geometry", paper_run, "--data", tmp_path / "flat.npy", *args), "needs repeats"
    )
    assert_one_line_error(
        cli_here("geometry", paper_run, "--data", tmp_path / "still.npy", *args), "no channel"
    )
    assert_one_line_error(
        cli_here("geometry", paper_run, "--data", tmp_path / "flat.npy", "--noise", "x"), "--noise"
    )
    assert_one_line_error(cli_here("geometry", paper_run, "--measure", "cka,x"), "--measure")


def test_model_crossnobis_over_held_out_windows(paper_run):
    from flatformer.store.runs import load_run

    result = cli_here("geometry", paper_run, "--crossnobis", "--json")
    assert result.returncode == 0, result.stderr
    c = json.loads(result.stdout)["crossnobis"]
    run = load_run(paper_run)
    tokens, read, labels, m = window_conditions(run)
    assert c["conditions"] == labels == ["0", "2", "4", "6", "8", "10"]  # the last even token
    assert c["repeats"] == m >= 2 and len(tokens) == 6 * m
    targets = run.data().rule_targets
    rows = [np.flatnonzero(targets == run.vocab.index(v))[:m] for v in labels]
    assert np.array_equal(tokens, run.data().rule_inputs[np.concatenate(rows)])
    # the attention output carries the answer: every condition pair far apart; the position
    # embedding read at "+" knows nothing of the answer: its distances are noise around 0
    z, pos = (
        np.asarray(c["rdms"]["blocks.0.attn.hook_z.h0"]),
        np.asarray(c["rdms"]["hook_pos_embed"]),
    )
    assert z.min() > 0 and abs(pos.mean()) < 0.01 * z.mean()
    # the wiring equals rsatoolbox's crossnobis on the same windows
    pytest.importorskip("rsatoolbox")
    from rsatoolbox.data.noise import prec_from_residuals

    x = representations(run.model(run.resolve_step(None)), tokens, read)
    x = x["blocks.0.attn.hook_z.h0"].reshape(6, m, -1)
    res = (x - x.mean(1, keepdims=True)).reshape(6 * m, -1)
    theirs = _rsatoolbox_crossnobis(x, prec_from_residuals(res, dof=6 * (m - 1)))
    np.testing.assert_allclose(z, theirs, atol=1e-9 * max(1, abs(theirs).max()), rtol=0)


@pytest.fixture(scope="module")
def three_seeds(tmp_path_factory):
    from conftest import make_run

    return make_run(tmp_path_factory.mktemp("geo-seeds") / "runs", seeds="0-2", steps=600)


def test_seeds_with_every_measure(three_seeds):
    from flatformer.rsa import stimuli
    from flatformer.store.runs import load_run, seed_runs

    result = cli_here("geometry", three_seeds, "--seeds", "--measure", "all", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["measures"] == ["cka", "cka-rbf", "procrustes", "spearman", "tau-a", "cosine"]
    runs = seed_runs(three_seeds)
    tokens, read, _ = stimuli(load_run(runs[0].path))
    x0, x2 = (
        representations(r.model(None), tokens, read)["blocks.0.hook_resid_mid"] for r in runs[::2]
    )
    entry = report["by_activation"]["blocks.0.hook_resid_mid"]
    for measure, a in entry.items():
        m = np.asarray(a["matrix"])
        assert m.shape == (3, 3) and np.allclose(m, m.T)
        assert np.allclose(np.diag(m), 0 if measure == "procrustes" else 1)
        assert a["mean"] == pytest.approx(m[np.triu_indices(3, 1)].mean())
    assert entry["cka"]["matrix"][0][2] == pytest.approx(linear_cka(x0, x2), abs=1e-12)
    assert entry["procrustes"]["matrix"][0][2] == pytest.approx(procrustes_distance(x0, x2))
    # the default stays linear CKA, and the table names the measure it shows
    text = cli_here("geometry", three_seeds, "--seeds", "--measure", "procrustes,tau-a")
    assert text.returncode == 0 and "procrustes" in text.stdout and "tau-a" in text.stdout
    default = json.loads(cli_here("geometry", three_seeds, "--seeds", "--json").stdout)
    assert default["measures"] == ["cka"]


def test_training_and_against_with_chosen_measures(three_seeds):
    seed = three_seeds / "seed_0"
    result = cli_here(
        "geometry",
        seed,
        "--training",
        "--measure",
        "procrustes,spearman,cka-rbf",
        "--json",
        "--against",
        three_seeds / "seed_1",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    t = report["training"]
    assert t["measures"] == ["procrustes", "spearman", "cka-rbf"] and "cka_to_final" not in t
    for measure, curves in t["to_final"].items():
        for name, values in curves.items():
            assert len(values) == len(t["steps"])
            # the last checkpoint is the final geometry: distance 0, similarity 1
            assert values[-1] == pytest.approx(0 if measure == "procrustes" else 1, abs=1e-6)
            assert t["settled_at"][measure][name] in t["steps"]
    assert t["settle_threshold"]["procrustes"] == pytest.approx(np.arccos(0.9))
    against = report["against"]["measures"]
    assert list(against) == ["cka", "procrustes", "spearman", "cka-rbf"]
    assert np.allclose(against["cka"]["matrix"], report["against"]["linear_cka"])
    assert all(0 <= v <= np.pi / 2 for v in against["procrustes"]["same_name"].values())


def test_spearman_matrix_ranks_once_and_equals_rsatoolbox():
    pytest.importorskip("rsatoolbox")
    from rsatoolbox.rdm import RDMs, compare

    from flatformer.rsa.measures import spearman_matrix

    g = np.random.default_rng(4)
    v = g.normal(size=(5, 45))
    v[0, :20] = 0  # ties, which both rank as averages
    theirs = compare(RDMs(v), RDMs(v), "spearman")
    np.testing.assert_allclose(spearman_matrix(v), theirs, atol=1e-12)
