"""What a test needs beyond the core install and torch, and what its absence means.

The fast loop runs on the core install plus torch and pytest: a test that needs an extra
(TransformerLens, Ray, rsatoolbox, a browser, notebooks, hypothesis) is skipped, and the skip
names what would install it. CI installs everything and exports FLATFORMER_TEST_EXTRAS=all;
there the same absence is a failure, because a missing extra in CI is a broken install and a
skip would hide the tests it stops. A test needs an extra in one of three ways, all handled
here, so test files import what they use as usual:

- its module imports the extra at the top (`import nbformat`, `from hypothesis import given`);
- it uses a fixture that needs one (`FIXTURES`), or reaches one through flatformer (`TESTS`);
- its body imports one, or calls `pytest.importorskip` on one.

tests/conftest.py imports the hooks below; tests/test_extras.py runs pytest on small files to
show both behaviours.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from pathlib import Path

import pytest

from browser import CHROMIUM

ENV = "FLATFORMER_TEST_EXTRAS"

# Each importable name (or program) a test may need, and what installs it. The names are
# top-level modules; scipy comes with rsatoolbox (flatformer.rsa imports it).
EXTRAS = {
    "transformer_lens": "flatformer[lens]",
    "transformers": "flatformer[lens]",  # Hugging Face's, which TransformerLens installs
    "ray": "flatformer[ray]",
    "rsatoolbox": "flatformer[neuro]",
    "scipy": "flatformer[neuro]",
    "hypothesis": "flatformer[test]",
    "playwright": "flatformer[test]",
    "nbformat": "flatformer[test]",
    "nbclient": "flatformer[test]",
    "nbconvert": "flatformer[test]",
    "ipykernel": "flatformer[test]",
    # sae-lens pins transformer-lens < 4 (flatformer[lens] is 4.x): CI installs it in an
    # environment of its own and runs its agreement test there (.ci/run).
    "sae_lens": "pip install sae-lens, in an environment of its own (it needs transformer-lens < 4)",
    CHROMIUM: "Chromium (apt-get install chromium)",
}
# Fixtures that need an extra: every test using one needs it too.
FIXTURES = {"chromium": ("playwright", CHROMIUM), "local_ray": ("ray",)}
# Tests whose body reaches an extra only when it runs (the bridge imports TransformerLens when
# it is called; the GPT-2 tests build their model with transformers), by "file::test[parameters]"
# where * stands for anything.
TESTS = {
    "test_analysis_induction.py::test_scores_equal_transformer_lens": ("transformer_lens",),
    "test_bridge_lens.py::*transformer_lens*": ("transformer_lens",),
    "test_bridge_lens.py::test_imported_model_features_in_both_bridges*": ("transformer_lens",),
    "test_edges.py::test_edge_ablation_and_its_gradient_equal_hooks_on_the_bridge[*-transformer-lens]": (
        "transformer_lens",
    ),
    "test_import_hf.py::test_*gpt2*": ("transformers",),
    "test_import_tokenizer.py::*": ("transformers",),
}


def required() -> bool:
    """Whether an absent extra fails (FLATFORMER_TEST_EXTRAS=all) rather than skips."""
    value = os.environ.get(ENV, "")
    if value not in ("", "all"):
        raise pytest.UsageError(f"{ENV}={value!r}: set it to 'all' (as CI does) or leave it unset")
    return value == "all"


def pytest_configure(config):
    required()  # a mistyped value is refused before anything runs, not read as "unset"


@functools.cache
def absent(name: str) -> bool:
    if name.startswith("/"):
        return not os.path.exists(name)
    return importlib.util.find_spec(name) is None


def skip_reason(name: str) -> str:
    return f"needs {name}, from {EXTRAS[name]}"


def failure(name: str, what: str) -> str:
    return f"{ENV}=all, but {name} is not installed ({EXTRAS[name]}): {what} cannot run"


def matches(pattern: str, name: str) -> bool:
    """Whether `name` is `pattern` with each * standing for anything (brackets are literal, as
    in parameter ids)."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), name) is not None


def needs_of(item) -> tuple[str, ...]:
    """The extras `item` needs through its fixtures or the TESTS table."""
    names = [n for fixture in item.fixturenames for n in FIXTURES.get(fixture, ())]
    name = f"{item.path.name}::{item.name}"
    names += [n for pattern, needs in TESTS.items() if matches(pattern, name) for n in needs]
    return tuple(dict.fromkeys(names))


def mark_needs(items) -> None:
    """Mark what each test needs; without the switch, a test needing an absent extra is marked
    skipped here (so its skip is reported at the test, not at this file)."""
    strict = required()
    for item in items:
        if names := needs_of(item):
            item.add_marker(pytest.mark.needs(*names))
        missing = [n for mark in item.iter_markers("needs") for n in mark.args if absent(n)]
        if missing and not strict:
            item.add_marker(pytest.mark.skip(reason=skip_reason(missing[0])))


@pytest.hookimpl(tryfirst=True)  # before the fixtures are set up (a browser launched)
def pytest_runtest_setup(item):
    if not required():
        return
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            if absent(name):
                pytest.fail(failure(name, item.nodeid), pytrace=False)


def _importorskip_name(message: str) -> str | None:
    """The extra a `pytest.importorskip` skip is about ("could not import 'x': ..."), if any."""
    prefix = "could not import '"
    if not message.startswith(prefix):
        return None
    name = message[len(prefix) :].split("'", 1)[0].split(".")[0]
    return name if name in EXTRAS else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Skips from `pytest.importorskip` name the extra (or fail under the switch); a test whose
    own code (or a helper's beside it) imports an absent extra as it runs is skipped likewise."""
    report = yield
    if report.failed and call.excinfo and not required():
        found = _missing_import(call.excinfo.value, item.path)
        if found:
            report.outcome = "skipped"
            path, lineno = item.reportinfo()[:2]  # the test's own line, as a skip mark reports
            report.longrepr = (str(path), lineno, f"Skipped: {skip_reason(found[0])}")
    if report.skipped and call.excinfo and call.excinfo.errisinstance(pytest.skip.Exception):
        name = _importorskip_name(str(call.excinfo.value.msg))
        if name and required():
            report.outcome = "failed"
            report.longrepr = failure(name, item.nodeid)
        elif name:
            path, lineno, _ = report.longrepr
            report.longrepr = (path, lineno, f"Skipped: {skip_reason(name)}")
    return report


def _missing_import(error: BaseException | None, module: Path) -> tuple[str, int] | None:
    """The extra that an import statement of the test module (or of a helper beside it) failed
    on, and that statement's line; None when the import that failed was made elsewhere
    (flatformer importing an extra when it loads is a bug the core loop should show, not skip)."""
    if not isinstance(error, ModuleNotFoundError) or not error.name:
        return None
    name = error.name.split(".")[0]
    frames, tb = [], error.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith("<frozen"):
            frames.append(tb)
        tb = tb.tb_next
    if name not in EXTRAS or not frames:
        return None
    last = frames[-1]
    if Path(last.tb_frame.f_code.co_filename).resolve().parent != module.resolve().parent:
        return None
    return name, last.tb_lineno


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector):
    """A test module whose own imports need an absent extra: skipped, or failed under
    FLATFORMER_TEST_EXTRAS=all. Everything else is collected as pytest collects it."""
    if not isinstance(collector, pytest.Module):
        return None
    try:
        collector.obj  # imports the module once; pytest's own collection reuses it
    except pytest.Collector.CollectError as error:
        found = _missing_import(error.__cause__, collector.path)
        if found is None:
            return None
        name, lineno = found
        if required():
            return pytest.CollectReport(
                collector.nodeid, "failed", failure(name, collector.nodeid), []
            )
        longrepr = (str(collector.path), lineno, f"Skipped: {skip_reason(name)}")
        return pytest.CollectReport(collector.nodeid, "skipped", longrepr, [])
    except pytest.skip.Exception as skip:
        name = _importorskip_name(str(skip.msg))
        if name and required():
            return pytest.CollectReport(
                collector.nodeid, "failed", failure(name, collector.nodeid), []
            )
    return None
