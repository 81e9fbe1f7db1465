"""QK and OV circuits: the matrices, their spectra and the top-k mass."""

import numpy as np
import pytest

from flatformer.analysis.circuits import circuit_table, head_circuits, top_k_mass
from flatformer.store.runs import load_run


def test_circuits_are_the_weight_products(simulator_run, paper_run):
    for path in (simulator_run, paper_run):
        model = load_run(path).model()
        cfg, t = model.cfg, model.tensors
        heads = head_circuits(model)
        assert [(c.layer, c.head) for c in heads] == [
            (layer, h) for layer in range(cfg.n_layers) for h in range(cfg.n_heads)
        ]
        for c in heads:
            b = f"blocks.{c.layer}.attn."
            W_Q, W_K, W_V = (t[b + w][c.head] for w in ("W_Q", "W_K", "W_V"))
            QK = np.array(
                [
                    [
                        sum(W_Q[i, e] * W_K[j, e] for e in range(cfg.d_head))
                        for j in range(cfg.d_model)
                    ]
                    for i in range(cfg.d_model)
                ]
            )
            np.testing.assert_allclose(c.QK, QK, atol=1e-12)
            OV = W_V @ t[b + "W_O"][c.head] if cfg.attn_out else W_V
            np.testing.assert_allclose(c.OV, OV, atol=1e-12)
            # Singular values: descending, reproduce the squared Frobenius norm, rank <= d_head.
            for M, s in ((c.QK, c.qk_singular), (c.OV, c.ov_singular)):
                assert np.all(np.diff(s) <= 1e-12)
                assert abs((s**2).sum() - (M**2).sum()) < 1e-9 * (M**2).sum()
                assert np.all(s[cfg.d_head :] < 1e-10 * s[0])


def test_top_k_mass_by_hand():
    s = np.array([3.0, 1.0, 2.0, 0.5])
    total = 9 + 1 + 4 + 0.25
    assert top_k_mass(s, 1) == 9 / total
    assert top_k_mass(s, 2) == (9 + 4) / total
    assert top_k_mass(s, 4) == 1.0 and top_k_mass(s, 10) == 1.0
    assert top_k_mass(np.zeros(3), 1) == 1.0


def test_circuit_table_on_the_simulator_run(simulator_run):
    model = load_run(simulator_run).model()
    rows = circuit_table(model, k=3)
    assert [(r["layer"], r["head"]) for r in rows] == [(0, 0), (0, 1)]
    for row, c in zip(rows, head_circuits(model)):
        assert len(row["qk_singular"]) == len(row["ov_singular"]) == 8
        s = np.array(row["qk_singular"])
        assert row["qk_mass"] == pytest.approx(
            (s[:3] ** 2).sum() / (c.qk_singular**2).sum(), abs=1e-14
        )
        assert 3 / 8 < row["qk_mass"] <= 1 and 3 / 8 < row["ov_mass"] <= 1
