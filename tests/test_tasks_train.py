"""Every registered task, trained with its defaults (seeds 0-3 batched), reaches the rule error
its docstring claims; tiny-grammar memorises its corpus and its greedy text parses."""

import json

import numpy as np
import pytest

from flatformer.readout.sampling import generate
from flatformer.training.jobs import build_job
from flatformer.engine.model import Params, cross_entropy, forward
from flatformer.store.runs import load_run
from flatformer.tasks import TASKS, get_task
from flatformer.training.trainer import train

TRAINED = {}


def trained(name, tmp_path_factory):
    """Seeds 0-3 of a task trained as `flatformer train TASK --seeds 0-3` does, once a session."""
    if name not in TRAINED:
        task = get_task(name)
        # the task's defaults, as build_job applies them under the user's --set
        defaults = [f"{k}={json.dumps(v)}" for k, v in task.defaults.items()]
        job, folder = build_job(
            name, None, "default", 0, "0-3", tmp_path_factory.mktemp(name) / "runs", defaults
        )
        TRAINED[name] = (train(job), folder)
    return TRAINED[name]


# modular-addition reaches its number only after grokking, minutes of full-batch training per
# seed: bench/grokking.py measures it, and tests/test_grokking.py tests its data path. induction
# trains 48-token windows for 3,000 steps (over a minute for four seeds, more than this suite's
# budget): bench/induction.py measures its claim, tests/test_analysis_induction.py its parts.
@pytest.mark.parametrize("name", sorted(set(TASKS) - {"modular-addition", "induction"}))
def test_default_training_reaches_the_claimed_rule_error(name, tmp_path_factory):
    trainer, _ = trained(name, tmp_path_factory)
    errors = [m[-1]["rule_error"] for m in trainer.metrics]
    assert abs(np.median(errors) - get_task(name).measured_error) <= 0.01, errors


def test_tiny_grammar_memorises_its_corpus_and_greedy_text_is_grammatical(tmp_path_factory):
    _, folder = trained("tiny-grammar", tmp_path_factory)
    run = load_run(folder / "seed_0")
    task = run.task
    # The loss over the whole corpus, every training window, from the final weights.
    corpus = task.corpus()
    T = run.cfg.n_ctx
    idx = np.arange(len(corpus) - T)[:, None] + np.arange(T + 1)
    params = Params.stack(run.cfg, [run.weights()])
    logits, _ = forward(params, corpus[idx[:, :-1]][None])
    loss = cross_entropy(logits, corpus[idx[:, 1:]][None], np.ones((1, *idx[:, 1:].shape)))[0]
    first = run.metrics[0]["val_loss"]
    assert abs(first - np.log(28)) < 0.2 and loss[0] <= 0.5
    prompt = task.encode("the big")
    steps = generate(run.model(), prompt, 30, greedy=True)
    text = prompt + [s.token for s in steps]
    assert task.grammatical(text), task.decode(text)
    assert task.decode(text).count(" . ") >= 2  # whole sentences, not a stall
