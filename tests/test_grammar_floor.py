"""tiny-grammar's train_text=grammar setting and the loss floor it is measured against."""

import json

import numpy as np
import pytest

from flatformer.tasks.windows import TaskData
from flatformer.errors import FlatformerError
from flatformer.training.evaluate import evaluate_run
from flatformer.training.jobs import build_job
from flatformer.store.runs import load_run
from flatformer.tasks import get_task
from flatformer.tasks.tiny_grammar import GRAMMAR, WORDS
from flatformer.training.trainer import train


@pytest.fixture(scope="module")
def grammar():
    return get_task("tiny-grammar", {"train_text": "grammar"})


def test_the_chain_matches_the_grammar_by_hand(grammar):
    P, N, pi = grammar.chain()
    assert np.allclose(P.sum(1), 1) and np.all(pi > 0) and pi.sum() == pytest.approx(1)
    H = -(P * np.log(np.where(P > 0, P, 1))).sum(1)
    states = list(GRAMMAR)
    n = {cls: len(words) for cls, words in WORDS.items()}
    # start: the or a. subject det: an adjective (1 of 5) or an animal (1 of 4), half and half.
    assert H[states.index("start")] == pytest.approx(np.log(n["det"]))
    assert H[states.index("subject det")] == pytest.approx(
        np.log(2) + 0.5 * np.log(n["adj"]) + 0.5 * np.log(n["animal"])
    )
    assert H[states.index("end")] == pytest.approx(0.0)  # only the full stop
    # pi is stationary: one step of the chain leaves it as it is.
    moved = np.zeros_like(pi)
    np.add.at(moved, N.ravel(), (pi[:, None] * P).ravel())
    assert np.allclose(moved, pi)


def test_the_entropy_rate_is_the_long_run_surprise_of_sampled_text(grammar):
    """Shannon-McMillan-Breiman: -log p(text) / length of a long sample tends to the rate."""
    P, N, _ = grammar.chain()
    rng = np.random.default_rng(0)
    state, total, count = list(GRAMMAR).index("start"), 0.0, 0
    while count < 50_000:
        for token in grammar.sentence(rng):
            total -= np.log(P[state, token])
            state, count = N[state, token], count + 1
    assert total / count == pytest.approx(grammar.entropy_rate(), abs=0.02)


def test_the_window_floor_lies_above_the_rate_and_below_uniform(grammar):
    data = TaskData.build(grammar, 8, 0)
    floor = grammar.loss_floor(data)
    assert floor["entropy_rate"] < floor["floor"] < np.log(len(grammar.vocab))
    longer = grammar.loss_floor(TaskData.build(grammar, 16, 0))
    assert longer["floor"] < floor["floor"]  # more context, closer to the rate


def test_a_short_grammar_run_records_its_setting_and_reports_the_floor(tmp_path):
    job, folder = build_job(
        "tiny-grammar",
        None,
        "default",
        0,
        None,
        tmp_path / "run",
        ["train_text=grammar", "steps=200"],
    )
    assert len(job.task.split(0)[0]) == job.task.n_sequences  # sentences, not the corpus
    train(job)
    config = json.loads((folder / "config.json").read_text())
    assert config["task_settings"] == {"train_text": "grammar"}
    assert load_run(folder).task.train_text == "grammar"
    result = evaluate_run(folder)
    assert result["loss_floor"]["entropy_rate"] == pytest.approx(job.task.entropy_rate())
    assert result["loss"] > result["loss_floor"]["floor"]


def test_the_setting_is_checked(tmp_path):
    with pytest.raises(FlatformerError, match="corpus or grammar"):
        build_job("tiny-grammar", None, "default", 0, None, tmp_path, ["train_text=poems"])
    with pytest.raises(FlatformerError, match="unknown key"):
        build_job("plus-last-even", None, "default", 0, None, tmp_path, ["train_text=grammar"])
    default, _ = build_job("tiny-grammar", None, "default", 0, None, tmp_path, [])
    assert "task_settings" not in default.run_config(0)
