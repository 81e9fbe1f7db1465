"""How numba links a kernel to the kernels it calls, changed to optimise each callee once
rather than once per level of the call tree above it.

numba compiles a kernel into its own LLVM module, links into it the optimised modules of every
kernel it calls (and theirs), and then runs the whole O3 pipeline over the linked module, so
that callees can be inlined. Already optimised, a large callee gains nothing from the second
pass, but its cost recurs at every level: much of a cold start's compile was `train_chunk` and
`evaluate_kernel` optimising the forward and backward passes again (numba's event timings;
bench/first_run.py for the cold start before and after).
Here a kernel's module is optimised with only its small callees linked in, the ones worth
inlining (numba's allocator, np.empty, NRT's: left out too, a paper-2d step is slower), and
its large callees are linked in after, as they are.

What a kernel computes does not change, only how much of the linked code LLVM optimises again;
a large callee's code is now the one its own compile made, whoever calls it. Only this
package's kernels are built so (`OPTIONS`, numba's public `pipeline_class` option): numba itself
is not touched, and any other numba kernel in the process compiles as it would without
flatformer. numba's internals move between releases: where the method this rewrites is not the
one it was written against, the kernels compile as numba's own do.
"""

from __future__ import annotations

import inspect

from numba.core import codegen, compiler

# Instructions of a callee's optimised module at most, for it to be optimised again with its
# caller: numba's own helpers (the allocator, np.empty, NRT's) have under 80, the engine's
# kernels from 180 (`copy`) to 8,700 (`forward_at`).
INLINE_SIZE = 100


def small(module) -> bool:
    """Whether an LLVM module defines at most INLINE_SIZE instructions: counted through the FFI
    one by one, so stopped at the limit (a full count of the large modules cost more than a
    tenth of `train_chunk`'s compile)."""
    count = 0
    for function in module.functions:
        if function.is_declaration:
            continue
        for block in function.blocks:
            for _ in block.instructions:
                count += 1
                if count > INLINE_SIZE:
                    return False
    return True


class Library(codegen.JITCodeLibrary):
    """numba's library of one JIT-compiled kernel, its large linked modules added after
    optimisation."""

    def finalize(self):
        """numba's CPUCodeLibrary.finalize, the large linked modules linked in after
        `_optimize_final_module` rather than before."""
        codegen.require_global_compiler_lock()
        self._codegen._check_llvm_bugs()
        self._raise_if_finalized()
        seen, large = set(), []
        for library in self._linking_libraries:
            if library in seen:
                continue
            seen.add(library)
            self._reload_init.update(library._reload_init)
            module = library._get_module_for_linking()
            if small(module):
                self._final_module.link_in(module, preserve=True)
            else:
                large.append(module)
        self._optimize_final_module()
        for module in large:
            self._final_module.link_in(module, preserve=True)
        self._final_module.verify()
        self._finalize_final_module()


class Compiler(compiler.Compiler):
    """numba's compiler, the kernel's code put in a `Library`, where numba would create a plain
    one (its lowering pass creates a library only when the compile was given none)."""

    def compile_extra(self, func):
        state = self.state
        target = state.targetctx.codegen()
        if state.library is None and target._library_class is codegen.JITCodeLibrary:
            state.library = Library(target, func.__qualname__)
            state.library.enable_object_caching()  # as numba's lowering does: for its cache
        return super().compile_extra(func)


def numba_finalize_known() -> bool:
    """Whether numba's finalize of a JIT library is the one `Library.finalize` rewrites: it
    links, then optimises, then finalises, with the private names used here."""
    try:
        source = inspect.getsource(codegen.JITCodeLibrary.finalize)
    except (OSError, TypeError):
        return False
    steps = (
        "self._linking_libraries",
        "library._get_module_for_linking()",
        "self._optimize_final_module()",
        "self._finalize_final_module()",
    )
    known = all(step in source for step in steps)
    return known and hasattr(codegen, "require_global_compiler_lock")


# The options that give a kernel this linking (for numba.njit), none where numba's finalize is not
# the known one.
OPTIONS = {"pipeline_class": Compiler} if numba_finalize_known() else {}
