"""Compiled RASP programs: each reference program's model equals the interpreter on every
input up to a small max_len; bad programs are refused in one line."""

import numpy as np
import pytest

from flatformer import rasp
from flatformer.config import ModelConfig
from flatformer.errors import FlatformerError
from flatformer.rasp import library as lib
from flatformer.rasp.compile import compile_rasp_to_model
from flatformer.rasp.validate import validate
from flatformer.model.transformer import Transformer

DIGITS, LETTERS, PARENS = [1, 2, 3], ["a", "b", "c"], ["(", ")"]

# (name, program, vocabulary, max_len): every input up to max_len is checked
REFERENCE = [
    ("length", lib.make_length(), DIGITS, 4),
    ("reverse", lib.make_reverse(rasp.tokens), DIGITS, 4),
    ("hist", lib.make_hist(), DIGITS, 4),
    ("sort_unique", lib.make_sort_unique(rasp.tokens, rasp.tokens), DIGITS, 4),
    ("sort", lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=4, min_key=1), DIGITS, 4),
    ("sort_freq", lib.make_sort_freq(4), DIGITS, 4),
    ("frac_prevs", lib.make_frac_prevs(rasp.tokens == "x"), ["x", "y"], 5),
    ("pair_balance", lib.make_pair_balance(rasp.tokens, "(", ")"), PARENS, 5),
    ("shuffle_dyck", lib.make_shuffle_dyck(["()"]), PARENS, 5),
    ("shuffle_dyck2", lib.make_shuffle_dyck2(), ["(", ")", "{", "}"], 4),
    ("detect_pattern", lib.detect_pattern(rasp.tokens, "abc"), LETTERS, 4),
    ("count_less_freq", lib.make_count_less_freq(2), LETTERS, 4),
    ("count", lib.make_count(rasp.tokens, "a"), LETTERS, 4),
]


@pytest.mark.parametrize("name, program, vocab, max_len", REFERENCE, ids=[c[0] for c in REFERENCE])
def test_reference_program_model_equals_interpreter_on_every_input(name, program, vocab, max_len):
    for exact_limit in (0, 20_000):  # value sets inferred, then observed
        compiled = compile_rasp_to_model(program, vocab, max_len, exact_limit=exact_limit)
        assert compiled.exact_values == bool(exact_limit)
        result = validate(program, compiled)
        assert result.ok, f"{'observed' if exact_limit else 'inferred'}: {result.summary()}"
    assert result.exhaustive and result.checked == sum(
        len(vocab) ** n for n in range(1, max_len + 1)
    )
    assert result.ok, result.summary()
    cfg = compiled.cfg
    assert cfg.normalization == "none" and cfg.act_fn == "relu" and not cfg.qkv_bias
    assert cfg.n_ctx == max_len + 1 and compiled.token_names[: len(vocab) + 1] == ["BOS"] + [
        str(v) for v in vocab
    ]


def run(compiled, xs):
    logits = Transformer(compiled.cfg, compiled.tensors)(compiled.encode(xs))[0]
    return [compiled.classes[c] for c in logits[1:].argmax(-1)]


def test_none_default_compiles_to_none_where_tracr_gave_a_value():
    # tracr's issue 25: this program gives [2, 3, None, None]; tracr's model said [2, 3, 0, 1]
    shift = rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q + 2)
    program = rasp.Aggregate(shift, rasp.tokens)
    compiled = compile_rasp_to_model(program, [0, 1, 2, 3], 4)
    assert rasp.evaluate(program, [0, 1, 2, 3]) == [2, 3, None, None]
    assert run(compiled, [0, 1, 2, 3]) == [2, 3, None, None]
    assert "None" in compiled.class_names and "aggregate:None" in " ".join(compiled.residual)
    assert validate(program, compiled).ok


def test_a_categorical_mean_is_a_mismatch_with_its_cause():
    """Value sets inferred, the compiler cannot see it; validation names it."""
    upto = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    program = rasp.Aggregate(upto, rasp.tokens)  # categorical, yet averages two positions
    result = validate(program, compile_rasp_to_model(program, [1, 2], 3, exact_limit=0))
    assert not result.ok and result.checked == 14
    assert "selects 2 keys of different values" in result.cause
    assert result.mismatches[0]["input"] == [1, 2]


def test_causal_exactly_when_every_select_looks_back():
    looks_back = compile_rasp_to_model(lib.make_frac_prevs(rasp.tokens == 1), [1, 2], 3)
    assert looks_back.cfg.causal
    assert not compile_rasp_to_model(lib.make_length(), [1, 2], 3).cfg.causal
    forced = compile_rasp_to_model(lib.make_length(), [1, 2], 3, causal=True)
    assert forced.cfg.causal and not validate(lib.make_length(), forced).ok


def test_ground_truth_names_directions_heads_and_mlps():
    compiled = compile_rasp_to_model(lib.make_hist(), DIGITS, 3)
    truth = compiled.ground_truth()
    assert truth["residual"][:2] == ["one", "bos"] and "tokens:2" in truth["residual"]
    assert "hist:3" in truth["residual"] and len(truth["residual"]) == compiled.cfg.d_model
    assert truth["heads"] == {"blocks.0.attn.0": "hist"}
    assert truth["mlps"]["blocks.0.mlp"][0][0] == "hist"
    assert truth["classes"] == ["1", "2", "3"] and truth["values"] == "observed on every input"


def test_value_sets_observed_on_every_input_or_inferred():
    program = lib.make_reverse(rasp.tokens)
    exact = compile_rasp_to_model(program, DIGITS, 4)
    inferred = compile_rasp_to_model(program, DIGITS, 4, exact_limit=0)
    assert exact.exact_values and not inferred.exact_values
    assert exact.class_names == ["1", "2", "3"]  # a reversal always finds its position
    assert inferred.class_names == ["1", "2", "3", "None"]  # the default, never produced
    assert exact.cfg.d_model < inferred.cfg.d_model
    assert validate(program, exact).ok and validate(program, inferred).ok


def cyclic_program():
    first = rasp.Map(lambda x: x + 1, rasp.tokens)
    second = rasp.Map(lambda x: x * 2, first, simplify=False)
    first.inner = second
    return second


@pytest.mark.parametrize(
    "program, vocab, max_len, message",
    [
        (cyclic_program(), DIGITS, 3, "cycle"),
        (rasp.ConstantSOp([1, 2]) + rasp.tokens, DIGITS, 3, "ConstantSOp has no compiled form"),
        (
            rasp.SequenceMap(
                lambda x, y: x * y, rasp.numerical(rasp.tokens + 0), rasp.numerical(rasp.tokens + 1)
            ),
            DIGITS,
            3,
            "compiles only as a LinearSequenceMap",
        ),
        (
            rasp.Aggregate(
                rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
                & rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ),
                rasp.tokens,
            ),
            DIGITS,
            3,
            "SelectorAnd has no compiled form",
        ),
        (lib.make_hist(), DIGITS, 100_000, "max_len must be"),
        (lib.make_hist(), list(range(200_000)), 3, "vocabulary of 200000"),
        (lib.make_hist(), [1, "1"], 3, "distinct values, as text too"),
        (
            rasp.SelectorWidth(
                rasp.Select(rasp.numerical(rasp.tokens), rasp.tokens, rasp.Comparison.EQ)
            ),
            [1, 2],
            3,
            "a Select's keys and queries must be categorical",
        ),
        (
            rasp.numerical(
                rasp.Aggregate(
                    rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LT),
                    rasp.numerical(rasp.tokens),
                    default=1,
                )
            ),
            [1, 2],
            3,
            "default must be 0",
        ),
        (
            rasp.Aggregate(
                rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ), rasp.tokens
            ),
            [1, 2],
            3,
            r"selects 2 keys of different values at position 1 of input \[1, 2\]",
        ),
        (
            rasp.Map(lambda x: 1 / x, rasp.tokens),
            [0, 1],
            3,
            r"fails on input \[0\] \(ZeroDivisionError",
        ),
        (lib.make_hist(), ["BOS", "a"], 3, "cannot hold 'BOS'"),
        (
            lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=40, min_key=1),
            list(range(300)),
            40,
            "values",
        ),
        (lib.make_hist(), list(range(1500)), 3, "d_model"),
    ],
)
def test_bad_programs_are_refused_in_one_line(program, vocab, max_len, message):
    with pytest.raises(FlatformerError, match=message) as error:
        compile_rasp_to_model(program, vocab, max_len)
    assert "\n" not in str(error.value)


def test_non_causal_config_attends_to_later_keys_and_saves_only_when_set():
    assert "causal" not in ModelConfig().to_dict()
    cfg = ModelConfig(d_model=2, d_head=2, d_mlp=0, n_ctx=3, d_vocab=3, causal=False)
    assert ModelConfig.from_dict(cfg.to_dict()).causal is False
    rng = np.random.default_rng(0)
    tensors = {n: rng.normal(size=s) for n, s in cfg.param_shapes().items()}
    _, cache = Transformer(cfg, tensors).run_with_cache([0, 1, 2])
    assert cache["blocks.0.attn.hook_pattern"][0, 0, 0, 2] > 0
    _, cache = Transformer(cfg.replace(causal=True), tensors).run_with_cache([0, 1, 2])
    assert cache["blocks.0.attn.hook_pattern"][0, 0, 0, 2] == 0
    from flatformer.engine.select import choose

    assert (
        type(choose(cfg, requested="numba")).__name__ == "Compiled"
    )  # its kernels attend both ways


TRACR_NAMES = (
    "tokens indices length Map SequenceMap LinearSequenceMap Select Comparison Aggregate "
    "SelectorWidth SelectorAnd SelectorOr SelectorNot numerical categorical Full ConstantSOp "
    "annotate evaluate SOp Selector RASPExpr Encoding is_numerical is_categorical get_encoding"
)


def test_the_front_end_offers_tracrs_names():
    assert [name for name in TRACR_NAMES.split() if not hasattr(rasp, name)] == []
    assert {c.name for c in rasp.Comparison} == {
        "EQ",
        "LT",
        "LEQ",
        "GT",
        "GEQ",
        "NEQ",
        "TRUE",
        "FALSE",
    }


def every_path_program():
    """A program through each construction the library does not use."""
    doubled = rasp.numerical(rasp.Map(lambda x: 2 * x, rasp.tokens)).named("doubled")  # cat -> num
    mean = rasp.numerical(
        rasp.Aggregate(
            rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ), doubled, default=0
        )
    ).named("mean")
    squared = rasp.numerical(rasp.Map(lambda x: x * x, mean)).named("squared")  # num -> num
    big = rasp.Map(lambda x: x > 5, squared).named("big")  # num -> categorical
    offset = rasp.SequenceMap(lambda x, y: x + y, rasp.tokens, rasp.Full(1)).named("offset")
    same = rasp.SequenceMap(lambda x, y: x * y, rasp.tokens, rasp.tokens).named("same")
    last = rasp.Aggregate(
        rasp.Select(rasp.indices, rasp.length - 1, rasp.Comparison.EQ), offset + same
    ).named("last")
    return rasp.SequenceMap(lambda b, v: f"{b}{v}", big, last).named("out")


def test_every_construction_equals_the_interpreter():
    program = every_path_program()
    assert program([1, 3]) == ["False13", "True13"]
    compiled = compile_rasp_to_model(program, [1, 2, 3], 4)
    result = validate(program, compiled)
    assert result.ok and result.checked == 120, result.summary()


def test_a_numerical_output_is_read_out_as_its_values():
    program = lib.make_frac_prevs(rasp.tokens == 1)
    compiled = compile_rasp_to_model(program, [1, 2], 3)
    assert run(compiled, [1, 2, 1]) == pytest.approx([1, 0.5, 2 / 3])
    assert compiled.ground_truth()["mlps"]["blocks.1.mlp"][0][0] == "frac_prevs.readout"


def test_an_sop_named_like_a_constant_direction_keeps_them_apart():
    one = rasp.numerical(rasp.Map(lambda x: x, rasp.tokens)).named("one")
    prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    program = rasp.numerical(rasp.Aggregate(prevs, one, default=0))
    compiled = compile_rasp_to_model(program, [1, 2], 3)
    assert compiled.residual.count("one") == 1 and validate(program, compiled).ok


def test_a_truthy_predicate_selects_as_the_interpreter_reads_it():
    program = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, lambda k, q: k * q))
    compiled = compile_rasp_to_model(program, [0, 1, 2], 3)
    assert program([0, 2, 1]) == [0, 2, 2] and validate(program, compiled).ok
    assert rasp.DefaultRASPEvaluator().evaluate(program, [1]) == [1]


def test_too_many_inputs_are_sampled_and_said_so():
    program = lib.make_hist()
    result = validate(program, compile_rasp_to_model(program, DIGITS, 8), limit=500)
    assert not result.exhaustive and result.checked == 500 and result.total == 9840
    assert result.summary() == (
        "model equals the interpreter on a random sample (500 of the 9,840 inputs)"
    )


def test_numerical_tokens_and_indices_are_embedded_as_numbers():
    prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    mean = rasp.numerical(rasp.Aggregate(prevs, rasp.numerical(rasp.tokens), default=0))
    program = rasp.numerical(rasp.LinearSequenceMap(mean, rasp.numerical(rasp.indices), 1, 1))
    assert program([2, 4]) == [2, 4]
    compiled = compile_rasp_to_model(program, [1, 2, 4], 3)
    numbers = [name for name in compiled.residual if name.startswith(("tokens", "indices_"))]
    assert numbers[0] == "tokens" and len(numbers) == 2 and "indices:0" in compiled.residual
    assert validate(program, compiled).ok


def test_a_set_vocabulary_as_tracr_passes_it_is_sorted():
    compiled = compile_rasp_to_model(lib.make_length(), {"c", "a", "b"}, 2)
    assert compiled.token_names[:4] == ["BOS", "a", "b", "c"]
