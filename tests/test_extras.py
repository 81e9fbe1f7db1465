"""The policy of tests/extras.py, run on small test files by pytest in a subprocess: a missing
extra skips a test and names what installs it, except under FLATFORMER_TEST_EXTRAS=all (CI),
where the same absence fails; an extra imported by library code is an error either way."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ABSENT = "flatformer_absent_extra"  # a module no environment has

CONFTEST = f"""
import extras
from extras import pytest_configure, pytest_make_collect_report, pytest_runtest_makereport, pytest_runtest_setup

extras.EXTRAS["{ABSENT}"] = "flatformer[demo]"
extras.FIXTURES["demo"] = ("{ABSENT}",)


def pytest_collection_modifyitems(items):
    extras.mark_needs(items)
"""

FILES = {
    "pytest.ini": "[pytest]\nmarkers =\n    needs: see tests/extras.py\n",
    "conftest.py": CONFTEST,
    # the test module imports the extra itself
    "test_imports_it.py": f"import {ABSENT}\n\n\ndef test_uses_it():\n    pass\n",
    "test_in_tests.py": f"""
import pytest


@pytest.fixture
def demo():
    return 1


def test_importorskip():
    pytest.importorskip("{ABSENT}")


@pytest.mark.needs("{ABSENT}")
def test_marked():
    pass


def test_through_a_fixture(demo):
    pass


def test_imports_it_as_it_runs():
    import {ABSENT}  # noqa: F401


def test_needs_nothing():
    pass
""",
    # library code (outside the tests' folder) importing an extra when it loads
    "lib/library_module.py": f"import {ABSENT}\n",
    "test_library_imports_it.py": "import library_module\n\n\ndef test_it():\n    pass\n",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("extras")
    for name, text in FILES.items():
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(text)
    return root


def run_pytest(folder, extras):
    env = dict(os.environ, FLATFORMER_TEST_EXTRAS=extras, COLUMNS="300")  # summaries uncut
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # none is needed here, and they take seconds
    paths = [str(Path(__file__).parent), str(folder / "lib"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    args = ["-m", "pytest", "-q", "-rsfE", "-p", "no:cacheprovider"]
    args.append("--continue-on-collection-errors")
    return subprocess.run(
        [sys.executable, *args, str(folder)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )


def test_without_the_switch_a_missing_extra_skips_and_names_it(folder):
    result = run_pytest(folder, "")
    out = result.stdout
    assert "1 passed, 5 skipped, 1 error" in out, out
    assert out.count(f"needs {ABSENT}, from flatformer[demo]") == 5, out
    # library code importing an extra is not the test's need: it stays an error
    assert "ERROR test_library_imports_it.py" in out, out
    assert result.returncode != 0


def test_under_the_switch_a_missing_extra_fails(folder):
    result = run_pytest(folder, "all")
    out = result.stdout
    # a need found at set-up (a marker, a fixture) is an error there, before any fixture runs
    assert "2 failed, 1 passed, 4 errors" in out, out
    failure = f"FLATFORMER_TEST_EXTRAS=all, but {ABSENT} is not installed (flatformer[demo])"
    assert f"FAILED test_in_tests.py::test_importorskip - {failure}" in out, out
    assert "FAILED test_in_tests.py::test_imports_it_as_it_runs - ModuleNotFoundError" in out, out
    for test in ("test_marked", "test_through_a_fixture"):
        assert f"ERROR test_in_tests.py::{test} - Failed: {failure}" in out, out
    assert f"ERROR test_imports_it.py - {failure}" in out, out
    assert "ERROR test_library_imports_it.py" in out, out
    assert "skipped" not in out
    assert result.returncode == 1


def test_an_unknown_switch_value_is_refused(folder):
    result = run_pytest(folder, "yes")
    assert result.returncode != 0
    assert "FLATFORMER_TEST_EXTRAS='yes'" in result.stdout + result.stderr
