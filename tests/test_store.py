"""The store owns the run folder: no module outside flatformer/store makes or parses a checkpoint
or seed-folder name, writes config.json, or opens, creates, replaces or removes a file itself
(each exception below says why); the layout's names round-trip; the JSON reader never raises
anything but FlatformerError and never recurses past its depth limit."""

import ast
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flatformer
from flatformer.errors import FlatformerError
from flatformer.store import layout
from flatformer.store.read import json_depth, parse_json

PACKAGE = Path(flatformer.__file__).parent
STORE = "flatformer/store/"

# A string that starts a run folder's file name or pattern (seed_S, step_XXXXXX, their globs
# and regular expressions) or names the run's own files.
NAME = re.compile(r"^\^?(seed_|step_)|^(config\.json|metrics\.jsonl|done\.json)$|\.safetensors$")
NAMES_ALLOWED = {
    # Hugging Face's and TransformerLens's own files, read from a source, not a run folder.
    ("flatformer/importers/hf_gpt2.py", "config.json"): "a Hugging Face folder's config",
    ("flatformer/importers/hf_gpt2.py", "model.safetensors"): "a Hugging Face folder's weights",
    ("flatformer/importers/run.py", "config.json"): "detects a Hugging Face folder",
    ("flatformer/importers/run.py", ".safetensors"): "detects a TransformerLens state dict",
    ("flatformer/importers/tlens.py", ".safetensors"): "a TransformerLens state dict's suffix",
    ("flatformer/dictionary/saelens.py", "sae_weights.safetensors"): "SAELens's own file name",
}

# Calls that open, read or write a file by its name, or create, replace or remove one.
RAW = {
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "mkdir", "makedirs",
    "replace", "rename", "unlink", "remove", "rmtree", "touch", "symlink_to",
    "load", "loadtxt", "fromfile", "loadmat", "load_file", "get_reader", "savez", "savemat",
    "savefig", "save",
}  # fmt: skip
RAW_ALLOWED = {
    ("flatformer/explorer/page.py", "read_text"): "the page's own template, in the package",
    ("flatformer/explorer/playground_page.py", "read_text"): "the playground's template, ditto",
    ("flatformer/publish/report.py", "read_text"): "the report's style sheets, in the package",
    ("flatformer/tasks/tiny_grammar.py", "read_text"): "the grammar's corpus, in the package",
    ("flatformer/movies/encode.py", "open"): (
        "a movie's parts, created under its own names inside the movie folder the store "
        "claimed (pipeline.write_movies) and read back to be joined"
    ),
    ("flatformer/movies/encode.py", "replace"): "the joined movie, renamed over its own name",
    ("flatformer/movies/encode.py", "unlink"): "the parts it wrote, once joined",
    ("flatformer/movies/render.py", "unlink"): "the parts of a render that failed",
    (
        "flatformer/publish/report.py",
        "get_reader",
    ): "a movie `animate` just wrote in its claimed folder",
    (
        "flatformer/publish/reproduce.py",
        "rmtree",
    ): "--force: its own run folder, links refused first",
    ("flatformer/publish/reproduce.py", "unlink"): "--force: its own analysis.json and report.html",
    ("flatformer/commands/geometry.py", "save"): "rsatoolbox's HDF5 into store.write.atomic_path",
}
# Methods that share a name with a file call but take no file: str.replace, list.remove, ...
NOT_FILES = {"replace", "remove", "load"}
# First arguments that are bytes or text already read by the store, or memory to write it from.
IN_MEMORY = {"buffer", "io.BytesIO", "read.text_stream"}
FILE_MODULES = {"os", "shutil", "np", "numpy", "json", "pickle", "torch", "imageio", "Path"}


def sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if not rel.startswith(STORE):
            yield rel, ast.parse(path.read_text())


def docstrings(tree) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def raw_call(call: ast.Call) -> str | None:
    """The file operation `call` is, when it is one."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id if f.id in {"open", "loadmat", "load_file"} else None
    if not isinstance(f, ast.Attribute) or f.attr not in RAW:
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if f.attr in NOT_FILES and owner not in FILE_MODULES:
        return None  # a string's replace, a list's remove, a pickler's load
    if call.args:
        first = call.args[0]
        if ast.unparse(first.func if isinstance(first, ast.Call) else first) in IN_MEMORY:
            return None
    if f.attr in {"read_text", "read_bytes"} and len(call.args) >= 2:
        return None  # the store's reader (path, what, limit), not pathlib's
    return f.attr


def test_no_module_outside_the_store_makes_or_parses_a_run_folder_name():
    found = []
    for rel, tree in sources():
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in skip or not NAME.search(node.value):
                    continue
                if not any(rel == where and name in node.value for where, name in NAMES_ALLOWED):
                    found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert found == []


def test_no_module_outside_the_store_opens_or_writes_a_file_itself():
    found = []
    for rel, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (op := raw_call(node)):
                if (rel, op) not in RAW_ALLOWED:
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert found == []


def test_every_exception_is_still_needed():
    used = set()
    for rel, tree in sources():
        used |= {(rel, op) for node in ast.walk(tree) if isinstance(node, ast.Call)
                 if (op := raw_call(node))}  # fmt: skip
    assert set(RAW_ALLOWED) - used == set()


def test_config_json_has_one_writer():
    writers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args:
                target = ast.unparse(node.args[0])
                if "CONFIG" in target or "config.json" in target:
                    if ast.unparse(node.func).split(".")[-1] in {"atomic_write", "write_file"}:
                        writers.append(rel)
    assert writers == ["flatformer/store/run.py"]
    callers = [rel for rel, tree in sources() if "write_config" in ast.unparse(tree)]
    assert callers == ["flatformer/importers/run.py"]  # train calls store.run.start_run


def test_every_command_is_a_module_the_checks_above_read():
    from flatformer.commands.app import app
    from flatformer.commands.cli import load_commands

    load_commands()
    commands = [*app.registered_commands, *(c for g in app.registered_groups
                                            for c in g.typer_instance.registered_commands)]  # fmt: skip
    modules = {c.callback.__module__ for c in commands}
    checked = {rel.removesuffix(".py").replace("/", ".") for rel, _ in sources()}
    assert len(modules) >= 12 and modules <= checked


@pytest.mark.parametrize("step", [0, 7, 20_000, 999_999, 1_000_000, 12_345_678])
def test_a_checkpoint_name_round_trips(step):
    assert layout.step_of(layout.checkpoint_name(step)) == step


@pytest.mark.parametrize(
    "name",
    ["step_٣٣٣٣٣٣.safetensors", "step_0000001.safetensors", "step_000001.safetensors\n",
     "step_00001.safetensors", "step_000001.safetensors.tmp", "step_-00001.safetensors"],
)  # fmt: skip
def test_names_that_are_not_a_checkpoints_are_not_read_as_one(name):
    assert layout.step_of(name) is None


def test_seed_folders_are_ordered_by_seed_and_only_ours(tmp_path):
    for name in ("seed_10", "seed_2", "seed_0", "seed_02", "seed_x", "seed_٣", "notes"):
        (tmp_path / name).mkdir()
    assert [p.name for p in layout.seed_folders(tmp_path)] == ["seed_0", "seed_2", "seed_10"]


def nested(depth: int, escaped_quote: bool) -> str:
    prefix = '["\\"", ' if escaped_quote else ""
    return prefix + "[" * depth + "]" * depth + ("]" if escaped_quote else "")


@pytest.mark.parametrize("escaped_quote", [False, True])
def test_deep_nesting_is_refused_before_parsing(escaped_quote):
    text = nested(100_000, escaped_quote)
    assert json_depth(text) == 100_000 + escaped_quote
    with pytest.raises(FlatformerError, match="nested more than"):
        parse_json(text, "x")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=20,
)


def depth(value) -> int:
    if isinstance(value, (list, dict)):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max(map(depth, items), default=0)
    return 0


@settings(max_examples=150, deadline=None)
@given(JSON)
def test_json_depth_is_the_values_nesting(value):
    text = json.dumps(value)
    assert json_depth(text) == depth(value)
    assert parse_json(text, "x") == value


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='[]{}",:\\ 0aeN\n', max_size=200) | st.text(max_size=60))
def test_the_json_reader_gives_a_value_or_one_line(text):
    try:
        parse_json(text, "x")
    except FlatformerError as exc:
        assert "\n" not in str(exc)
