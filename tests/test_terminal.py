"""Text from files shown to a terminal escaped: a token holding an escape sequence, a path, a
meta.pkl's characters. Whatever a file holds, no control character reaches the terminal."""

import pickle
import unicodedata

import pytest
from clitools import assert_one_line_error, cli_here
from hypothesis import given, settings
from hypothesis import strategies as st
from test_import_hf import gpt2
from test_import_nanogpt import write_source

from flatformer.commands.terminal import BIDI, shown

TITLE = "\x1b]0;pwned\x07"  # sets the terminal window's title


@pytest.mark.parametrize(
    "text, expected",
    [
        (TITLE, "\\x1b]0;pwned\\x07"),
        ("a\x9bb", "a\\x9bb"),  # C1's CSI
        ("\x7f\x00", "\\x7f\\x00"),
        ("abc\u202edcba", "abc\\u202edcba"),  # right-to-left override
        ("␣ é 中 ⏎", "␣ é 中 ⏎"),
    ],
)
def test_control_characters_are_shown_as_their_escapes(text, expected):
    assert shown(text) == expected


@settings(max_examples=200, deadline=None, database=None)
@given(st.text())
def test_shown_text_holds_no_control_character(text):
    assert all(ch == "\n" or unicodedata.category(ch) != "Cc" for ch in shown(text))
    assert not set(shown(text)) & BIDI


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """An imported GPT-2 whose tokenizer names token 3 with a terminal escape sequence."""
    folder = tmp_path_factory.mktemp("hostile")
    gpt2(folder / "m", True)
    names = [f"t{i}" for i in range(13)]
    names[3] = TITLE
    vocab = {name: i for i, name in enumerate(names)}
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(folder / "m" / "tokenizer.json"))
    made = cli_here("import", folder / "m", "--out", folder / "run")
    assert made.returncode == 0, made.stderr
    return folder / "run"


def test_generate_prints_a_token_holding_an_escape_sequence_escaped(hostile_run):
    result = cli_here("generate", hostile_run, "--prompt", f"t1 {TITLE}", "-n", "4")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b]0;pwned" in result.stdout


def test_an_error_naming_a_token_shows_it_escaped(hostile_run):
    result = cli_here("generate", hostile_run, "--pieces", "--prompt", f"{TITLE}x", "-n", "1")
    assert_one_line_error(result, "\\x1b]0;pwned")
    assert "\x1b" not in result.stderr


def test_an_error_naming_a_path_shows_it_escaped(tmp_path):
    result = cli_here("eval", tmp_path / "run\x1b[2J")
    assert_one_line_error(result, "run\\x1b[2J")
    assert "\x1b" not in result.stderr


def meta(folder, itos):
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"itos": itos}, f)
    return cli_here("import", folder / "ckpt.pt", "--vocab", folder / "meta.pkl",
                    "--out", folder / "run")  # fmt: skip


@pytest.mark.parametrize(
    "itos, words",
    [
        ({**dict(enumerate("abcdefghij")), "10": "k"}, ["itos", "ids 0..V-1"]),
        (dict(enumerate("abcdefghi ␣")), ["visible name"]),
        (dict(enumerate(["ab", *"bcdefghij", "k"])), ["single characters"]),
    ],
    ids=["mixed key types", "space and its visible name", "a token of two characters"],
)
def test_a_meta_pkl_no_run_could_use_is_one_line(tmp_path, itos, words):
    write_source(tmp_path)
    assert_one_line_error(meta(tmp_path, itos), *words)
    assert not (tmp_path / "run").exists()


def test_a_meta_pkl_with_an_escape_character_imports_and_generates_escaped(tmp_path):
    write_source(tmp_path)
    assert meta(tmp_path, dict(enumerate("abcdefghi\x1b\n"))).returncode == 0
    result = cli_here("generate", tmp_path / "run", "--prompt", "a\x1bb", "-n", "3")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "a\\x1bb" in result.stdout


def test_a_path_that_reads_as_rich_markup_is_printed_as_it_is(paper_run, tmp_path):
    folder = tmp_path / "[link=x]y[" / "link][" / "x]"  # ".../[link=x]y[/link][/x]"
    folder.mkdir(parents=True)
    result = cli_here("prompts", paper_run, "--out", folder / "p.jsonl")
    assert result.returncode == 0, result.stderr
    assert str(folder / "p.jsonl") in result.stderr.replace("\n", "")  # wrapped at 80
    assert "\x1b" not in result.stderr + result.stdout


def test_a_progress_message_is_escaped_in_the_live_bars(monkeypatch):
    from flatformer.commands import app

    seen = []
    display = app.ProgressDisplay()
    monkeypatch.setattr(app.Progress, "update", lambda self, task, **kw: seen.append(kw["info"]))
    display("train", 1, 2, f"run {TITLE}")
    display.close()
    assert seen == ["run \\x1b]0;pwned\\x07"]
