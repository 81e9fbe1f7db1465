"""The layering the README describes: the numeric layer and the analyses load no drawing or
terminal package, the main job does not reach into the command layer, flatformer's imports
(function-level ones included) have no cycle, and no module reads another's closures."""

import ast
import subprocess
import sys
from pathlib import Path

import flatformer

PACKAGE = Path(flatformer.__file__).parent


def imported_after(statement: str) -> set[str]:
    """Top-level modules loaded by `statement` in a fresh interpreter."""
    code = (
        f"import sys; {statement}; "
        f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())


def test_numbers_load_no_drawing_or_terminal_package():
    loaded = imported_after(
        "import flatformer.compare, flatformer.analysis, flatformer.readout, "
        "flatformer.analysis.report, flatformer.explorer.export"
    )
    assert "flatformer" in loaded
    assert not loaded & {"matplotlib", "typer", "rich"}


def test_the_issue_statement_holds():
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import flatformer.compare, flatformer.analysis; "
            "import sys; assert 'matplotlib' not in sys.modules",
        ],
        check=True,
    )


def test_no_module_reads_closures():
    sources = [p.read_text() for p in PACKAGE.rglob("*.py")]
    assert not [s for s in sources if "getclosurevars" in s]


def import_graph() -> dict[str, set[str]]:
    """{module: flatformer modules it imports anywhere in its file}."""
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if package else parts)] = (path, package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, package) in mods.items():
        here = name.split(".") if package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    graph[name] |= {full} if full in mods else {target} & set(mods)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names} & set(mods)
    return graph


def reachable(graph, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_imports_have_no_cycle():
    graph = import_graph()
    assert "flatformer.readout.points" in graph["flatformer.readout"]  # relative imports read
    cycles = sorted(m for m in graph if m in reachable(graph, m) and not m.endswith("__main__"))
    assert cycles == []


def test_the_main_job_and_the_commands_never_import_the_cli():
    graph = import_graph()
    assert not {
        m
        for m in reachable(graph, "flatformer.publish.reproduce")
        if m == "flatformer.commands.cli" or m.startswith("flatformer.commands")
    }
    assert not [
        m
        for m in graph
        if m.startswith("flatformer.commands") and "flatformer.commands.cli" in graph[m]
    ]
