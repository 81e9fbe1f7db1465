"""The clock-and-pizza measures (analysis/mechanism.py) on models built by hand whose answer is
known exactly: a pizza (uniform attention sums E_a + E_b, an absolute-value MLP) and a clock
(two heads copy E_a and E_b, an MLP multiplies them), both on the same two circles."""

import numpy as np
import pytest

from flatformer.analysis import grokking as G
from flatformer.analysis import mechanism as M
from flatformer.config import preset
from flatformer.errors import FlatformerError
from flatformer.tasks import get_task
from flatformer.transformer import Transformer

P = 7
FREQS, RADII = (1, 3), (2.0, 1.0)  # two circles of different radii: four distinct components
TASK = get_task("modular-addition", {"p": P})
E, POS = 0, 4  # residual dims: the embedding's two circles (4), the three positions (3)


def circles(t):
    """The number t on both circles: (r cos w t, r sin w t) for each frequency, (4,)."""
    w = 2 * np.pi * np.array(FREQS) / P
    return np.concatenate([[r * np.cos(x * t), r * np.sin(x * t)] for r, x in zip(RADII, w)])


def blank(cfg):
    """Zero tensors of cfg, with the embedding of the numbers (the `=` token is 0) and one-hot
    positions."""
    t = {name: np.zeros(shape) for name, shape in cfg.param_shapes().items()}
    for n in range(P):
        t["embed.W_E"][n, E : E + 4] = circles(n)
    t["pos_embed.W_pos"][:, POS : POS + 3] = np.eye(3)
    return t


def pizza():
    """The pizza (Zhong et al., section 3): at attention rate 0 the head at `=` sums its
    values, s = E_a + E_b; then logit_c = sum over circles of |u_c . s| - |v_c . s|, u_c at
    angle w c / 2 and v_c perpendicular, each |x| as relu(x) + relu(-x). The correct logit is
    sum_f 2 r_f |cos(w_f (a - b) / 2)|: a function of the distance only."""
    S, L = 7, 11  # residual dims: the sum s (4), the p logits
    units = 2 * P * 4
    cfg = preset(
        "grokking-1l", P + 1, d_model=L + P, n_heads=1, d_head=4, d_mlp=units, attn_coeff=0.0
    )
    t = blank(cfg)
    t["blocks.0.attn.W_V"][0, E : E + 4] = np.eye(4)
    t["blocks.0.attn.W_O"][0, :, S : S + 4] = np.eye(4)
    h = 0
    for f, k in enumerate(FREQS):
        w = 2 * np.pi * k / P
        for c in range(P):
            u = np.array([np.cos(w * c / 2), np.sin(w * c / 2)])
            for direction, sign in ((u, 1.0), (np.array([-u[1], u[0]]), -1.0)):
                for side in (1.0, -1.0):
                    t["blocks.0.mlp.W_in"][S + 2 * f : S + 2 * f + 2, h] = side * direction
                    t["blocks.0.mlp.W_out"][h, L + c] = sign
                    h += 1
    t["unembed.W_U"][L : L + P, :P] = np.eye(P)
    return Transformer(cfg, t)


def square_units(values):
    """u^2 exactly on the finite set `values`, with its derivative 2u there, from ReLUs: the
    upper envelope of the tangent lines 2 u_i u - u_i^2, whose kinks lie at the midpoints
    between the values. Returns (offsets, weights, constant): u^2 = constant + sum_j
    weights[j] relu(u - offsets[j]) at every value."""
    u = np.unique(np.round(values, 12))
    lo = u[0] - 1.0  # relu(u - lo) = u - lo on every value: the first tangent's linear part
    offsets = np.concatenate([[lo], (u[:-1] + u[1:]) / 2])
    weights = np.concatenate([[2 * u[0]], 2 * np.diff(u)])
    return offsets, weights, 2 * u[0] * lo - u[0] ** 2


def clock():
    """The clock (Nanda et al. 2023; Zhong et al., section 3): head 0 copies E_a, head 1 E_b
    (scores 2000 apart: the softmax is exactly one-hot); the MLP multiplies them, each product
    x y = (g(x + y) - g(x - y)) / 4 with g = square_units; logit_c = sum over circles of
    cos(w (a + b - c)), plus cos(w_1 (a + b)) on every logit (no answer changes). The correct
    logit, 2 + cos(w_1 (a + b)), does not depend on the distance a - b."""
    A, B, L = 7, 11, 15  # residual dims: E_a (4), E_b (4), the p logits
    plan = []  # (input dims, signs, offsets, weights, coefficient per logit)
    for f, (k, r) in enumerate(zip(FREQS, RADII)):
        w = 2 * np.pi * k / P
        cos_c = np.cos(w * np.arange(P)) + (1.0 if f == 0 else 0.0)  # the offset on circle 1
        sin_c = np.sin(w * np.arange(P))
        xs = {"c": r * np.cos(w * np.arange(P)), "s": r * np.sin(w * np.arange(P))}
        # cos w(a+b) = (ca cb - sa sb) / r^2, sin w(a+b) = (sa cb + ca sb) / r^2
        for ka, kb, coef in (
            ("c", "c", cos_c),
            ("s", "s", -cos_c),
            ("s", "c", sin_c),
            ("c", "s", sin_c),
        ):
            da, db = A + 2 * f + (ka == "s"), B + 2 * f + (kb == "s")
            for sign in (1.0, -1.0):  # g(x + y) - g(x - y)
                values = xs[ka][:, None] + sign * xs[kb][None, :]
                plan.append(((da, db), (1.0, sign), *square_units(values), sign * coef / 4 / r**2))
    units = sum(len(step[2]) for step in plan)
    cfg = preset("grokking-1l", P + 1, d_model=L + P, n_heads=2, d_head=4, d_mlp=units)
    t = blank(cfg)
    for head, out in enumerate((A, B)):
        t["blocks.0.attn.W_Q"][head, POS + 2, 0] = 4000.0  # the query at `=` ...
        t["blocks.0.attn.W_K"][head, POS + head, 0] = 1.0  # ... reads position `head`
        t["blocks.0.attn.W_V"][head, E : E + 4] = np.eye(4)
        t["blocks.0.attn.W_O"][head, :, out : out + 4] = np.eye(4)
    h = 0
    for dims, signs, offsets, weights, constant, coef in plan:
        n = len(offsets)
        for d, s in zip(dims, signs):
            t["blocks.0.mlp.W_in"][d, h : h + n] = s
        t["blocks.0.mlp.b_in"][h : h + n] = -offsets
        t["blocks.0.mlp.W_out"][h : h + n, L : L + P] = weights[:, None] * coef
        t["blocks.0.mlp.b_out"][L : L + P] += constant * coef
        h += n
    t["unembed.W_U"][L : L + P, :P] = np.eye(P)
    return Transformer(cfg, t)


def logits_of(model):
    return G.pair_logits(M._weights(model, None, TASK)[0], P)[0]


def test_the_hand_built_models_add():
    a, b = np.divmod(np.arange(P * P), P)
    for model in (pizza(), clock()):
        logits = logits_of(model)
        assert (logits.argmax(-1) == (a + b) % P).all()
    # the clock's logits are cos(w (a + b - c)) summed over the circles, plus the offset
    w = 2 * np.pi * np.array(FREQS) / P
    c = np.arange(P)
    want = np.cos(w[:, None, None] * ((a + b)[:, None] - c)[None]).sum(0)
    want += np.cos(w[0] * (a + b))[:, None]
    np.testing.assert_allclose(logits_of(clock())[:, :P], want, atol=1e-9)


def test_the_exact_pizza_is_a_pizza():
    model = pizza()
    got = M.mechanism_measures(model, None, TASK)
    # E_a and E_b enter only as their sum: the two gradients are equal
    assert got["gradient_sim"] == pytest.approx(1.0, abs=1e-9)
    # the correct logit is a function of a - b: no spread within a column of fixed a - b
    assert got["distance_irrelevance"] == pytest.approx(0.0, abs=1e-9)
    assert got["circularity"] == pytest.approx(1.0, abs=1e-9)
    assert got["accuracy"] == 1.0
    assert got["kind"] == "pizza"
    assert M.gradient_symmetricity(model, None, TASK) == got["gradient_sim"]
    assert M.distance_irrelevance(model, None, TASK) == got["distance_irrelevance"]
    assert M.circularity(model, None, TASK) == got["circularity"]


def test_the_exact_clock_is_a_clock():
    model = clock()
    got = M.mechanism_measures(model, None, TASK)
    # the gradient of cos(w (a + b - c)) / r^2 in E_a's coordinates, written out by hand
    cos_sims = []
    for a, b, c in M.paper_triples(P):
        ga, gb = [], []
        for f, (k, r) in enumerate(zip(FREQS, RADII)):
            w = 2 * np.pi * k / P
            cc = np.cos(w * c) + (1.0 if f == 0 else 0.0)
            sc = np.sin(w * c)
            for x, g in ((b, ga), (a, gb)):  # d/dE_a reads b, d/dE_b reads a
                cx, sx = np.cos(w * x), np.sin(w * x)
                g += [(cx * cc + sx * sc) / r, (-sx * cc + cx * sc) / r]
        ga, gb = np.array(ga), np.array(gb)
        cos_sims.append(ga @ gb / np.linalg.norm(ga) / np.linalg.norm(gb))
    assert got["gradient_sim"] == pytest.approx(np.mean(cos_sims), abs=1e-9)
    assert got["gradient_sim"] < M.SYMMETRIC_ABOVE
    # the correct logit, 2 + cos(w_1 (a + b)), is the same in every column of fixed a - b
    assert got["distance_irrelevance"] == pytest.approx(1.0, abs=1e-9)
    assert got["circularity"] == pytest.approx(1.0, abs=1e-9)
    assert got["kind"] == "clock"


def test_the_grokking_measures_stand_beside_them():
    got = M.mechanism_measures(clock(), None, TASK)
    # the clock's logits hold only frequencies 1 and 3, in cos(w (a + b - c))
    assert got["key_frequencies"] == "1 3" and got["n_key_frequencies"] == 2.0
    logits = logits_of(clock())
    pairs = G.all_pairs(P)
    targets = pairs[:, :2].sum(1) % P
    assert got["restricted_loss"] == pytest.approx(
        float(G.losses(G.restricted_logits(logits, P, [1, 3]), targets)), abs=1e-12
    )
    train, _ = TASK.pairs(0)
    assert got["excluded_loss"] == pytest.approx(
        float(G.losses(G.excluded_logits(logits, P, [1, 3])[train], targets[train])), abs=1e-12
    )
    # removing the answer's own frequencies leaves nothing to choose with: the loss rises
    assert got["excluded_loss"] > float(G.losses(logits[train], targets[train]))
    assert set(got) >= {"gradient_sim", "distance_irrelevance", "circularity", "kind"}


def literal_circularity(W, p, first_k=4):
    """eval-main.ipynb's loop, written as they wrote it, with their 59 as p."""
    centred = W - W.mean(0)
    U, s, _ = np.linalg.svd(centred, full_matrices=False)
    rst = 0.0
    for ix in range(first_k):
        vs = U[:, ix] * s[ix]
        vs = vs / np.sqrt(np.sum(vs * vs)) / np.sqrt(p)
        tt = []
        for i in range(1, p):
            vv = [vs[t * i % p] for t in range(p)]
            sa = sum(vv[t] * np.exp(2j * np.pi * t / p) for t in range(p))
            tt.append(-(abs(sa) ** 2) * 2)
        rst += max(min(-min(tt), 1.0), 0.0)
    return rst / first_k


def test_circularity_is_the_papers_loop():
    rng = np.random.default_rng(0)
    for p, W in ((P, rng.standard_normal((P, 6))), (11, rng.standard_normal((11, 9)))):
        assert M.embedding_circularity(W, p) == pytest.approx(literal_circularity(W, p), abs=1e-12)
        assert M.embedding_circularity(W, p) < 0.9  # random points are no circle
    # one circle, and noise on it
    t = np.arange(11)
    ring = np.stack([np.cos(2 * np.pi * 4 * t / 11), np.sin(2 * np.pi * 4 * t / 11)], 1)
    assert M.embedding_circularity(ring, 11) == pytest.approx(1.0, abs=1e-12)  # two components
    noisy = np.concatenate([3 * ring, 0.01 * rng.standard_normal((11, 2))], 1)
    assert 0.5 < M.embedding_circularity(noisy, 11) < 1.0


def test_the_triples_are_the_papers_sample():
    triples = M.paper_triples(59)
    assert triples.shape == (100, 3) and triples.min() >= 0 and triples.max() < 59
    assert len({tuple(t) for t in triples}) == 100
    np.testing.assert_array_equal(triples, M.paper_triples(59))  # Python's own generator
    assert not np.array_equal(triples, M.paper_triples(59, seed=43))


@pytest.mark.parametrize(
    "sim, irrelevance, accuracy, kind",
    [
        (0.995, 0.2, 1.0, "pizza"),
        (0.45, 0.85, 1.0, "clock"),
        (0.995, 0.7, 1.0, "other"),  # symmetric, yet its correct logit ignores the distance
        (0.5, 0.2, 1.0, "other"),
        (0.995, 0.2, 0.5, "other"),  # it does not add
    ],
)
def test_the_kind_needs_both_measures_to_agree(sim, irrelevance, accuracy, kind):
    assert M.classify(sim, irrelevance, accuracy) == kind


def test_other_tasks_and_models_are_refused():
    with pytest.raises(FlatformerError, match="modular addition only"):
        M.mechanism_measures(pizza(), None, get_task("plus-last-even"))
    with pytest.raises(FlatformerError, match="does not read modular addition"):
        M.mechanism_measures(pizza(), None, get_task("modular-addition", {"p": 11}))
