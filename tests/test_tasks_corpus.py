"""The user's own corpus: one-line refusals, HTML words, runs that rebuild their task."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from flatformer.readout.sampling import generate
from flatformer.config import preset
from flatformer.errors import FlatformerError
from flatformer.training.evaluate import evaluate_run
from flatformer.store.runs import load_run
from flatformer.tasks import get_task, task_for_run
from flatformer.tasks.corpus import CorpusTask
from flatformer.training.trainer import Job, get_recipe, train

HTML = (
    "<b>the</b> cat &amp; <script>alert('x')</script> dog sat . <i>a</i> \"bird\" sang . "
    "the <img src=x onerror=alert(1)> ran . "
)


def train_corpus(task, folder, preset_name="paper-2d", steps=300):
    """A short run of a corpus task, configured the way the command line's build_job does."""
    cfg = preset(preset_name, len(task.vocab))
    task.check_config(cfg)
    job = Job(
        task,
        cfg,
        get_recipe("default", steps=steps, candidates=1),
        [0],
        [folder],
        0,
        {"preset": preset_name, "recipe_name": "default", **task.config_extra()},
    )
    return train(job)


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "flatformer", *map(str, args)], capture_output=True, text=True
    )


def test_a_1mb_random_binary_file_is_refused_with_one_line(tmp_path):
    path = tmp_path / "random.bin"
    path.write_bytes(np.random.default_rng(0).bytes(1_000_000))
    with pytest.raises(FlatformerError, match="looks binary"):
        CorpusTask.from_file(path, "char")
    result = cli("corpus", path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("flatformer: error: ")
    assert "binary" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "content, tokenizer, message",
    [
        (b"", "word", "is empty"),
        (b" \n\t \n", "char", "is empty"),
        ("caf\u00e9 ".encode("latin-1") * 50, "word", "not UTF-8"),
        (b"plain text \x07 with a bell " * 20, "word", "control character U\\+0007"),
        (b"too short", "word", "needs at least 120"),
        (b"aaaa" * 100, "char", "only one distinct"),
        (b"fine text " * 100, "bpe", "unknown tokenizer"),
    ],
)
def test_unusable_files_are_refused(tmp_path, content, tokenizer, message):
    path = tmp_path / "corpus.txt"
    path.write_bytes(content)
    with pytest.raises(FlatformerError, match=message) as err:
        CorpusTask.from_file(path, tokenizer)
    assert "\n" not in str(err.value)


def test_a_vocabulary_too_large_for_the_preset_is_refused(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text(" ".join(f"w{i}" for i in range(600)))
    task = CorpusTask.from_file(path, "word")
    task.check_config(preset("simulator-16d", 600, d_model=32))  # 32 x 32 = 1,024 fit
    for name, limit in (("paper-2d", 64), ("simulator-16d", 512)):
        with pytest.raises(FlatformerError, match=f"takes at most {limit}.*--tokenizer char"):
            task.check_config(preset(name, 600))
    assert len(CorpusTask.from_file(path, "char").vocab) == 12  # w, 0-9 and the space


def test_html_corpus_trains_and_every_reader_rebuilds_its_task(tmp_path):
    path = tmp_path / "page.txt"
    path.write_text(HTML * 12)
    task = CorpusTask.from_file(path, "word")
    assert "<script>alert('x')</script>" in task.vocab and "<img" in task.vocab
    train_corpus(task, tmp_path / "run", "simulator-16d", steps=400)
    moved = tmp_path / "elsewhere"
    shutil.move(tmp_path / "run", moved)  # the config carries the text: no path to break
    path.unlink()
    run = load_run(moved)
    assert run.config["task"] == "corpus" and run.config["corpus"]["text"] == HTML * 12
    rebuilt = run.task
    assert rebuilt.vocab == task.vocab == run.vocab
    assert np.array_equal(rebuilt.tokens, task.tokens)
    result = evaluate_run(moved)
    assert np.isfinite(result["loss"]) and 0 <= result["rule_error"] <= 1
    steps = generate(run.model(), rebuilt.encode("<b>the</b> cat"), 5, greedy=True)
    assert len(rebuilt.decode([s.token for s in steps]).split()) == 5
    from flatformer.explorer import render_html

    page = render_html(moved)  # the words travel as JSON inside a script: no raw tag survives
    assert "<script>alert(" not in page and "<img" not in page and "<b>the" not in page


def test_char_corpus_names_whitespace_and_round_trips(tmp_path):
    text = "the cat sat.\nthe dog\tran away. " * 8
    path = tmp_path / "c.txt"
    path.write_text(text)
    task = CorpusTask.from_file(path, "char")
    assert {"␣", "⏎", "⇥"} <= set(task.vocab)
    assert all(w.strip() for w in task.vocab)
    assert task.decode(task.encode(text)) == text
    assert task.encode("a␣d") == task.encode("a d")
    assert len(task.encode(task.demo)) == 8
    train_corpus(task, tmp_path / "run", steps=200)
    assert task_for_run(load_run(tmp_path / "run").config).decode(task.tokens[:20]) == text[:20]


def test_a_corpus_rule_counts_word_pairs_the_training_text_never_has():
    task = CorpusTask("a b c a b d . " * 30, "word")
    a, b, c, d = (task.vocab.index(w) for w in "abcd")
    mask, source = task.allowed(np.array([a, b, c]))
    assert source.tolist() == [-1, 0, 1]
    assert np.flatnonzero(mask[2]).tolist() == sorted([c, d])  # after b: c or d, nothing else


def test_the_corpus_task_is_named_but_not_registered(tmp_path):
    with pytest.raises(FlatformerError, match="--corpus FILE"):
        get_task("corpus")
    config = {
        "task": "corpus",
        "vocab": ["x", "y"],
        "corpus": {"file": "f", "tokenizer": "word", "text": "a b c . " * 40},
    }
    with pytest.raises(FlatformerError, match="does not match"):
        task_for_run(config)
    with pytest.raises(FlatformerError, match="holds no corpus text"):
        task_for_run({"task": "corpus", "vocab": ["x"]})
    json.dumps(CorpusTask("a b c . " * 40, "word").config_extra())  # plain JSON


def test_train_refuses_a_binary_corpus_in_one_line(tmp_path):
    path = tmp_path / "random.bin"
    path.write_bytes(np.random.default_rng(0).bytes(1_000_000))
    result = cli("train", "--corpus", path, "--out", tmp_path / "run")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "binary" in result.stderr
