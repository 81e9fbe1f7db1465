"""The compiled float32 elementwise kernels (fused.py) against the components' NumPy versions
run in float64, the reference."""

import math

import numpy as np
from numba import njit

from flatformer.engine import components as ref
from flatformer.engine import fused
from flatformer.engine.components import REFERENCE
from flatformer.engine.model import kit_for

RNG = np.random.default_rng(0)


@njit
def exp_all(x, out):
    for i in range(x.shape[0]):
        out[i] = fused.exp(x[i])


def f32(*arrays):
    return [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]


def close(got, want, scale=1.0):
    """float32's own rounding, a few units in the last place of the largest value."""
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * scale * max(np.abs(want).max(), 1))


def test_exp_within_one_unit_in_the_last_place_and_its_edges():
    x = np.linspace(-87, 88, 1_000_001, dtype=np.float32)
    out = np.empty_like(x)
    exp_all(x, out)
    want = np.exp(x.astype(np.float64))
    assert (np.abs(out - want) / np.spacing(want.astype(np.float32))).max() <= 1.0
    edges = np.array([0.0, -np.inf, -100.0, np.inf, 100.0, np.nan], np.float32)
    out = np.empty_like(edges)
    exp_all(edges, out)
    np.testing.assert_array_equal(out, [1.0, 0.0, 0.0, np.inf, np.inf, np.nan])


def test_gelu_forward_and_backward():
    pre = RNG.standard_normal((3, 50, 37)) * 4
    pre[0, 0, :4] = [0.0, -60.0, 60.0, 1e-3]
    post, t = ref.gelu(pre)
    post32, t32 = fused.gelu(*f32(pre))
    close(post32, post)
    close(t32, t)
    assert post32[0, 0, 0] == 0.0 and post32[0, 0, 1] == 0.0 and post32[0, 0, 2] == 60.0
    dpost = RNG.standard_normal(pre.shape)
    close(fused.gelu_backward(*f32(dpost, pre, t)), ref.gelu_backward(dpost, pre, t), scale=4)


def test_layer_norm_forward_and_backward():
    S, d = 2, 24
    x = RNG.standard_normal((S, 3, 5, d)) * 3 + 1
    w, b = RNG.standard_normal((S, 1, 1, d)), RNG.standard_normal((S, 1, 1, d))
    want = ref.layer_norm(x, w, b)
    for got, expected in zip(fused.layer_norm(*f32(x, w, b)), want):
        close(got, expected)
    _, xhat, scale = want
    dy = RNG.standard_normal(x.shape)
    for got, expected in zip(
        fused.layer_norm_backward(*f32(dy, xhat, scale, w)),
        ref.layer_norm_backward(dy, xhat, scale, w),
    ):
        close(got, expected, scale=10)


def test_softmax_forward_and_backward_masked_and_nan():
    T = 9
    scores = RNG.standard_normal((2, 3, 4, T, T)) * 8 + ref.causal_bias(T, np.float64)
    scores[0, 0, 0, 4, :2] = np.nan
    want = ref.softmax(scores)
    got = fused.softmax(*f32(scores))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, 0, 0, 4]).all()
    fine = ~np.isnan(want)
    close(got[fine], want[fine])
    assert (got[..., 0, 1:] == 0).all() and (got[1, ..., 0, 0] == 1).all()
    scores[0, 0, 0, 4, :2] = 0.0
    pattern = ref.softmax(scores)
    dpattern = RNG.standard_normal(pattern.shape)
    close(
        fused.softmax_backward(*f32(dpattern, pattern), math.sqrt(8)),
        ref.softmax_backward(dpattern, pattern, math.sqrt(8)),
    )


def test_float32_takes_the_compiled_kit_and_float64_the_reference():
    assert kit_for(np.float32) is fused.KIT
    assert kit_for(np.float64) is REFERENCE


def test_the_kit_takes_strided_arrays():
    """A hook may hand over a strided view: the kit copies it to a contiguous one."""
    scores = RNG.standard_normal((3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(
        fused.softmax(scores[:, ::2]), fused.softmax(scores[:, ::2].copy())
    )
