"""How numba links a kernel to its callees (kernels/linking.py): in flatformer's kernels, a large
callee is linked in after its caller is optimised, so it is not optimised (nor inlined) again,
and a small one still is; numba itself, and a user's own kernels beside flatformer's, are left
as numba made them."""

import json
import os
import re
import subprocess
import sys

import numba
import numpy as np
from numba.core import codegen

from flatformer.engine.kernels import linking
from flatformer.engine.kernels.intrinsics import njit

# A user's module of kernels: `caller` calls a large kernel and a small one. numba inlines both
# (LLVM folds `large`'s branch away with scale=0.0); flatformer's linking would keep `large` a
# call.
USER_KERNELS = """
import numpy as np
from numba import njit


@njit
def small(x):
    return x + 1.0


@njit
def large(a, scale):
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
"""


def define(source: str, decorator) -> dict:
    """The kernels of `source`, each compiled with `decorator` in place of numba.njit."""
    names = {"__name__": "user_kernels", "np": np, "njit": decorator}
    exec(source.replace("from numba import njit\n", ""), names)
    return names


def calls_in(dispatcher) -> str:
    """The body of `dispatcher`'s own function (not its Python or C wrapper) in its final
    (linked) LLVM module."""
    ir = dispatcher.inspect_llvm(dispatcher.signatures[0])
    name = dispatcher.py_func.__name__
    start = re.search(rf"define [^\n]*@_ZN(?!7cpython)[^\n]*{name}[^\n]*\{{", ir).start()
    return ir[start : ir.index("\n}\n", start)]


def test_flatformers_kernels_link_a_large_callee_after_and_inline_a_small_one():
    assert linking.numba_finalize_known() and linking.OPTIONS
    kernels = define(USER_KERNELS, njit)
    caller, large, small = kernels["caller"], kernels["large"], kernels["small"]
    assert caller(np.ones(5)) == 7.0
    assert type(caller.overloads[caller.signatures[0]].library) is linking.Library
    library = large.overloads[large.signatures[0]].library
    assert not linking.small(library._get_module_for_linking())
    assert linking.small(small.overloads[small.signatures[0]].library._get_module_for_linking())
    body = calls_in(caller)
    assert re.search(r"call [^\n]*large", body)
    assert not re.search(r"call [^\n]*small", body)


def test_a_numba_kernel_beside_them_links_as_numba_does():
    assert codegen.CPUCodeLibrary.finalize.__module__ == "numba.core.codegen"
    caller = define(USER_KERNELS, numba.njit)["caller"]
    assert caller(np.ones(5)) == 7.0
    assert type(caller.overloads[caller.signatures[0]].library) is codegen.JITCodeLibrary
    assert not re.search(r"call [^\n]*(large|small)", calls_in(caller))


# Run as a script, with "flatformer" (train first) or "numba" (numba alone): prints, as JSON,
# which attributes of numba's and llvmlite's modules and classes were rebound, and the user's
# kernel as compiled after.
PROBE = """
import inspect, json, sys
import numpy as np
import numba
from numba.core import codegen, compiler, cpu, dispatcher


def attributes():
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in ("numba", "llvmlite"):
            continue
        for key, value in list(vars(module).items()):
            found[f"{name}.{key}"] = value
            if inspect.isclass(value) and value.__module__ == name:
                for attr, member in list(vars(value).items()):
                    found[f"{name}.{key}.{attr}"] = member
    return found


before = attributes()
if sys.argv[1] == "flatformer":
    from flatformer.commands.cli import main
    from flatformer.engine.kernels import evaluate_kernel
    try:
        main(["train", "plus-last-even", "--out", sys.argv[2]])
    except SystemExit as exit:
        if exit.code:
            raise
    libraries = [type(c.library).__module__ for c in evaluate_kernel.overloads.values()]
else:
    libraries = []
import user_kernels
user_kernels.caller(np.ones(5))
after = attributes()
signature = user_kernels.caller.signatures[0]
print(json.dumps({
    "rebound": sorted(k for k, v in before.items() if k not in after or after[k] is not v),
    "libraries": libraries,
    "llvm": user_kernels.caller.inspect_llvm(signature),
    "asm": user_kernels.caller.inspect_asm(signature),
}))
"""


def probe(tmp_path, beside: str) -> dict:
    (tmp_path / "user_kernels.py").write_text(USER_KERNELS)
    (tmp_path / "probe.py").write_text(PROBE)
    cache = tmp_path / f"cache-{beside}"  # empty: flatformer's kernels compile in the process
    cache.mkdir()
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "NUMBA_CACHE_DIR": str(cache)}
    env["FLATFORMER_MAX_STEPS"] = "20"
    done = subprocess.run(
        [sys.executable, str(tmp_path / "probe.py"), beside, str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def renumbered(code: str) -> str:
    """LLVM IR or assembly without the number numba gives each function it compiles in a process
    (the v<n> tag of its mangled name, so the count of functions compiled before), nor the length
    of the string constants that hold such a name."""
    code = re.sub(r"B\d+v\d+(?=B)", "", code)
    code = re.sub(r"\[\d+ x i8\]", "[_ x i8]", code)
    return re.sub(r"(\.size\t\"?\.const\.[^\n]*, )\d+", r"\1_", code)


def test_after_training_numba_is_numbas_own_and_a_users_kernel_compiles_as_without_flatformer(
    tmp_path,
):
    alone, beside = probe(tmp_path, "numba"), probe(tmp_path, "flatformer")
    # numba rebinds a few flags and caches of its own as it compiles; nothing else changed
    assert beside["rebound"] == alone["rebound"]
    assert renumbered(beside["llvm"]) == renumbered(alone["llvm"])
    assert renumbered(beside["asm"]) == renumbered(alone["asm"])
    # and flatformer's evaluation kernel compiled in the process, with flatformer's linking
    assert beside["libraries"] == ["flatformer.engine.kernels.linking"]
