"""Representational geometry: the measures on hand-built representations, checked against
rsatoolbox, and the command on a trained run."""

import json

import numpy as np
import pytest
from clitools import assert_one_line_error
from scipy.stats import ortho_group

from flatformer.rsa import (
    correlation_rdm,
    crossnobis_rdm,
    euclidean_rdm,
    kendall_tau_a,
    linear_cka,
    procrustes_distance,
    rbf_cka,
    spearman,
    whitened_cosine,
)
from flatformer.rsa.measures import similarity_matrix


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_cka_of_itself_is_one_and_invariant_to_rotation_and_scaling(rng):
    x = rng.normal(size=(40, 6))
    q = ortho_group.rvs(6, random_state=1)
    assert linear_cka(x, x) == pytest.approx(1, abs=1e-12)
    assert linear_cka(x, 3.7 * x @ q) == pytest.approx(1, abs=1e-12)
    assert rbf_cka(x, x) == pytest.approx(1, abs=1e-12)
    assert rbf_cka(x, 3.7 * x @ q) == pytest.approx(1, abs=1e-9)
    y = rng.normal(size=(40, 6))
    assert linear_cka(x, y) < 0.5
    # not invariant to an arbitrary invertible map
    assert linear_cka(x, x @ np.diag([100, 1, 1, 1, 1, 1])) < 0.9


def test_rdm_of_points_on_a_line():
    x = np.arange(5.0)[:, None] * np.array([[3.0, 4.0]])  # steps of length 5
    i, j = np.triu_indices(5, 1)
    assert np.allclose(euclidean_rdm(x), 25.0 * (j - i) ** 2 / 2)
    # patterns on one increasing line correlate perfectly; a reversed one is at distance 2
    assert np.allclose(
        correlation_rdm(np.array([[0, 1, 2.0], [1, 3, 5.0], [2, 1, 0.0]])), [0, 2, 2]
    )


def test_crossnobis_is_unbiased_and_equals_the_true_distance_without_noise(rng):
    clean = rng.normal(size=(6, 1, 10))
    x = np.repeat(clean, 4, 1)
    assert np.allclose(crossnobis_rdm(x), euclidean_rdm(clean[:, 0]))
    same = rng.normal(size=(6, 3, 50))  # pure noise: the true distances are 0
    assert abs(crossnobis_rdm(same).mean()) < 0.3  # unbiased: near 0
    assert euclidean_rdm(same.mean(1)).mean() > 0.5  # the plain one is not


def test_procrustes_distance_of_a_rotated_copy_is_zero_and_it_is_a_metric(rng):
    x, y, z = (rng.normal(size=(30, 4)) for _ in range(3))
    q = ortho_group.rvs(4, random_state=2)
    assert procrustes_distance(x, x @ q + 5) == pytest.approx(0, abs=1e-6)
    assert procrustes_distance(x, x[:, :3]) > 0  # unequal widths: zero-padded
    assert procrustes_distance(x, z) <= procrustes_distance(x, y) + procrustes_distance(y, z)


def test_kendall_tau_a_counts_ties_as_neither():
    assert kendall_tau_a([1, 2, 3], [1, 2, 3]) == 1
    assert kendall_tau_a([1, 2, 3], [1, 1, 1]) == 0
    assert kendall_tau_a([1, 2, 3, 4], [1, 2, 2, 3]) == pytest.approx(5 / 6)
    # the O(n log n) form equals the pair count of the definition, ties in both vectors
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 6, 200).astype(float), rng.integers(0, 4, 200).astype(float)
    pairs = sum(np.sign(a[k] - a[k + 1 :]) @ np.sign(b[k] - b[k + 1 :]) for k in range(199))
    assert kendall_tau_a(a, b) == pytest.approx(pairs / (200 * 199 / 2), abs=1e-12)


@pytest.mark.parametrize(
    ("measure", "pair"),
    [
        ("cka", linear_cka),
        ("cka-rbf", rbf_cka),
        ("procrustes", procrustes_distance),
        ("tau-a", kendall_tau_a),
        ("spearman", spearman),
    ],
)
def test_every_pair_at_once_equals_each_pair(rng, measure, pair):
    """The report's matrices (features computed once per activation) equal the published
    definitions pair by pair, on widths below, at and above the stimuli and on ties."""
    mix = [rng.normal(size=(12, w)) @ rng.normal(size=(w, w)) for w in (2, 3, 12, 40)]
    xs = [*mix, np.round(mix[1], 0), mix[2] @ ortho_group.rvs(12, random_state=2)]
    if measure in ("tau-a", "spearman"):
        xs = [correlation_rdm(x) for x in xs]
    whole = similarity_matrix(xs, measure=measure)
    diagonal = 0.0 if measure == "procrustes" else 1.0
    expected = [[pair(a, b) if a is not b else diagonal for b in xs] for a in xs]
    # Procrustes is an arccos: near a distance of 0 its rounding is sqrt(eps)
    tolerance = 1e-7 if measure == "procrustes" else 1e-12
    assert np.allclose(whole, expected, atol=tolerance, rtol=0)
    assert np.allclose(
        similarity_matrix(xs[:2], xs[2:], measure), np.asarray(expected)[:2, 2:], atol=tolerance
    )


def test_comparisons_equal_rsatoolbox(rng):
    rsatoolbox = pytest.importorskip("rsatoolbox")  # flatformer[test] installs it
    from rsatoolbox.data import Dataset
    from rsatoolbox.rdm import calc_rdm, compare

    x, y = rng.normal(size=(12, 5)), rng.normal(size=(12, 5))
    for ours, method in ((euclidean_rdm, "euclidean"), (correlation_rdm, "correlation")):
        theirs = calc_rdm(Dataset(x), method=method).dissimilarities[0]
        assert np.allclose(ours(x), theirs, atol=1e-12)
    a = calc_rdm(Dataset(x), method="correlation")
    b = calc_rdm(Dataset(y), method="correlation")
    da, db = a.dissimilarities[0], b.dissimilarities[0]
    assert spearman(da, db) == pytest.approx(compare(a, b, "spearman")[0, 0], abs=1e-12)
    assert kendall_tau_a(da, db) == pytest.approx(compare(a, b, "tau-a")[0, 0], abs=1e-12)
    assert whitened_cosine(da, db) == pytest.approx(compare(a, b, "cosine_cov")[0, 0], abs=1e-9)
    assert rsatoolbox


def test_geometry_command_on_the_paper_model(paper_run, tmp_path):
    from typer.testing import CliRunner

    from flatformer.commands.app import app
    from flatformer.commands.cli import load_commands

    load_commands()
    export = tmp_path / "rdms.npz"
    result = CliRunner().invoke(
        app, ["geometry", str(paper_run), "--json", "--export", str(export)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["stimuli"]) == 96 and report["stimuli"][0] == "00"
    names = report["activations"]
    assert "hook_embed" in names and "blocks.0.attn.hook_z.h0" in names
    cka = np.asarray(report["linear_cka"])
    assert np.allclose(np.diag(cka), 1) and np.allclose(cka, cka.T)
    assert len(report["rdms"]["hook_embed"]["euclidean"]) == 96 * 95 // 2
    assert len(np.load(export).files) == 2 * len(names)


def test_noise_ceiling_known_cases_and_equal_to_rsatoolbox(rng):
    from flatformer.rsa.data import noise_ceiling

    same = np.tile(rng.normal(size=45), (3, 1))  # identical repeats: the ceiling is 1
    assert np.allclose(noise_ceiling(same), [1, 1])
    lower, upper = noise_ceiling(rng.normal(size=(4, 45)) + rng.normal(size=45))
    assert lower < upper < 1
    pytest.importorskip("rsatoolbox")
    from rsatoolbox.inference import boot_noise_ceiling
    from rsatoolbox.rdm import RDMs

    r = rng.normal(size=(5, 45)) + 2 * rng.normal(size=45)
    for method in ("spearman", "corr"):
        ours = noise_ceiling(r, "spearman" if method == "spearman" else "pearson")
        assert np.allclose(ours, boot_noise_ceiling(RDMs(r), method=method), atol=1e-12)


def _geometry(paper_run, *args):
    from clitools import cli_here

    return cli_here("geometry", paper_run, *args)


PLANTED = "blocks.0.attn.hook_pattern.h0"  # the activation least like any other (RDM rho 0.54)


def test_data_recovers_a_planted_activation_and_a_shuffled_control_is_null(paper_run, tmp_path):
    from flatformer.rsa import representations, stimuli
    from flatformer.store.runs import load_run

    run = load_run(paper_run)
    tokens, read, _ = stimuli(run)
    x = representations(run.model(run.resolve_step(None)), tokens, read)[PLANTED]
    g = np.random.default_rng(1)
    clean = x @ g.normal(size=(x.shape[1], 30))
    recordings = clean[:, None] + g.normal(scale=0.5 * clean.std(), size=(96, 4, 30))
    np.save(tmp_path / "rec.npy", recordings)
    np.save(tmp_path / "shuffled.npy", recordings[g.permutation(96)])
    fast = ["--json", "--bootstrap", "100", "--permutations", "100"]
    result = _geometry(paper_run, "--data", str(tmp_path / "rec.npy"), *fast)
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)["data"]
    assert d["best"] == PLANTED
    best = d["by_activation"][PLANTED]
    lower, upper = d["noise_ceiling"]
    assert lower < upper and best["correlation"] >= lower and best["p"] < 0.05
    assert best["ci"][0] <= best["correlation"] <= best["ci"][1]
    shuffled = _geometry(paper_run, "--data", str(tmp_path / "shuffled.npy"), *fast)
    s = json.loads(shuffled.stdout)["data"]
    assert s["by_activation"][PLANTED]["p"] > 0.05
    # stimuli x channels: no ceiling, and the reason is given
    np.savetxt(tmp_path / "mean.csv", recordings.mean(1), delimiter=",")
    flat = json.loads(_geometry(paper_run, "--data", str(tmp_path / "mean.csv"), *fast).stdout)[
        "data"
    ]
    assert flat["noise_ceiling"] is None and "repeats" in flat["noise_ceiling_reason"]
    assert flat["best"] == PLANTED


def test_figures_are_written(paper_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(paper_run, run)
    np.save(tmp_path / "rec.npy", np.random.default_rng(0).normal(size=(96, 3, 5)))
    result = _geometry(
        run,
        "--figures",
        "--training",
        "--data",
        tmp_path / "rec.npy",
        "--bootstrap",
        "20",
        "--permutations",
        "20",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (run / "geometry").iterdir())
    assert written == ["activation_cka.png", "data.png", "rdms.png", "training.png"]
    assert all((run / "geometry" / n).read_bytes()[:4] == b"\x89PNG" for n in written)


def test_data_bad_input_is_one_line(paper_run, tmp_path):
    bad = {
        "rows.npy": np.zeros((95, 3)),
        "dims.npy": np.zeros(96),
        "nan.npy": np.full((96, 3), np.nan),
    }
    for name, array in bad.items():
        np.save(tmp_path / name, array)
    np.save(tmp_path / "pickle.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "text.csv").write_text("a,b\n1,2\n")
    for name, words in (
        ("rows.npy", "95 rows"),
        ("dims.npy", "dimension"),
        ("nan.npy", "NaN"),
        ("pickle.npy", "cannot read"),
        ("text.csv", "cannot read"),
        ("missing.npy", "does not exist"),
    ):
        assert_one_line_error(_geometry(paper_run, "--data", tmp_path / name), words)


def test_seed_figures_are_written_one_per_activation(tmp_path):
    from flatformer.figures.rsa import write_figures

    m = [[1, 0.5], [0.5, 1]]
    report = {
        "seeds": ["seed_0", "seed_1"],
        "measures": ["cka"],
        "activations": ["hook_embed", "blocks.0.attn.hook_k.h0"],
        "by_activation": {
            "hook_embed": {"cka": {"matrix": m}},
            "blocks.0.attn.hook_k.h0": {"cka": {"matrix": m}},
        },
    }
    paths = write_figures(report, tmp_path / "geometry")
    assert sorted(p.name for p in paths) == ["seeds_b0.attn.k.h0.png", "seeds_embed.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_against_itself_equals_its_own_cka_and_hdf5_export_reads_back(paper_run, tmp_path):
    pytest.importorskip("rsatoolbox")
    from rsatoolbox.rdm import load_rdm

    result = _geometry(
        paper_run, "--against", paper_run, "--json", "--export", tmp_path / "rdms.hdf5"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    against = report["against"]
    assert against["rows"] == report["activations"] == against["columns"]
    assert np.allclose(against["linear_cka"], report["linear_cka"], atol=1e-12)
    assert all(v == pytest.approx(1) for v in against["same_name"].values())
    rdms = load_rdm(str(tmp_path / "rdms.hdf5"))
    assert rdms.n_rdm == 2 * len(report["activations"]) and rdms.n_cond == 96
    k = list(rdms.rdm_descriptors["activation"]).index("hook_embed")
    assert rdms.rdm_descriptors["kind"][k] == "correlation"
    assert np.allclose(rdms.dissimilarities[k], report["rdms"]["hook_embed"]["correlation"])
    assert_one_line_error(_geometry(paper_run, "--against", tmp_path), "not a flatformer run")
