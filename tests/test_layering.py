"""The layering the README describes: the numeric layer and the analyses load no drawing or
terminal package, and no module reads another's closures."""

import subprocess
import sys
from pathlib import Path

import flatformer

PACKAGE = Path(flatformer.__file__).parent


def imported_after(statement: str) -> set[str]:
    """Top-level modules loaded by `statement` in a fresh interpreter."""
    code = (f"import sys; {statement}; "
            f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    return set(result.stdout.split())


def test_numbers_load_no_drawing_or_terminal_package():
    loaded = imported_after("import flatformer.compare, flatformer.analysis, flatformer.readout, "
                            "flatformer.analysis.report, flatformer.explorer.export")
    assert "flatformer" in loaded
    assert not loaded & {"matplotlib", "typer", "rich"}


def test_the_issue_statement_holds():
    subprocess.run([sys.executable, "-c", "import flatformer.compare, flatformer.analysis; "
                    "import sys; assert 'matplotlib' not in sys.modules"], check=True)


def test_no_module_reads_closures():
    sources = [p.read_text() for p in PACKAGE.rglob("*.py")]
    assert not [s for s in sources if "getclosurevars" in s]
