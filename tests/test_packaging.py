"""What a user meets before any command runs: a light `import flatformer`, `--version`, and a
package that carries its data files (CI builds the wheel and runs `reproduce` from it)."""

import subprocess
import sys
from pathlib import Path

from clitools import cli

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import flatformer

ROOT = Path(__file__).resolve().parent.parent


def test_import_flatformer_loads_neither_torch_nor_matplotlib():
    code = (
        "import sys, flatformer; heavy = [m for m in ('torch', 'matplotlib', 'rich', "
        "'typer') if m in sys.modules]; print(heavy)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_version():
    result = cli("--version")
    assert result.returncode == 0 and result.stdout == f"flatformer {flatformer.__version__}\n"


def test_the_package_data_covers_every_data_file():
    """Every non-Python file inside the package matches a package-data pattern, so the wheel
    carries it (the explorer's scripts and styles, the tiny-grammar corpus)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["flatformer"]
    package = ROOT / "flatformer"
    # __pycache__ holds numba's compiled-kernel cache (kernels.*.nbi/.nbc), never package data.
    files = [
        p
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert any(p.suffix == ".js" for p in files)
    for path in files:
        relative = path.relative_to(package)
        assert any(
            relative.match(pattern) or Path("x", relative).match(pattern) for pattern in patterns
        ), f"{relative} is not package data"
