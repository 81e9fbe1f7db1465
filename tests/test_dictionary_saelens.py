"""Our dictionary metrics against SAELens's own functions on the same arrays (to 1e-6), and our
SAELens folders loaded by SAELens itself.

Skipped where sae-lens is not importable: sae-lens 6 requires transformer-lens < 4 and so
cannot sit beside this project's `lens` extra (transformer-lens >= 4) in one environment; it is
not in the `test` extra. Run it in an environment of its own (a virtual environment with
`pip install sae-lens` over this project's other dependencies)."""

from __future__ import annotations

import numpy as np
import pytest

sae_lens = pytest.importorskip("sae_lens")
torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from sae_lens.evals import ExplainedVarianceCalculator, _kl  # noqa: E402
from sae_lens.synthetic.evals import (  # noqa: E402
    DeadLatentsCalculator,
    L0Calculator,
    ShrinkageCalculator,
    mean_correlation_coefficient,
)

from flatformer.dictionary import Recipe, decode, encode, train_stack  # noqa: E402
from flatformer.dictionary.fit import member_name  # noqa: E402
from flatformer.dictionary.metrics import kl_per_token, reconstruction_metrics  # noqa: E402
from flatformer.dictionary.saelens import saelens_cfg, save_saelens  # noqa: E402
from flatformer.dictionary.truth import mcc, planted_features  # noqa: E402


@pytest.fixture(scope="module")
def trained():
    p = planted_features(24, 8, 4000, 2.0, seed=0)
    p.x[...] += 0.5  # a mean away from zero: the explained variance must subtract it
    stack, _ = train_stack("topk", p.x, widths=[16, 32], ks=[2], recipe=Recipe(steps=150))
    return p, stack


def test_metrics_agree_with_saelens(trained):
    p, stack = trained
    f = encode(stack, p.x)
    x_hat = decode(stack, f)
    for s in range(stack.size):
        m = int(stack.width[s])
        ours = reconstruction_metrics(p.x, x_hat[s], f[s][:, :m])
        x, xh, fs = (torch.tensor(a) for a in (p.x, x_hat[s], f[s][:, :m]))
        ev, l0, dead, shrink = (
            ExplainedVarianceCalculator(),
            L0Calculator(),
            DeadLatentsCalculator(m),
            ShrinkageCalculator(),
        )
        for i in range(0, len(x), 1000):  # in batches, as SAELens accumulates them
            ev.add_batch(xh[i : i + 1000], x[i : i + 1000])
            l0.add_batch(fs[i : i + 1000])
            dead.add_batch(fs[i : i + 1000])
            shrink.add_batch(xh[i : i + 1000], x[i : i + 1000])
        assert abs(ours["explained_variance"] - ev.compute()) < 1e-6
        assert abs(ours["l0"] - l0.compute()) < 1e-6
        assert ours["dead"] == dead.compute()
        assert abs(ours["l2_ratio"] - shrink.compute()) < 1e-6  # no zero vector here
        decoder = stack.member(s)["W_dec"]
        theirs = mean_correlation_coefficient(torch.tensor(decoder), torch.tensor(p.features))
        assert abs(mcc(decoder, p.features) - theirs) < 1e-6


def test_kl_agrees_with_saelens():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 7, 11)), rng.normal(size=(2, 7, 11))
    theirs = _kl(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_allclose(kl_per_token(a, b), theirs, atol=1e-6)


def test_saelens_loads_our_folders(trained, tmp_path):
    from sae_lens import SAE

    p, stack = trained
    for s in range(stack.size):
        weights = stack.member(s)
        cfg = saelens_cfg("topk", weights, "blocks.0.hook_resid_post", None, k=int(stack.k[s]))
        folder = save_saelens(tmp_path / member_name(stack, s, False), cfg, weights)
        sae = SAE.load_from_disk(str(folder), device="cpu")
        assert sae.cfg.metadata.hook_name == "blocks.0.hook_resid_post"
        x = torch.tensor(p.x[:200], dtype=torch.float32)
        with torch.no_grad():
            f = sae.encode(x).numpy()
            out = sae.decode(sae.encode(x)).numpy()
        ours = encode(stack, p.x[:200])[s][:, : int(stack.width[s])]
        np.testing.assert_allclose(f, ours, atol=1e-4)
        np.testing.assert_allclose(out, decode(stack, encode(stack, p.x[:200]))[s], atol=1e-4)


@pytest.mark.parametrize("kind", ["relu", "batchtopk", "jumprelu", "transcoder"])
def test_saelens_runs_every_architecture_we_write(kind, tmp_path):
    from sae_lens import SAE

    from flatformer.dictionary import init_stack

    transcoder = kind == "transcoder"
    base = "relu" if transcoder else kind
    stack = init_stack(base, 6, 4 if transcoder else 6, [10], ks=[3], centre=not transcoder)
    rng = np.random.default_rng(1)
    stack.b_enc[...] = rng.normal(0, 0.3, stack.b_enc.shape)
    stack.b_dec[...] = rng.normal(0, 0.3, stack.b_dec.shape)
    if kind == "batchtopk":
        stack.threshold[...] = 0.2
    if kind == "jumprelu":
        stack.log_threshold[...] = np.log(rng.uniform(0.05, 0.5, stack.log_threshold.shape))
    weights = stack.member(0)
    out_hook = "blocks.0.hook_mlp_out" if transcoder else None
    cfg = saelens_cfg(base, weights, "blocks.0.hook_resid_mid", out_hook, k=3, dtype="float64")
    sae = SAE.load_from_disk(str(save_saelens(tmp_path / kind, cfg, weights)), device="cpu")
    x = rng.normal(size=(100, 6))
    with torch.no_grad():
        out = sae.decode(sae.encode(torch.tensor(x))).numpy()
    np.testing.assert_allclose(out, decode(stack, encode(stack, x))[0], atol=1e-10)
    if transcoder:
        assert sae.cfg.metadata.hook_name_out == "blocks.0.hook_mlp_out"
