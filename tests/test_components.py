"""The transformer's components (engine/components.py): each hand-written backward against
PyTorch's autograd, with the leading axes the model (seeds) and the edge graph (variants) give
them; and the rule that the math is written there once: the modules that compute the
transformer in NumPy compose the components and define no LayerNorm, attention or MLP of their
own."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from flatformer.engine import components as C

ROOT = Path(__file__).resolve().parents[1] / "flatformer"

# Every module that computes the transformer's math in NumPy, and what it composes.
CONSUMERS = {
    "engine/model.py": "the reference model: forward with hooks, backward",
    "edges/graph.py": "the edge graph: senders, receivers, batched edge masks, backward",
    "readout/landscape.py": "the output landscape: the last MLP and LayerNorms on a plane",
    "engine/fused.py": "the compiled float32 kit, written against the components' Kit",
}
# Implementations in another language, each held to the components in its own tests.
OTHER_LANGUAGES = {
    "engine/kernels": "numba's compiled engine (test_kernels.py)",
    "engine/fused.py": "numba's float32 elementwise steps (test_fused.py)",
    "bridge.py": "PyTorch, the oracle of these tests and test_model.py",
}

RNG = np.random.default_rng(0)


def t(a):
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def grad_of(loss, *tensors):
    loss.backward()
    return [x.grad.numpy() for x in tensors]


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * max(1.0, np.abs(want).max()))


# ---- each backward against autograd -------------------------------------------------------

# (activation leading axes, weight leading axes): one model; S seeds, each its weights;
# E variants of a batch sharing one set of weights (the edge graph)
LEADS = [((), ()), ((3,), (3,)), ((4, 2), ())]


@pytest.mark.parametrize("lead, wlead", LEADS)
def test_layer_norm_backward_is_autograds(lead, wlead):
    d = 6
    x = RNG.standard_normal((*lead, 5, d)) * 2 + 1
    wshape = (*wlead, *([1] * (len(lead) - len(wlead))), 1, d) if wlead else (d,)
    w, b = RNG.standard_normal(wshape), RNG.standard_normal(wshape)
    y, x_hat, scale = C.layer_norm(x, w, b)
    tx, tw, tb = t(x), t(w), t(b)
    ty = torch.nn.functional.layer_norm(tx, (d,), eps=1e-5) * tw + tb
    close(y, ty.detach().numpy())
    dy = RNG.standard_normal(y.shape)
    for got, want in zip(
        C.layer_norm_backward(dy, x_hat, scale, w), grad_of((ty * t(dy)).sum(), tx, tw, tb)
    ):
        assert got.shape == want.shape
        close(got, want)


@pytest.mark.parametrize("lead", [(), (3, 2), (4, 2, 3)])
@pytest.mark.parametrize("queries", [None, [1, 4]])
def test_attention_backward_is_autograds(lead, queries):
    """Heads on a leading axis; with `queries` a few rows of the causal mask (the training
    path's read positions)."""
    T, dh = 5, 4
    bias = C.causal_bias(T)
    rows = slice(None) if queries is None else queries
    q = RNG.standard_normal((*lead, T, dh))[..., rows, :]
    k, v = RNG.standard_normal((2, *lead, T, dh))
    z, pattern = C.attention(q, k, v, bias[rows])
    tq, tk, tv = t(q), t(k), t(v)
    scores = tq @ tk.transpose(-1, -2) / math.sqrt(dh) + torch.tensor(bias[rows])
    tz = scores.softmax(-1) @ tv
    close(z, tz.detach().numpy())
    dz = RNG.standard_normal(z.shape)
    got = C.attention_backward(dz, q, k, v, pattern)
    for got, want in zip(got, grad_of((tz * t(dz)).sum(), tq, tk, tv)):
        close(got, want)


@pytest.mark.parametrize("coeff", [0.0, 1e-3, 0.3, 0.9])
@pytest.mark.parametrize("queries", [None, [1, 4]])
@pytest.mark.parametrize("causal", [True, False])
def test_the_attention_rate_backward_is_autograds(coeff, queries, causal):
    """Zhong et al.'s attn_coeff: coeff softmax + (1 - coeff) on every key a query reads, as
    their code writes it, forward and backward against autograd."""
    T, dh, lead = 5, 4, (3, 2)
    bias = C.causal_bias(T) if causal else np.zeros((T, T))
    rows = slice(None) if queries is None else queries
    q = RNG.standard_normal((*lead, T, dh))[..., rows, :]
    k, v = RNG.standard_normal((2, *lead, T, dh))
    z, pattern = C.attention(q, k, v, bias[rows], coeff=coeff)
    tq, tk, tv = t(q), t(k), t(v)
    scores = tq @ tk.transpose(-1, -2) / math.sqrt(dh) + torch.tensor(bias[rows])
    seen = torch.tensor(np.isfinite(bias[rows]), dtype=torch.float64)
    mixed = scores.softmax(-1) * coeff + (1 - coeff) * seen
    tz = mixed @ tv
    close(pattern, mixed.detach().numpy())
    close(z, tz.detach().numpy())
    dz = RNG.standard_normal(z.shape)
    got = C.attention_backward(dz, q, k, v, pattern, coeff=coeff, bias=bias[rows])
    for got, want in zip(got, grad_of((tz * t(dz)).sum(), tq, tk, tv)):
        assert got.shape == want.shape
        close(got, want)


def test_uniform_attention_sums_the_values_a_query_reads():
    """At attn_coeff 0 the pattern is 1 on every key read: query i gets v_0 + ... + v_i."""
    T, dh = 4, 3
    q, k, v = RNG.standard_normal((3, T, dh))
    z, pattern = C.attention(q, k, v, C.causal_bias(T), coeff=0.0)
    np.testing.assert_array_equal(pattern, np.tril(np.ones((T, T))))
    close(z, np.cumsum(v, 0))


def test_attention_hooks_see_the_scores_and_the_pattern_and_cannot_unmask():
    T, dh = 4, 2
    q, k, v = RNG.standard_normal((3, 2, T, dh))
    seen = {}

    def hook(name, x):
        seen[name] = x
        return np.zeros_like(x) if name == "hook_attn_scores" else x

    _, pattern = C.attention(q, k, v, C.causal_bias(T), hook)
    assert list(seen) == ["hook_attn_scores", "hook_pattern"]
    np.testing.assert_allclose(pattern[0], np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None])


@pytest.mark.parametrize("act_fn", ["relu", "gelu", "gelu_erf"])
@pytest.mark.parametrize("lead, wlead", LEADS)
def test_mlp_backward_is_autograds(act_fn, lead, wlead):
    d, m = 4, 7
    x = RNG.standard_normal((*lead, 5, d)) * 2
    W_in, W_out = RNG.standard_normal((*wlead, d, m)), RNG.standard_normal((*wlead, m, d))
    b_in, b_out = RNG.standard_normal((*wlead, 1, m)), RNG.standard_normal((*wlead, 1, d))
    out, saved = C.mlp(x, W_in, b_in, W_out, b_out, act_fn)
    act = {
        "relu": torch.relu,
        "gelu": lambda u: torch.nn.functional.gelu(u, approximate="tanh"),
        "gelu_erf": torch.nn.functional.gelu,
    }[act_fn]
    tensors = [t(a) for a in (x, W_in, b_in, W_out, b_out)]
    tx, tW_in, tb_in, tW_out, tb_out = tensors
    tout = act(tx @ tW_in + tb_in) @ tW_out + tb_out
    close(out, tout.detach().numpy())
    dout = RNG.standard_normal(out.shape)
    dx, (dW_in, db_in, dW_out, db_out) = C.mlp_backward(
        dout, x, W_in, b_in, W_out, b_out, act_fn, saved
    )
    for got, want in zip(
        (dx, dW_in, db_in, dW_out, db_out), grad_of((tout * t(dout)).sum(), *tensors)
    ):
        assert got.shape == want.shape
        close(got, want)


@pytest.mark.parametrize("lead", [(), (3,)])
def test_embeddings_and_unembedding_backward_are_autograds(lead):
    V, n_ctx, d, B, T = 7, 6, 3, 2, 4
    W_E, W_pos = RNG.standard_normal((*lead, V, d)), RNG.standard_normal((*lead, n_ctx, d))
    W_U, b_U = RNG.standard_normal((*lead, d, V)), RNG.standard_normal((*lead, 1, V))
    tokens = RNG.integers(0, V, (*lead, B, T))
    e = C.embed(W_E, tokens) + C.pos_embed(W_pos, tokens)
    logits = C.linear(e.reshape(*lead, B * T, d), W_U, b_U)
    tW_E, tW_pos, tW_U, tb_U = (t(a) for a in (W_E, W_pos, W_U, b_U))
    if lead:
        seeds = torch.arange(lead[0])[:, None, None]
        te = tW_E[seeds, torch.tensor(tokens)] + tW_pos[:, None, :T]
    else:
        te = tW_E[torch.tensor(tokens)] + tW_pos[:T]
    tlogits = te.reshape(*lead, B * T, d) @ tW_U + tb_U
    close(logits, tlogits.detach().numpy())
    dlogits = RNG.standard_normal(logits.shape)
    want = grad_of((tlogits * t(dlogits)).sum(), tW_E, tW_pos, tW_U, tb_U)
    de, dW_U, db_U = C.linear_backward(dlogits, e.reshape(*lead, B * T, d), W_U, b_U)
    de = de.reshape(e.shape)
    got = (C.embed_backward(de, tokens, W_E), C.pos_embed_backward(de, W_pos), dW_U, db_U)
    for got, want in zip(got, want):
        close(got, want)


def test_the_reference_kit_is_the_components_own():
    assert C.REFERENCE.layer_norm is C.layer_norm and C.REFERENCE.softmax is C.softmax


# ---- the math is written once -------------------------------------------------------------


def functions(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node


def calls(node) -> set[str]:
    """The names a function calls: `np.exp` as "exp", `x.mean` as "mean"."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def root(node) -> str:
    """The name an expression starts from: `post.reshape(S, -1)` -> "post"."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return getattr(node, "id", "")


def row_reductions(node) -> bool:
    """Whether a function reduces over the last axis: `.mean(-1)`, `.sum(axis=-1)`, row_sum."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name)):
            name = n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id
            axes = [*n.args[:1], *(k.value for k in n.keywords if k.arg == "axis")]
            last = any(ast.unparse(a) == "-1" for a in axes)
            if (name in ("mean", "var", "sum") and last) or name == "row_sum":
                return True
    return False


NONLINEAR = {"tanh", "maximum", "relu", "gelu", "gelu_erf", "activation"}


def own_math(node) -> list[str]:
    """What transformer math a function writes itself: a LayerNorm (a square root of a
    reduction over each row), a softmax attention (an exponential or a softmax, and a causal
    mask), an MLP (a nonlinearity whose result goes into a matrix product)."""
    c, found = calls(node), []
    if "sqrt" in c and row_reductions(node):
        found.append("LayerNorm")
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if {"exp", "softmax"} & c and any("mask" in n or "causal" in n for n in names):
        found.append("softmax attention")
    activated = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            if calls(n.value) & NONLINEAR:
                targets = n.targets[0].elts if isinstance(n.targets[0], ast.Tuple) else n.targets
                activated.update(root(t) for t in targets[:1])
    matmuls = [
        n for n in ast.walk(node) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)
    ]
    for m in matmuls:
        left = m.left
        if (isinstance(left, ast.Call) and calls(left) & NONLINEAR) or root(left) in activated:
            found.append("MLP")
            break
    return found


def python_modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "engine/components.py" or any(rel.startswith(o) for o in OTHER_LANGUAGES):
            continue
        yield rel, path


def test_no_module_but_the_components_writes_layernorm_attention_or_the_mlp():
    """On the tree before the components existed this named edges/graph.py (LayerNorm,
    attention, the MLP, forward and backward), engine/ops.py (LayerNorm, attention),
    engine/model.py's and readout/landscape.py's MLPs."""
    offenders = [
        f"{rel}:{node.lineno} {what}"
        for rel, path in python_modules()
        for node in functions(path)
        for what in own_math(node)
    ]
    assert offenders == []


def test_the_check_finds_each_piece_of_math():
    """The check above recognises what it forbids, written out in one function."""
    written_out = ast.parse(
        "def f(x, W):\n"
        "    x = (x - x.mean(-1)) / np.sqrt(x.var(-1) + 1e-5)\n"
        "    p = np.exp(np.where(mask, x @ x.T, -np.inf))\n"
        "    return np.maximum(x @ W, 0) @ W.T\n"
    ).body[0]
    assert own_math(written_out) == ["LayerNorm", "softmax attention", "MLP"]


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_each_consumer_composes_the_components(consumer):
    tree = ast.parse((ROOT / consumer).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert any(m.endswith("components") for m in imported), (
        f"{consumer} ({CONSUMERS[consumer]}) does not import the components"
    )
