"""Many-seed comparison: the alignment recovers known orthogonal maps, the model's symmetry keeps
every measure, and each measure matches an explicit oracle on hand-made geometry."""

import numpy as np
import pytest

from flatformer.analysis import algorithm
from flatformer.compare import (
    canonical_cycle,
    canonical_line,
    collapse_cycle,
    compare_models,
    procrustes,
    recall_spec,
    rotate_tensors,
    summary,
    window_rows,
    zone_sequence,
)
from flatformer.config import preset
from flatformer.tasks.windows import TaskData
from flatformer.errors import FlatformerError
from flatformer.engine.model import Params, init_params
from flatformer.store.runs import load_run
from flatformer.tasks import get_task
from flatformer.model.transformer import Transformer

EVENS = [0, 2, 4, 6, 8, 10]
PLUS = 11


def rotation(angle: float, reflect: bool = False) -> np.ndarray:
    R = np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]])
    return R @ np.diag([1.0, -1.0]) if reflect else R


def random_orthogonal(d: int, seed: int, reflect: bool) -> np.ndarray:
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    if (np.linalg.det(Q) < 0) != reflect:
        Q[:, 0] *= -1
    return Q


@pytest.fixture(scope="module")
def paper(paper_run):
    run = load_run(paper_run)
    data = TaskData.build(run.task, run.cfg.n_ctx, run.config.get("data_seed", 0))
    return run.cfg, run.task, run.weights(), data


@pytest.fixture(scope="module")
def rotated(paper):
    """The trained paper model and three orthogonal images of it (rotation, reflection, both)."""
    cfg, task, w, data = paper
    maps = [np.eye(2), rotation(0.7), rotation(0.0, reflect=True), rotation(-2.3, reflect=True)]
    tensors = [rotate_tensors(cfg, w, R) for R in maps]
    return maps, compare_models(cfg, task, tensors, data, seeds=[10, 11, 12, 13])


@pytest.mark.parametrize("d, reflect", [(2, False), (2, True), (4, True), (16, False)])
def test_procrustes_recovers_a_known_orthogonal_map(d, reflect):
    A = np.random.default_rng(d).standard_normal((40, d))
    R0 = random_orthogonal(d, 7, reflect)
    R, residual = procrustes(np.stack([A, A @ R0.T]), A)
    assert np.abs(R[0] - np.eye(d)).max() < 1e-9
    assert np.abs(R[1] - R0).max() < 1e-9  # A R0^T R0 = A
    assert (np.linalg.det(R[1]) < 0) == reflect
    assert residual.max() < 1e-12
    noisy = A + 0.1 * np.random.default_rng(1).standard_normal(A.shape)
    assert procrustes(noisy[None], A)[1][0] > 0.01  # a residual when no map is exact


def test_rotating_the_stream_keeps_the_function(paper):
    cfg, _, w, _ = paper
    tokens = np.random.default_rng(0).integers(0, 12, (20, 8))
    logits, cache = Transformer(cfg, w).run_with_cache(tokens)
    R = rotation(1.1, reflect=True)
    logits_r, cache_r = Transformer(cfg, rotate_tensors(cfg, w, R)).run_with_cache(tokens)
    assert np.abs(logits_r - logits).max() < 1e-9
    pattern = "blocks.0.attn.hook_pattern"
    assert np.abs(cache_r[pattern] - cache[pattern]).max() < 1e-12
    z = "blocks.0.hook_resid_mid"  # the stream turns with R
    assert np.abs(cache_r[z] - cache[z] @ R).max() < 1e-9


def test_rotating_a_two_head_model_with_W_O_keeps_the_function():
    cfg = preset("small-4d-2head", 12)
    w = init_params(cfg, [np.random.default_rng(3)]).seed(0)
    tokens = np.random.default_rng(1).integers(0, 12, (10, 8))
    R = random_orthogonal(4, 2, reflect=True)
    before = Transformer(cfg, w)(tokens)
    after = Transformer(cfg, rotate_tensors(cfg, w, R))(tokens)
    assert np.abs(after - before).max() < 1e-9


def test_rotation_is_refused_where_it_is_no_symmetry():
    for cfg in (preset("simulator-16d", 12), preset("paper-2d", 12, n_heads=2, d_head=1)):
        w = init_params(cfg, [np.random.default_rng(0)]).seed(0)
        with pytest.raises(FlatformerError):
            rotate_tensors(cfg, w, np.eye(cfg.d_model))


def test_alignment_recovers_each_copys_map_to_1e_9(rotated):
    maps, c = rotated
    assert c.reference == 0 and c.successful.all()
    for s, R0 in enumerate(maps):
        # Copy s has points X R0, so the map back onto the reference is R0^T.
        assert np.abs(c.R[s] - R0.T).max() < 1e-9
        assert c.residual[s] < 1e-9
        assert np.abs(c.points[s] - c.points[0]).max() < 1e-9
        assert np.abs(c.written[s] - c.written[0]).max() < 1e-9
        # q and k do not move under the symmetry: their common map is the identity.
        assert np.abs(c.S_qk[s, 0] - np.eye(2)).max() < 1e-9
        assert c.qk_residual[s, 0] < 1e-9
        # The output network read in the reference frame is the same map for every copy.
        pts = np.random.default_rng(s).standard_normal((50, 2))
        assert np.abs(c.aligned_logits(s, pts) - c.aligned_logits(0, pts)).max() < 1e-9


def test_every_measure_is_the_same_for_every_copy(rotated):
    _, c = rotated
    for key, values in c.measures.items():
        if key == "residual":
            continue
        assert np.allclose(values.astype(float), float(values[0]), atol=1e-9, equal_nan=True), key
    assert len(set(c.zone_order)) == 1 and c.zone_order[0] is not None
    assert len(set(c.line_order)) == 1
    for row in summary(c):
        assert row["successful"] in (0, 4) and row["n_successful"] == 4, row


def test_weights_recency_matches_scores_read_from_the_engine(rotated):
    """For the + query at t and an even key at u and u + 1 < t: one sequence per case, its
    pre-softmax score read from hook_attn_scores."""
    _, c = rotated
    model = c.models[1]
    T = model.cfg.n_ctx
    rises = total = 0
    for t in range(2, T):
        for b in EVENS:
            for u in range(t - 1):
                seq = np.full(t + 1, 1)  # odd filler: layer-0 scores ignore it
                seq[u] = seq[u + 1] = b
                seq[t] = PLUS
                scores = model.run_with_cache(seq)[1]["blocks.0.attn.hook_attn_scores"][0, 0, t]
                rises += scores[u + 1] > scores[u]
                total += 1
    assert c.measures["recency_weights_share"][1] == pytest.approx(rises / total, abs=1e-12)


def test_window_recency_equals_the_analysis_measure(paper):
    cfg, task, w, data = paper
    tensors = [w, init_params(cfg, [np.random.default_rng(5)]).seed(0)]
    params = Params.stack(cfg, tensors)
    rows = window_rows(params, data, group=1)
    wanted = recall_spec(task).mask(cfg.d_vocab)
    shares = algorithm.recency_share(rows.scores[:, :, 0], rows.inputs, rows.index, wanted)
    for s, t in enumerate(tensors):
        expected = algorithm.recency(Transformer(cfg, t), rows.inputs, rows.index, wanted)
        assert shares[s] == pytest.approx(expected, abs=1e-12)
    assert shares[1] < 0.9  # an untrained model has no recency


def test_recall_roles_come_from_the_tasks_declared_checks():
    spec = recall_spec(get_task("plus-last-even"))
    assert (spec.marker, spec.wanted, spec.names) == (PLUS, EVENS, ("even", "odd", "+"))
    assert spec.other == [1, 3, 5, 7, 9]
    odd = recall_spec(get_task("last-odd"))
    assert odd.names == ("odd", "even", "*")
    assert recall_spec(get_task("add-mod-5")) is None


def hand_made(w: dict, T: int) -> dict:
    """Paper weights with textbook geometry: evens exactly on a line, odds and + apart, positions
    a straight ladder."""
    t = {k: v.copy() for k, v in w.items()}
    t["embed.W_E"][EVENS] = np.array([[0.0, 3.0]]) + np.arange(6)[:, None] * [[1.0, 0.2]]
    t["embed.W_E"][[1, 3, 5, 7, 9]] = np.array([[-4.0, -4.0]]) + np.arange(5)[:, None] * 0.1
    t["embed.W_E"][PLUS] = [6.0, -6.0]
    t["pos_embed.W_pos"] = np.arange(T)[:, None] * np.array([[0.05, -0.03]])
    return t


def test_structures_on_hand_made_geometry(paper):
    cfg, task, w, data = paper
    good = hand_made(w, cfg.n_ctx)
    odd_on_even = {k: v.copy() for k, v in good.items()}
    odd_on_even["embed.W_E"][1] = good["embed.W_E"][4]  # odd 1 inside the evens' hull
    off_line = {k: v.copy() for k, v in good.items()}
    off_line["embed.W_E"][4] += [-0.6, 3.0]  # one even off the line
    shuffled = {k: v.copy() for k, v in good.items()}
    shuffled["pos_embed.W_pos"][[2, 5]] = good["pos_embed.W_pos"][[5, 2]]
    plus_as_odd = {k: v.copy() for k, v in good.items()}
    plus_as_odd["embed.W_E"][PLUS] = good["embed.W_E"][3]  # + queries equal 3's queries
    c = compare_models(cfg, task, [good, odd_on_even, off_line, shuffled, plus_as_odd], data)
    m = c.measures
    # + on top of 3 also makes the + and odd classes touch.
    assert list(m["tokens_separable"]) == [True, False, True, True, False]
    assert list(m["points_separable"]) == [True, False, True, True, False]
    assert list(m["wanted_collinear"]) == [True, True, False, True, True]
    assert m["wanted_collinear_share"][0] == pytest.approx(1.0, abs=1e-12)
    assert list(m["ladder"]) == [True, True, True, False, True]
    assert list(m["queries_separate"]) == [True, True, True, True, False]
    # Along the line the evens sit in numeric order; moved sideways, 4 does not change it.
    assert c.line_order[0] == (0, 2, 4, 6, 8, 10) == c.line_order[2]


def test_zone_order_of_a_hand_made_output_network(paper):
    """No MLP and unit unembedding columns at chosen angles: the zones are wedges from the
    origin in the columns' angular order."""
    cfg, _, w, _ = paper
    t = {k: v.copy() for k, v in w.items()}
    for name in ("mlp.W_in", "mlp.b_in", "mlp.W_out", "mlp.b_out"):
        t["blocks.0." + name][...] = 0.0
    order = [0, 6, 2, 10, 4, 8]
    t["unembed.W_U"][...] = 0.0
    t["unembed.b_U"][...] = -100.0
    for i, token in enumerate(order):
        angle = 2 * np.pi * i / 6
        t["unembed.W_U"][:, token] = [np.cos(angle), np.sin(angle)]
        t["unembed.b_U"][token] = 0.0
    seq = zone_sequence(Transformer(cfg, t), np.zeros(2), 1.0, EVENS)
    assert seq == order
    assert zone_sequence(Transformer(cfg, t), np.array([0.3, -0.2]), 5.0, EVENS) == order
    reflected = rotate_tensors(cfg, t, rotation(0.4, reflect=True))
    seq_r = zone_sequence(Transformer(cfg, reflected), np.zeros(2), 1.0, EVENS)
    assert seq_r != order and canonical_cycle(seq_r) == canonical_cycle(order)


def test_cycles_and_lines_compare_up_to_rotation_and_reflection():
    assert (
        canonical_cycle([4, 8, 0, 6])
        == canonical_cycle([0, 6, 4, 8])
        == canonical_cycle([6, 0, 8, 4])
        == (0, 6, 4, 8)
    )
    assert canonical_cycle([0, 4, 6, 8]) != canonical_cycle([0, 6, 4, 8])
    assert canonical_line([8, 2, 0]) == canonical_line([0, 2, 8]) == (0, 2, 8)
    assert collapse_cycle([2, 2, 4, 4, 0, 2]) == [2, 4, 0]
    assert collapse_cycle([1, 1]) == [1]
    assert canonical_cycle([]) == ()


def test_a_wide_model_with_layer_norm_compares_without_a_landscape(paper):
    _, task, _, data = paper
    cfg = preset("simulator-16d", 12)
    tensors = [init_params(cfg, [np.random.default_rng(s)]).seed(0) for s in range(2)]
    R = random_orthogonal(16, 0, reflect=False)
    tensors.append(
        {
            **tensors[0],
            "embed.W_E": tensors[0]["embed.W_E"] @ R,
            "pos_embed.W_pos": tensors[0]["pos_embed.W_pos"] @ R,
        }
    )
    c = compare_models(cfg, task, tensors, data)
    assert not c.symmetric
    assert c.zone_order == [None] * 3 and "zones_once" not in c.measures
    assert np.abs(c.R[2] - R.T).max() < 1e-9 and c.residual[2] < 1e-9
    assert c.residual[1] > 0.1
    assert c.S_qk.shape == (3, 2, 8, 8)
