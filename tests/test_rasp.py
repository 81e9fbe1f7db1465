"""The RASP front end and interpreter (tracr's names and semantics) and the reference library."""

import pytest

from flatformer import rasp
from flatformer.rasp import library as lib


def test_primitives_and_operators_follow_tracr():
    assert rasp.evaluate(rasp.tokens, [3, 1]) == [3, 1]
    assert rasp.indices([7, 7, 7]) == [0, 1, 2]
    assert rasp.length("ab") == [2, 2]
    assert (rasp.tokens + 1)([1, 2]) == [2, 3]
    assert (10 - rasp.tokens)([1, 2]) == [9, 8]
    assert (rasp.tokens * rasp.indices)([5, 5, 5]) == [0, 5, 10]
    assert (rasp.tokens == 2)([1, 2]) == [False, True]
    assert (rasp.tokens < 2)([1, 2]) == [True, False]
    assert (~(rasp.tokens >= 2))([1, 2]) == [True, False]
    assert (rasp.tokens / rasp.Full(2))([1, 4]) == [0.5, 2.0]
    assert rasp.LinearSequenceMap(rasp.tokens, rasp.indices, 2, -1)([1, 1]) == [2, 1]
    assert rasp.ConstantSOp([4, 5])([0, 0]) == [4, 5]


def test_map_of_a_map_is_one_map_and_names_copy():
    inner = rasp.Map(lambda x: x + 1, rasp.tokens)
    outer = rasp.Map(lambda x: 2 * x, inner)
    assert outer.inner is rasp.tokens and outer([1]) == [4]
    named = outer.named("double")
    assert named.name == "double" and outer.name == "map"
    assert named.unique_id != outer.unique_id and named([1]) == [4]
    assert rasp.is_categorical(named) and rasp.is_numerical(rasp.numerical(named))
    assert rasp.numerical(named).name == "double"


def test_none_passes_through_maps():
    shifted = lib.shift_by(1, rasp.tokens)
    assert shifted([1, 2, 3]) == [None, 1, 2]
    assert (shifted + 1)([1, 2]) == [None, 2]
    assert (shifted + rasp.tokens)([1, 2]) == [None, 3]


def test_select_reads_predicate_of_key_then_query():
    sel = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LT)
    assert sel([0, 0, 0]) == [[False] * 3, [True, False, False], [True, True, False]]
    both = sel & rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.NEQ)
    assert isinstance(both, rasp.Select)  # same keys and queries: merged, as in tracr
    assert both([0, 0]) == [[False, False], [True, False]]
    other = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    assert isinstance(sel | other, rasp.SelectorOr)
    assert (sel | other)([1, 2]) == [[True, False], [True, True]]
    assert rasp.SelectorNot(other)([1, 2]) == [[False, True], [True, False]]
    assert rasp.SelectorWidth(sel)([0, 0, 0]) == [0, 1, 2]
    with pytest.raises(ValueError, match="key is None"):
        rasp.Comparison.EQ(None, 1)


def test_aggregate_means_defaults_and_single_values():
    prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    assert rasp.numerical(rasp.Aggregate(prevs, rasp.tokens, default=0))([1, 0, 2]) == [1, 0.5, 1]
    none = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.FALSE)
    assert rasp.Aggregate(none, rasp.tokens, default=7)([1, 2]) == [7, 7]
    assert rasp.Aggregate(none, rasp.tokens)([1, 2]) == [None, None]
    everything = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE)
    with pytest.raises(ValueError, match="average"):
        rasp.Aggregate(everything, rasp.tokens)(["a", "b"])


LIBRARY_EXAMPLES = [
    (lib.make_length(), "abcd", [4, 4, 4, 4]),
    (lib.make_reverse(rasp.tokens), "abc", ["c", "b", "a"]),
    (lib.make_hist(), "abac", [2, 1, 2, 1]),
    (lib.make_sort_unique(rasp.tokens, rasp.tokens), [2, 3, 1], [1, 2, 3]),
    (lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=5, min_key=1), [2, 1, 2], [1, 2, 2]),
    (lib.make_sort_freq(6), [2, 2, 5, 2, 3, 3], [2, 2, 2, 3, 3, 5]),
    (lib.make_frac_prevs(rasp.tokens == "x"), "xxyx", [1, 1, 2 / 3, 3 / 4]),
    (lib.make_pair_balance(rasp.tokens, "(", ")"), "(()", [1, 1, 1 / 3]),
    (lib.make_pair_balance(rasp.tokens, "(", ")"), ")(", [-1, 0]),
    (lib.make_shuffle_dyck(["()"]), "(())", [True] * 4),
    (lib.make_shuffle_dyck(["()"]), "())(", [False] * 4),
    (lib.make_shuffle_dyck(["()"]), "(()", [False] * 3),
    (lib.make_shuffle_dyck2(), "({)}", [True] * 4),
    (lib.make_shuffle_dyck2(), "({)", [False] * 3),
    (lib.make_shuffle_dyck2(), "(}", [False] * 2),
    (lib.detect_pattern(rasp.tokens, "abc"), "abcabc", [None, None, True, False, False, True]),
    (lib.make_count_less_freq(1), "aabcdd", [2] * 6),
    (lib.make_count_less_freq(2), "aaabcc", [3] * 6),
    (lib.make_count(rasp.tokens, "a"), "abac", [2] * 4),
]


@pytest.mark.parametrize("program, xs, expected", LIBRARY_EXAMPLES)
def test_library_programs_on_worked_examples(program, xs, expected):
    assert program(list(xs)) == pytest.approx(expected)
