"""How numba links a kernel to its callees (kernels/linking.py): a large callee is linked in
after its caller is optimised, so it is not optimised (nor inlined) again; a small one still is."""

import re

import numpy as np
from numba import njit
from numba.core.codegen import CPUCodeLibrary

from flatformer.engine import kernels  # noqa: F401 - installs the linking
from flatformer.engine.kernels import linking


def test_numbas_finalize_is_replaced():
    assert linking.numba_finalize_known()
    assert CPUCodeLibrary.finalize is linking.finalize


@njit
def small(x):
    return x + 1.0


@njit
def large(a, scale):
    # LLVM would inline this into a caller passing scale=0.0 (the branch folds away), were it
    # optimised again with that caller. A float: numba would prune a constant bool's branch
    # itself, before LLVM sees it.
    s = 0.0
    if scale != 0.0:
        for i in range(a.size):
            for k in range(12):
                s += np.sin(a[i] * (k + 0.5)) * np.cos(a[i] + k * scale)
        for i in range(a.size):
            a[i] = a[i] * s + np.tanh(a[i])
    return s + a.size


@njit
def caller(a):
    return large(a, 0.0) + small(a[0])


def calls_in(dispatcher) -> str:
    """The body of `dispatcher`'s own function (not its Python or C wrapper) in its final
    (linked) LLVM module."""
    ir = dispatcher.inspect_llvm(dispatcher.signatures[0])
    name = dispatcher.py_func.__name__
    start = re.search(rf"define [^\n]*@_ZN(?!7cpython)[^\n]*{name}[^\n]*\{{", ir).start()
    return ir[start : ir.index("\n}\n", start)]


def test_a_large_callee_is_called_and_a_small_one_inlined():
    a = np.ones(5)
    assert caller(a) == 7.0
    library = large.overloads[large.signatures[0]].library
    assert not linking.small(library._get_module_for_linking())
    assert linking.small(small.overloads[small.signatures[0]].library._get_module_for_linking())
    body = calls_in(caller)
    assert re.search(r"call [^\n]*large", body)
    assert not re.search(r"call [^\n]*small", body)
