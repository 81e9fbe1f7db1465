"""Sparse dictionaries: every hand-written gradient against torch autograd to 1e-9 (float64),
and each kind's forward checked on cases with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from flatformer.dictionary import Recipe, encode, init_stack, loss_and_grads, train_stack
from flatformer.errors import FlatformerError

torch = pytest.importorskip("torch")
torch.set_num_threads(1)


class StepSTE(torch.autograd.Function):
    """H(pre - theta) with Rajamanoharan et al. 2024's pseudo-derivative (eq. 12), written as
    SAELens's `Step`."""

    @staticmethod
    def forward(ctx, x, theta, bw):
        ctx.save_for_backward(x, theta)
        ctx.bw = bw
        return (x > theta).to(x)

    @staticmethod
    def backward(ctx, g):
        x, theta = ctx.saved_tensors
        k = ((x - theta) / ctx.bw > -0.5) & ((x - theta) / ctx.bw < 0.5)
        return None, (-(1.0 / ctx.bw) * k * g).sum(0), None


class JumpReLUSTE(torch.autograd.Function):
    """pre H(pre - theta) with eq. 11's pseudo-derivative, as SAELens's `JumpReLU`."""

    @staticmethod
    def forward(ctx, x, theta, bw):
        ctx.save_for_backward(x, theta)
        ctx.bw = bw
        return x * (x > theta)

    @staticmethod
    def backward(ctx, g):
        x, theta = ctx.saved_tensors
        k = ((x - theta) / ctx.bw > -0.5) & ((x - theta) / ctx.bw < 0.5)
        return (x > theta) * g, (-(theta / ctx.bw) * k * g).sum(0), None


def torch_loss(stack, s, p, x, y, dead):
    """Member s's loss written the way SAELens's training SAEs write it."""
    m = int(stack.width[s])
    W_enc, b_enc, W_dec, b_dec = p["W_enc"][s], p["b_enc"][s], p["W_dec"][s], p["b_dec"][s]
    W_enc, b_enc, W_dec = W_enc[:, :m], b_enc[:m], W_dec[:m]
    xc = x - b_dec if stack.centre else x
    pre = xc @ W_enc + b_enc
    k = int(stack.k[s])
    if stack.kind == "relu":
        f = torch.relu(pre)
    elif stack.kind == "topk":
        v, i = torch.topk(pre, k, dim=-1)
        f = torch.zeros_like(pre).scatter(-1, i, torch.relu(v))
    elif stack.kind == "batchtopk":
        r = torch.relu(pre).flatten()
        v, i = torch.topk(r, k * x.shape[0])
        f = torch.zeros_like(r).scatter(-1, i, v).reshape(pre.shape)
    else:
        theta = torch.exp(p["log_threshold"][s][:m])
        f = JumpReLUSTE.apply(pre, theta, stack.bandwidth)
    x_hat = f @ W_dec + b_dec
    loss = ((x_hat - y) ** 2).sum(-1).mean()
    coef = float(stack.coef[s])
    if stack.kind == "relu":
        loss = loss + coef * (f * W_dec.norm(dim=-1)).sum(-1).mean()
    if stack.kind == "jumprelu":
        loss = loss + coef * StepSTE.apply(pre, theta, stack.bandwidth).sum(-1).mean()
    d = torch.as_tensor(dead[s][:m])
    if stack.kind in ("topk", "batchtopk") and d.any():
        k_aux = max(1, y.shape[-1] // 2)
        scale = min(int(d.sum()) / k_aux, 1.0)
        k_aux = min(k_aux, int(d.sum()))
        masked = torch.where(d[None], pre, -torch.inf)
        v, i = torch.topk(masked, k_aux, dim=-1)
        a = torch.zeros_like(pre).scatter(-1, i, torch.relu(v))
        residual = (y - x_hat).detach()
        loss = loss + stack.aux_coef * scale * ((a @ W_dec - residual) ** 2).sum(-1).mean()
    return loss


CASES = [
    ("relu", True, None),
    ("topk", True, None),
    ("topk", True, "dead"),
    ("batchtopk", True, "dead"),
    ("jumprelu", True, None),
    ("relu", False, None),  # transcoders
    ("topk", False, "dead"),
    ("jumprelu", False, None),
]


@pytest.mark.parametrize("kind,centre,dead", CASES)
def test_gradients_match_torch_autograd(kind, centre, dead):
    rng = np.random.default_rng(1)
    d_in, d_out, N = 5, 5 if centre else 3, 40
    stack = init_stack(kind, d_in, d_out, [7, 4], ks=[3, 2], coefs=[0.3, 0.7], centre=centre)
    stack.b_enc[...] = rng.normal(0, 0.5, stack.b_enc.shape)
    stack.b_dec[...] = rng.normal(0, 0.3, stack.b_dec.shape)
    stack.W_dec *= rng.uniform(0.5, 1.5, stack.W_dec.shape[:2])[..., None]
    if kind == "jumprelu":
        stack.bandwidth = 0.5  # wide enough that some pre-activations fall in the kernel
        stack.log_threshold[...] = np.log(rng.uniform(0.1, 0.6, stack.log_threshold.shape))
    x = rng.normal(0, 1, (N, d_in))
    y = x if centre else rng.normal(0, 1, (N, d_out))
    dead_mask = np.zeros(stack.W_enc.shape[::2][:1] + stack.W_enc.shape[-1:], bool)
    if dead:
        dead_mask[:, 1::2] = True
    parts, grads, _ = loss_and_grads(stack, x, y, dead_mask)
    p = {n: torch.tensor(v, requires_grad=True) for n, v in stack.params().items()}
    tx, ty = torch.tensor(x), torch.tensor(y)
    total = 0
    for s in range(stack.size):
        ls = torch_loss(stack, s, p, tx, ty, dead_mask)
        assert abs(float(ls.detach()) - parts["loss"][s]) < 1e-9
        total = total + ls
    total.backward()
    for n, g in grads.items():
        np.testing.assert_allclose(g, p[n].grad.numpy(), atol=1e-9, rtol=0, err_msg=n)
    if dead:
        assert parts["aux"].min() > 0  # the auxiliary loss took part
    if kind == "jumprelu":
        assert np.abs(grads["log_threshold"]).max() > 1e-3  # the kernel took part


def test_topk_keeps_k_and_batchtopk_keeps_k_on_average():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (64, 6))
    for kind in ("topk", "batchtopk"):
        stack = init_stack(kind, 6, 6, [12, 12], ks=[2, 5])
        stack.b_enc[...] = 5.0  # every pre-activation positive: exactly k kept
        f = encode(stack, x, training=True)
        l0 = (f != 0).sum(-1)
        if kind == "topk":
            assert (l0[0] == 2).all() and (l0[1] == 5).all()
        else:
            assert l0[0].mean() == 2 and l0[1].mean() == 5 and l0[1].std() > 0


def test_narrow_member_never_uses_the_latents_it_does_not_have():
    stack = init_stack("relu", 4, 4, [8, 3])
    stack.b_enc[...] = 10.0
    f = encode(stack, np.ones((5, 4)))
    assert (f[1, :, 3:] == 0).all() and (f[1, :, :3] > 0).all() and (f[0] > 0).all()


def test_jumprelu_threshold_gates():
    stack = init_stack("jumprelu", 2, 2, [2], threshold=0.5)
    stack.W_enc[0] = np.eye(2)
    stack.b_dec[...] = 0
    f = encode(stack, np.array([[0.4, 0.6]]))
    assert f[0, 0].tolist() == [0.0, 0.6]


def test_bad_k_and_kind_are_one_line_errors():
    with pytest.raises(FlatformerError, match="--k"):
        init_stack("topk", 4, 4, [4], ks=[5])
    with pytest.raises(FlatformerError, match="unknown dictionary kind"):
        init_stack("gated", 4, 4, [4])


def test_training_reduces_loss_and_folds_the_scale_back():
    """Trained on scaled data, the saved dictionary reads raw activations: its reconstruction
    of raw x is as good as the training loss says (scale-free FVU), for every kind."""
    rng = np.random.default_rng(0)
    F = np.linalg.qr(rng.normal(size=(4, 4)))[0]
    codes = rng.exponential(1.0, (3000, 4)) * (rng.random((3000, 4)) < 0.3)
    x = 30.0 * codes @ F + 7.0  # far from unit scale: the fold must undo it
    for kind, coef in (("relu", 0.01), ("topk", 0), ("batchtopk", 0), ("jumprelu", 0.001)):
        stack, history = train_stack(
            kind, x, widths=[8], ks=[2], coefs=[coef], recipe=Recipe(steps=600, batch=256)
        )
        assert history[-1]["loss"][0] < history[0]["loss"][0]
        f = encode(stack, x)
        x_hat = f[0] @ stack.W_dec[0] + stack.b_dec[0]
        fvu = ((x - x_hat) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
        assert fvu < 0.1, (kind, fvu)


def test_batchtopk_threshold_gives_about_k_at_inference():
    """Bussmann et al. 2024's threshold, learned while training, keeps about k latents per token
    at inference, without the batch."""
    rng = np.random.default_rng(0)
    F = rng.normal(size=(16, 6))
    F /= np.linalg.norm(F, axis=1, keepdims=True)
    x = (rng.random((4000, 16)) < 2 / 16) * rng.uniform(0.5, 1.5, (4000, 16)) @ F
    stack, _ = train_stack("batchtopk", x, widths=[16], ks=[2], recipe=Recipe(steps=300, batch=256))
    assert stack.threshold[0] > 0
    l0 = (encode(stack, x)[0] != 0).sum(-1).mean()
    assert 1.0 < l0 < 4.0, l0


def test_widths_train_apart_and_come_back_as_one_stack():
    """Each width is its own stack, on the same batches: a member trained with others of other
    widths is the member trained alone."""
    rng = np.random.default_rng(0)
    x = rng.exponential(1.0, (500, 4)) * (rng.random((500, 4)) < 0.4)
    recipe = Recipe(steps=30, batch=64)
    together, history = train_stack("topk", x, widths=[8, 4, 8], ks=[2, 1, 3], recipe=recipe)
    alone, _ = train_stack("topk", x, widths=[4], ks=[1], recipe=recipe)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        np.testing.assert_array_equal(together.member(1)[name], alone.member(0)[name])
    assert together.W_enc.shape == (3, 4, 8) and (together.W_dec[1, 4:] == 0).all()
    assert len(history[-1]["loss"]) == 3
    assert (encode(together, x)[1][:, 4:] == 0).all()
