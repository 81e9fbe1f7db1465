"""The reference programs of tracr's library (Lindner et al. 2023, after Weiss et al. 2021),
written against this front end: each builds a RASP program whose answer is known."""

from __future__ import annotations

from typing import Sequence

from . import rasp


def make_length() -> rasp.SOp:
    """The input's length at every position: the width of a select-all.
    make_length()(["a", "b", "c"]) == [3, 3, 3]"""
    everything = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE).named("all_true")
    return rasp.SelectorWidth(everything).named("length")


def make_reverse(sop: rasp.SOp) -> rasp.SOp:
    """`sop` read backwards: position i reads position length - 1 - i.
    make_reverse(rasp.tokens)("abc") == ["c", "b", "a"]"""
    mirror = (make_length() - rasp.indices).named("opp_idx")
    mirror = (mirror - 1).named("opp_idx-1")
    flip = rasp.Select(rasp.indices, mirror, rasp.Comparison.EQ).named("reverse_selector")
    return rasp.Aggregate(flip, sop).named("reverse")


def make_hist() -> rasp.SOp:
    """How often each position's token occurs in the input.
    make_hist()("abac") == [2, 1, 2, 1]"""
    same = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ).named("same_tok")
    return rasp.SelectorWidth(same).named("hist")


def make_sort_unique(vals: rasp.SOp, keys: rasp.SOp) -> rasp.SOp:
    """`vals` ordered by `keys`, which must all differ: position p reads the value whose key
    has p smaller keys. make_sort_unique(rasp.tokens, rasp.tokens)([2, 3, 1]) == [1, 2, 3]"""
    smaller = rasp.Select(keys, keys, rasp.Comparison.LT).named("smaller")
    target = rasp.SelectorWidth(smaller).named("target_pos")
    arrive = rasp.Select(target, rasp.indices, rasp.Comparison.EQ).named("sel_new")
    return rasp.Aggregate(arrive, vals).named("sort")


def make_sort(vals: rasp.SOp, keys: rasp.SOp, *, max_seq_len: int, min_key: float) -> rasp.SOp:
    """`vals` ordered by `keys`, ties kept in input order: each key gets its position times
    min_key / max_seq_len added, which makes the keys distinct without reordering them
    (for numerical keys whose gaps are at least min_key).
    make_sort(rasp.tokens, rasp.tokens, max_seq_len=5, min_key=1)([2, 1, 2]) == [1, 2, 2]"""
    unique = rasp.SequenceMap(
        lambda key, i: key + min_key * i / max_seq_len, keys, rasp.indices
    ).named("keys")
    return make_sort_unique(vals, unique)


def make_sort_freq(max_seq_len: int) -> rasp.SOp:
    """The tokens, most frequent first (ties in input order).
    make_sort_freq(5)([2, 2, 5, 2, 3, 3]) == [2, 2, 2, 3, 3, 5]"""
    hist = (-1 * make_hist()).named("hist")
    return make_sort(rasp.tokens, hist, max_seq_len=max_seq_len, min_key=1).named("sort_freq")


def make_frac_prevs(bools: rasp.SOp) -> rasp.SOp:
    """The fraction of positions up to here where `bools` is true (a numerical mean).
    make_frac_prevs(rasp.tokens == "x")("xxyx") == [1, 1, 2/3, 3/4]"""
    bools = rasp.numerical(bools)
    upto = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named("prevs")
    return rasp.numerical(rasp.Aggregate(upto, bools, default=0)).named("frac_prevs")


def make_pair_balance(sop: rasp.SOp, open_token: str, close_token: str) -> rasp.SOp:
    """The fraction of open tokens minus that of close tokens, up to each position.
    make_pair_balance(rasp.tokens, "(", ")")("(()") == [1, 1, 1/3]"""
    opens = rasp.numerical(make_frac_prevs(sop == open_token)).named("opens")
    closes = rasp.numerical(make_frac_prevs(sop == close_token)).named("closes")
    balance = rasp.numerical(rasp.LinearSequenceMap(opens, closes, 1, -1))
    return balance.named("pair_balance")


def make_shuffle_dyck(pairs: Sequence[str]) -> rasp.SOp:
    """Whether the input is a shuffle of balanced bracket sequences, one per pair ("()",
    "{}", ...): no prefix closes more of a pair than it opened, and the whole input closes
    all it opens. The answer is at every position (the last one's is the input's).
    make_shuffle_dyck(["()"])("(())") == [True] * 4"""
    if not pairs or any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"pairs must be two-character strings, got {pairs!r}")
    balances = [
        make_pair_balance(rasp.tokens, pair[0], pair[1]).named(f"balance_{i}")
        for i, pair in enumerate(pairs)
    ]
    negative = balances[0] < 0
    for balance in balances[1:]:
        negative = negative | (balance < 0)
    negative = rasp.numerical(rasp.Map(lambda x: x, negative)).named("any_negative")
    everything = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE).named("all")
    ever_negative = rasp.numerical(rasp.Aggregate(everything, negative, default=0))
    never_negative = (~ever_negative.named("has_neg")).named("not_has_neg")
    zero = balances[0] == 0
    for balance in balances[1:]:
        zero = zero & (balance == 0)
    zero = zero.named("all_zero")
    last = rasp.Select(rasp.indices, make_length() - 1, rasp.Comparison.EQ).named("last")
    ends_balanced = rasp.Aggregate(last, zero).named("last_zero")
    return (ends_balanced & never_negative).named("shuffle_dyck")


def make_shuffle_dyck2() -> rasp.SOp:
    """make_shuffle_dyck with round and curly brackets."""
    return make_shuffle_dyck(["()", "{}"]).named("shuffle_dyck2")


def shift_by(offset: int, sop: rasp.SOp) -> rasp.SOp:
    """`sop` moved `offset` positions right; None where nothing arrives (the first `offset`)."""
    back = rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + offset)
    return rasp.Aggregate(back.named(f"back_{offset}"), sop, default=None).named(
        f"shift_by({offset})"
    )


def detect_pattern(sop: rasp.SOp, pattern: Sequence[rasp.Value]) -> rasp.SOp:
    """Whether `pattern` ends at each position (None before it could have started).
    detect_pattern(rasp.tokens, "abc")("abcabc") == [None, None, True, False, False, True]"""
    if len(pattern) < 1:
        raise ValueError("detect_pattern needs a pattern of at least one element")
    found = None
    for back, element in enumerate(reversed(pattern)):
        here = sop if back == 0 else shift_by(back, sop)
        match = (here == element).named(f"match_{back}")
        found = match if found is None else (found & match)
    return found.named(f"detect_pattern({''.join(map(str, pattern))})")


def make_count_less_freq(n: int) -> rasp.SOp:
    """At every position, how many positions hold a token that occurs at most n times.
    make_count_less_freq(1)("aabcdd") == [2] * 6"""
    hist = make_hist()
    rare = rasp.Select(hist, hist, lambda key, query: key <= n).named("select_less")
    return rasp.SelectorWidth(rare).named("count_less_freq")


def make_count(sop: rasp.SOp, token: rasp.Value) -> rasp.SOp:
    """How many positions of `sop` hold `token`, at every position.
    make_count(rasp.tokens, "a")("abac") == [2, 2, 2, 2]"""
    match = rasp.Select(sop, sop, lambda key, query: key == token).named(f"is_{token}")
    return rasp.SelectorWidth(match).named(f"count_{token}")
