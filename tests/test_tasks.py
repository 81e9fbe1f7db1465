"""Tasks: rules against hand-worked examples and their generators, the grammar, and data.py's
allowed-token rule error against a direct count."""

import re

import numpy as np
import pytest

from flatformer.analysis.report import default_prompts
from flatformer.config import ModelConfig, preset
from flatformer.tasks.windows import TaskData, evenly_spaced
from flatformer.training.evaluate import evaluate, logits_at
from flatformer.engine.model import Params, init_params
from flatformer.tasks import TASKS, get_task
from flatformer.tasks.tiny_grammar import CORPUS, WORDS, TinyGrammar
from flatformer.training.trainer import get_recipe

NAMES = sorted(TASKS)


def example(task) -> str:
    return re.search(r"Example: `([^`]*)`", task.__doc__).group(1)


@pytest.mark.parametrize("name", NAMES)
def test_task_is_described_and_its_example_obeys_its_rule(name):
    task = get_task(name)
    assert len(set(task.vocab)) == len(task.vocab)
    assert all(w and not any(c.isspace() for c in w) for w in task.vocab)
    assert task.focus in task.vocab
    assert task.measured
    # Its defaults are real model or recipe settings, and the default model builds with them.
    model = {k: v for k, v in task.defaults.items() if k in ModelConfig.__dataclass_fields__}
    get_recipe(task.default_recipe, **{k: v for k, v in task.defaults.items() if k not in model})
    cfg = preset(task.default_preset, len(task.vocab), **model)
    assert len(task.encode(task.demo)) == cfg.n_ctx  # the demo fills the context
    assert task.model_label().startswith(task.default_preset)
    # The docstring states the measured number the class attribute holds (modular-addition's
    # is measured by bench/grokking.py, minutes per seed).
    assert task.measured_error is not None or task.name == "modular-addition"
    if task.measured_error is not None:
        assert f"{task.measured_error:.1%}" in task.__doc__
    seq = np.array(task.encode(example(task)))
    target, source = task.rule(seq)
    forced = np.flatnonzero(target >= 0)
    assert len(forced) >= 1
    assert np.array_equal(target[forced], seq[forced])
    assert np.all((source[forced] >= 0) & (source[forced] < forced))


@pytest.mark.parametrize("name", NAMES)
def test_generated_sequences_obey_the_rule_and_the_allowed_sets(name):
    task = get_task(name)
    rng = np.random.default_rng(1)
    for _ in range(40):
        seq = np.array(task.sample(rng))
        target, source = task.rule(seq)
        assert np.array_equal(seq[target >= 0], target[target >= 0])
        mask, allowed_source = task.allowed(seq)
        counted = allowed_source >= 0
        assert mask[np.arange(len(seq)), seq][counted].all()
        # A forced target is counted where it is decided, and is then the only allowed token.
        assert np.array_equal(allowed_source[target >= 0], source[target >= 0])
        assert (mask[target >= 0].sum(1) == 1).all()


# Hand-worked prefixes (ending in the marker) and the token the rule forces next, per task.
CASES = {
    "last-odd": [("2 4 *", None), ("3 6 8 *", "3"), ("1 * 1 5 6 *", "5")],
    "first-even": [("4 > 1 =", None), ("4 > 1 6 2 =", "6"), ("> 8 > 3 2 =", "2"), ("2 4 =", None)],
    "successor": [("9 +", "0"), ("+ +", None), ("4 + 5 +", "6")],
    "add-mod-5": [("4 4 =", "3"), ("2 =", None), ("= 1 =", None), ("0 3 =", "3")],
    "max-so-far": [("M", None), ("3 9 1 M", "9"), ("0 M", "0")],
    "copy-3-back": [("1 2 =", None), ("7 1 2 =", "7"), ("= 1 2 =", None)],
    "after-last-even": [("3 5 +", None), ("2 9 1 +", "9"), ("2 9 4 +", None), ("2 + 1 +", None)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_on_hand_worked_prefixes(name):
    task = get_task(name)
    for prefix, want in CASES[name]:
        seq = np.array(task.encode(prefix + " 0"))
        got = task.rule(seq)[0][-1]
        assert (task.vocab[got] if got >= 0 else None) == want, prefix


# ------------------------------------------------------------------------------- tiny-grammar


def test_shipped_corpus_is_grammatical_and_uses_all_28_words():
    task = TinyGrammar()
    tokens = task.corpus()
    assert len(task.vocab) == 28 == sum(len(w) for w in WORDS.values())
    assert 200 <= len(tokens) <= 400
    assert set(tokens.tolist()) == set(range(28))
    assert task.grammatical(tokens) and task.vocab[tokens[-1]] == "."
    for line in CORPUS.read_text().splitlines():  # one complete sentence per line
        words = task.encode(line)
        assert task.grammatical(words) and words.count(27) == 1 and words[-1] == 27


def test_grammar_allowed_sets_are_the_words_that_keep_the_text_grammatical():
    task = TinyGrammar()
    seq = np.array(task.sample(np.random.default_rng(3)))
    mask, source = task.allowed(seq)
    for j in np.flatnonzero(source >= 0):
        ok = [w for w in range(28) if task.grammatical(list(seq[:j]) + [w])]
        assert np.flatnonzero(mask[j]).tolist() == ok


def test_grammar_sources_on_the_docstring_example():
    task = TinyGrammar()
    seq = np.array(task.encode("the lazy cat sat on the mat . a dog saw the bird ."))
    mask, source = task.allowed(seq)
    words = task.vocab
    # after `the` (following `on`): only places, decided by `on`
    assert source[6] == 4 and [words[i] for i in np.flatnonzero(mask[6])] == WORDS["place"]
    # after `bird`, an object: only `.`, decided by the verb `saw` three words back
    assert source[13] == 10 and np.flatnonzero(mask[13]).tolist() == [27]
    # after the opening `the lazy cat`: subject or object? The sequence start does not say.
    assert source[3] == -1
    target, _ = task.rule(seq)
    assert [words[t] for t in target if t >= 0] == [".", "."]


def test_rule_error_counts_top_predictions_outside_the_allowed_set():
    """evaluate's rule error against a direct loop over held-out positions and allowed sets."""
    task = TinyGrammar()
    cfg = preset("simulator-16d", 28)
    data = TaskData.build(task, cfg.n_ctx)
    params = init_params(cfg, [np.random.default_rng(s) for s in (0, 1)])
    _, rule_error = evaluate(params, data, with_loss=False)
    held = data.held_out
    for s in range(2):
        model = Params.stack(cfg, [params.seed(s)])
        wrong = total = 0
        for pos in np.flatnonzero(held.allowed_source >= 0):
            seq = np.searchsorted(held.starts, pos, side="right") - 1
            start = max(held.starts[seq], pos - cfg.n_ctx)
            if held.allowed_source[pos] < start:
                continue
            window = held.tokens[start : start + cfg.n_ctx]
            top = logits_at(model, window[None], np.array([pos - 1 - start]))[0, 0].argmax()
            wrong += not held.allowed[pos, top]
            total += 1
        assert total == len(data.rule_targets) > 500
        assert rule_error[s] == pytest.approx(wrong / total, abs=1e-12)


def test_forced_targets_give_the_same_rule_error_as_before():
    """For a forced-target task the allowed set is the target alone: the old count."""
    task = get_task("plus-last-even")
    cfg = preset("paper-2d", 12)
    data = TaskData.build(task, cfg.n_ctx)
    assert (data.rule_allowed.sum(1) == 1).all()
    assert np.array_equal(data.rule_allowed.argmax(1), data.rule_targets)
    params = init_params(cfg, [np.random.default_rng(s) for s in range(3)])
    picked = logits_at(params, data.rule_inputs, data.rule_index)
    old = (picked.argmax(-1) != data.rule_targets).mean(1)
    assert np.array_equal(evaluate(params, data, with_loss=False)[1], old)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_corruption_changes_what_the_rule_forces(name):
    """Every task but the grammar declares a corruption: each corrupt window's rule target is the
    one returned, and differs from the clean target; recall tasks change exactly the recalled
    token, to another wanted one."""
    task = get_task(name)
    # modular-addition reads exactly `a b =`: a longer context holds no held-out window
    data = TaskData.build(task, 3 if name == "modular-addition" else 8)
    keep = data.rule_targets >= 0
    inputs, index, target = data.rule_inputs[keep], data.rule_index[keep], data.rule_targets[keep]
    made = task.corrupt(inputs, index, np.random.default_rng(0))
    if name == "tiny-grammar":
        assert made is None  # only `.` is ever forced
        return
    corrupt, new = made
    assert corrupt.shape == inputs.shape and (new != target).all()
    assert all(task.forced_after(w[: i + 1])[0] == t for w, i, t in zip(corrupt, index, new))
    if task.recall is not None:
        assert ((corrupt != inputs).sum(1) == 1).all()
        assert task.recall.mask(task.vocab)[new].all()


def test_capped_sets_are_evenly_spaced_from_first_to_last():
    assert evenly_spaced(10, 4).tolist() == [0, 3, 6, 9]
    assert evenly_spaced(3, 5).tolist() == [0, 1, 2]
    for n in range(1, 40):
        for k in range(1, n + 1):
            index = evenly_spaced(n, k)
            assert len(set(index.tolist())) == k and index[0] == 0
            assert (np.diff(index) > 0).all() and (k == 1 or index[-1] == n - 1)


def test_analyze_default_prompts_cover_an_ordered_held_out_set():
    # modular-addition's held-out pairs are ordered by their first number a: the first 200
    # windows would all have a small a.
    task = get_task("modular-addition")
    data = TaskData.build(task, 3)
    prompts = default_prompts(task, data, 200)
    first = np.array([int(p[0]) for p in prompts])
    assert len(prompts) == 200 and first.max() - first.min() >= task.p - 3
