"""What numba lacks, written in its extension API: a float from its bits, arrays that skip
reference counting, the fused multiply-add; the vectorizable exponential built on them; and the
compile options and cache stamp every kernel of this package shares."""

from __future__ import annotations

import os

import numpy as np
from llvmlite import ir
from numba import njit as numba_njit
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .linking import OPTIONS as LINKING


# error_model="numpy": a division by zero gives inf or NaN as IEEE says, where numba's
# default tests every divisor first (and so keeps loops with a division out of vector
# lanes: AdamW's, the softmax's); no divisor here is zero but in a diverged run.
FAST = dict(cache=True, fastmath={"reassoc"}, nogil=True, error_model="numpy")
EXACT = dict(cache=True, nogil=True, error_model="numpy")
# For a kernel only other kernels call: numba otherwise builds and compiles two wrappers for
# every function, to be called from Python and from C, which none of these is (a sixth of a
# first run's compile).
INNER = dict(no_cpython_wrapper=True, no_cfunc_wrapper=True)

HERE = os.path.dirname(os.path.abspath(__file__))


def package_stamp() -> tuple:
    """(name, mtime, size) of every source file of this package. numba keys a cached kernel to
    its own file's stamp only, and links its callees' machine code into it: a change to a
    callee in another file (primitives.py under train_chunk in entries.py) would leave the
    stale code cached. Stamping every kernel with the whole package's files discards the cache
    on any change, as numba does for a kernel whose one file changed."""
    files = sorted(f for f in os.listdir(HERE) if f.endswith(".py"))
    return tuple(
        (f, *(lambda s: (s.st_mtime, s.st_size))(os.stat(os.path.join(HERE, f)))) for f in files
    )


STAMP = package_stamp()


def in_cache(kernel) -> bool | None:
    """Whether numba's cache holds machine code for `kernel` under this package's stamp: reads
    the index numba itself reads, compiles nothing. None when numba's internals moved."""
    try:
        return bool(kernel._cache._cache_file._load_index())
    except Exception:
        return None


def unliteral(dispatcher):
    """Type a kernel's calls by their arguments' types, not their values: numba compiles a
    callee once for each combination of constants it is called with (`linear(..., -1, False)`
    and `linear(..., bias, True)` were five compiles of `linear`, `blocks_forward(..., True)` and
    `(..., False)` two of the forward pass, the constant offsets passed to `linear_back_w`
    three of it), which was most of a first run's compile: each copy is linked into, and
    optimised again with, every kernel above it. A reassociating kernel's sums are fixed by
    its one compile, whoever calls it."""
    resolve = getattr(dispatcher, "get_call_template", None)
    if resolve is None:  # numba's internals moved: keep its default
        return

    def get_call_template(args, kws):
        return resolve(
            tuple(types.unliteral(a) for a in args),
            {k: types.unliteral(v) for k, v in kws.items()},
        )

    dispatcher.get_call_template = get_call_template


def njit(*args, **options):
    """numba.njit, its cache (with cache=True) stamped with the whole package (package_stamp),
    compiled once for its argument types rather than once per constant a caller passes
    (`unliteral`; not for kernels inlined where they are called), and its large callees linked
    in after it is optimised (linking.py)."""

    def wrap(function):
        dispatcher = numba_njit(**LINKING, **options)(function)
        cache = getattr(dispatcher, "_cache", None)
        if options.get("cache") and hasattr(getattr(cache, "_cache_file", None), "_source_stamp"):
            cache._cache_file._source_stamp = STAMP
        if "inline" not in options:
            unliteral(dispatcher)
        return dispatcher

    return wrap(args[0]) if args else wrap


@intrinsic
def as_float(typingctx, bits):
    """The float whose bit pattern is `bits`: an int64's float64, an int32's float32."""
    if bits not in (types.int64, types.int32):
        return None
    ty, llvm_ty = (
        (types.float64, ir.DoubleType()) if bits == types.int64 else (types.float32, ir.FloatType())
    )
    return ty(bits), lambda context, builder, sig, args: builder.bitcast(args[0], llvm_ty)


@intrinsic
def borrowed(typingctx, x):
    """x, an array or a (nested) tuple of arrays, as arrays that own nothing (no meminfo):
    numba counts references to an array at every call and view with an atomic instruction
    (measured: 15% of a paper-2d step, ~375 counts, which its pruning pass leaves wherever a
    callee may raise), and skips the count of an array that owns nothing. Their memory is
    the owner's: use them only while the owner lives (a kernel's argument, or an array
    used after them)."""

    def lower(context, builder, ty, value):
        if isinstance(ty, types.Array):
            array = context.make_array(ty)(context, builder, value)
            array.meminfo = cgutils.get_null_value(array.meminfo.type)
            array.parent = cgutils.get_null_value(array.parent.type)
            return array._getvalue()
        if isinstance(ty, types.BaseTuple):
            for i, item in enumerate(ty):
                value = builder.insert_value(
                    value, lower(context, builder, item, builder.extract_value(value, i)), i
                )
        return value

    return x(x), lambda context, builder, sig, args: lower(context, builder, sig.args[0], args[0])


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once, in float64 or float32 (llvm.fma: the hardware's instruction
    where there is one, else exact in software, so the result never depends on the
    machine)."""
    if not (a == b == c and a in (types.float64, types.float32)):
        return None
    return a(a, a, a), lambda context, builder, sig, args: builder.fma(*args)


LOG2E, LN2_HI, LN2_LO = (
    1.4426950408889634,
    6.93147180369123816490e-01,
    1.90821492927058770002e-10,
)
ROUND = 6755399441055744.0  # 1.5 * 2^52: adding and subtracting it rounds to an integer


@njit(cache=True, inline="always")
def exp(x):
    """e^x for x <= 0 (here: a value minus its row's maximum) within one unit in the last
    place of math.exp, in arithmetic the compiler can run in vector lanes (a call to the C
    library's exp cannot be): x = k ln 2 + r, |r| <= ln 2 / 2, e^r by its Taylor series to
    r^13 (the next term is below 1e-17) in Horner's scheme of fused multiply-adds (half the
    instructions of separate ones), 2^k from the exponent bits. Below -708 (a subnormal
    result) it gives 0; NaN stays NaN."""
    y = max(x, -708.0)
    k = (y * LOG2E + ROUND) - ROUND
    r = fma(-k, LN2_LO, fma(-k, LN2_HI, y))
    e = fma(
        fma(fma(1.0 / 6227020800.0, r, 1.0 / 479001600.0), r, 1.0 / 39916800.0),
        r,
        1.0 / 3628800.0,
    )  # 1 / 13!, 1 / 12!, ...
    e = fma(fma(fma(fma(e, r, 1.0 / 362880.0), r, 1.0 / 40320.0), r, 1.0 / 5040.0), r, 1.0 / 720.0)
    e = fma(fma(fma(fma(e, r, 1.0 / 120.0), r, 1.0 / 24.0), r, 1.0 / 6.0), r, 0.5)
    e = fma(fma(e, r, 1.0), r, 1.0)
    return e * as_float((np.int64(k) + 1023) << 52) if x >= -708.0 else (x if x != x else 0.0)
