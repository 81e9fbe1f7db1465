"""RASP, the Restricted Access Sequence Processing language (Weiss et al. 2021), with the names
and semantics of tracr's `rasp` module (Lindner et al. 2023), so that a program written for
tracr runs here unchanged.

An S-op maps an input sequence to a sequence of values, one per position; a selector maps it to
a boolean matrix (query rows, key columns). `evaluate(program, xs)` (also `program(xs)`) runs a
program on one input list. Expressions are immutable: `.named(name)` and `annotate(expr, ...)`
return a copy with a new id.
"""

from __future__ import annotations

import copy
import enum
import itertools
from typing import Any, Callable, Mapping, Sequence, Union

Value = Union[None, int, float, str, bool]
SelectorValue = list[list[bool]]

_NAME_KEY = "name"
_ENCODING_KEY = "encoding"


class Encoding(enum.Enum):
    """How the compiler stores an S-op: one direction per value, or one number."""

    CATEGORICAL = "categorical"
    NUMERICAL = "numerical"


class _Annotations(Mapping):
    """An expression's annotations; a missing `name` or `encoding` gets its default on read."""

    def __init__(self, expr: "RASPExpr", **values: Any):
        self._expr = expr
        self._values = dict(values)

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            if key not in DEFAULT_ANNOTATORS:
                raise KeyError(f"no annotation {key!r} on {self._expr!r}")
            self._values[key] = DEFAULT_ANNOTATORS[key](self._expr)
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)


class RASPExpr:
    """Any RASP expression: an S-op or a selector."""

    _ids = itertools.count(1)

    def __init__(self):
        self._annotations = _Annotations(self)
        self._unique_id = None

    def __call__(self, xs: Sequence[Value]):
        return evaluate(self, xs)

    @property
    def annotations(self) -> Mapping[str, Any]:
        return self._annotations

    @annotations.setter
    def annotations(self, values: Mapping[str, Any]):
        self._annotations = _Annotations(self, **values)

    @property
    def name(self) -> str:
        return self.annotations[_NAME_KEY]

    @property
    def children(self) -> list["RASPExpr"]:
        return []

    @property
    def unique_id(self) -> int:
        """A number no other expression has (a copy gets a new one)."""
        if self._unique_id is None:
            self._unique_id = next(RASPExpr._ids)
        return self._unique_id

    @property
    def label(self) -> str:
        return f"{self.name}_{self.unique_id}"

    def copy(self):
        new = copy.copy(self)
        new._unique_id = None
        return new

    def named(self, name: str):
        """A copy of this expression called `name`."""
        return annotate(self, name=name)

    def annotated(self, **annotations):
        return annotate(self, **annotations)


def annotate(expr, **annotations):
    """A copy of `expr` with `annotations` added to its own."""
    new = expr.copy()
    new.annotations = {**expr.annotations, **annotations}
    return new


def _lift(op: Callable[[Value, Value], Value], swap: bool = False):
    """An S-op operator: a Map with a constant, a SequenceMap with another S-op."""

    def method(self, other):
        if isinstance(other, SOp):
            fst, snd = (other, self) if swap else (self, other)
            return SequenceMap(op, fst, snd)
        if swap:
            return Map(lambda x: op(other, x), self)
        return Map(lambda x: op(x, other), self)

    return method


class SOp(RASPExpr):
    """A sequence operation: one value per position. Python's operators build Maps (with a
    constant) and SequenceMaps (with another S-op), as in tracr; comparisons take constants."""

    __hash__ = None  # == builds a Map, as in tracr, so S-ops are not dictionary keys

    def __lt__(self, other):
        return Map(lambda x: x < other, self)

    def __le__(self, other):
        return Map(lambda x: x <= other, self)

    def __eq__(self, other):  # type: ignore[override]
        return Map(lambda x: x == other, self)

    def __ne__(self, other):  # type: ignore[override]
        return Map(lambda x: x != other, self)

    def __gt__(self, other):
        return Map(lambda x: x > other, self)

    def __ge__(self, other):
        return Map(lambda x: x >= other, self)

    __add__ = _lift(lambda x, y: x + y)
    __radd__ = _lift(lambda x, y: x + y, swap=True)
    __sub__ = _lift(lambda x, y: x - y)
    __rsub__ = _lift(lambda x, y: x - y, swap=True)
    __mul__ = _lift(lambda x, y: x * y)
    __rmul__ = _lift(lambda x, y: x * y, swap=True)
    __truediv__ = _lift(lambda x, y: x / y)
    __rtruediv__ = _lift(lambda x, y: x / y, swap=True)
    __and__ = _lift(lambda x, y: x and y)
    __rand__ = _lift(lambda x, y: x and y, swap=True)
    __or__ = _lift(lambda x, y: x or y)

    def __ror__(self, other):
        if isinstance(other, SOp):
            return SequenceMap(lambda x, y: x or y, other, self)
        return Map(lambda x: x or other, self)  # tracr's operand order, kept

    def __invert__(self):
        return Map(lambda x: not x, self)


class TokensType(SOp):
    """The input tokens."""

    @property
    def label(self) -> str:
        return "tokens"

    def __repr__(self):
        return "tokens"


class IndicesType(SOp):
    """Each position's index, 0 first."""

    @property
    def label(self) -> str:
        return "indices"

    def __repr__(self):
        return "indices"


class LengthType(SOp):
    """The input's length, at every position."""

    @property
    def label(self) -> str:
        return "length"

    def __repr__(self):
        return "length"


tokens = TokensType()
indices = IndicesType()
length = LengthType()


class Map(SOp):
    """`f` applied to each value of `inner` (None stays None). With `simplify`, a Map of a Map
    becomes one Map of the composed function, as in tracr."""

    def __init__(self, f: Callable[[Value], Value], inner: SOp, simplify: bool = True):
        super().__init__()
        if not isinstance(inner, SOp) or not callable(f) or isinstance(f, RASPExpr):
            raise TypeError("Map takes a function and an S-op")
        self.f, self.inner = f, inner
        if simplify and isinstance(inner, Map):
            outer_f, inner_f = f, inner.f
            self.f = lambda x: outer_f(inner_f(x))
            self.inner = inner.inner

    @property
    def children(self):
        return [self.inner]


class SequenceMap(SOp):
    """`f` applied to the two S-ops' values at each position (None if either is None)."""

    def __init__(self, f: Callable[[Value, Value], Value], fst: SOp, snd: SOp):
        super().__init__()
        if not (isinstance(fst, SOp) and isinstance(snd, SOp)) or not callable(f):
            raise TypeError("SequenceMap takes a function and two S-ops")
        self.f, self.fst, self.snd = f, fst, snd

    @property
    def children(self):
        return [self.fst, self.snd]


class LinearSequenceMap(SequenceMap):
    """fst_fac * fst + snd_fac * snd at each position."""

    def __init__(self, fst: SOp, snd: SOp, fst_fac: float, snd_fac: float):
        super().__init__(lambda x, y: fst_fac * x + snd_fac * y, fst, snd)
        self.fst_fac, self.snd_fac = fst_fac, snd_fac


class Full(SOp):
    """`fill` at every position."""

    def __init__(self, fill: Value):
        super().__init__()
        self.fill = fill


class ConstantSOp(SOp):
    """A fixed list of values, for tests (the compiler refuses it)."""

    def __init__(self, value: Sequence[Value], check_length: bool = True):
        super().__init__()
        self.value, self.check_length = value, check_length


class Comparison(enum.Enum):
    """The predicates of Select, called as predicate(key, query)."""

    EQ = "=="
    LT = "<"
    LEQ = "<="
    GT = ">"
    GEQ = ">="
    NEQ = "!="
    TRUE = "True"
    FALSE = "False"

    def __call__(self, key: Value, query: Value) -> bool:
        if key is None:
            raise ValueError("key is None!")
        if query is None:
            raise ValueError("query is None!")
        return _COMPARISONS[self](key, query)


_COMPARISONS = {
    Comparison.EQ: lambda key, query: key == query,
    Comparison.LT: lambda key, query: key < query,
    Comparison.LEQ: lambda key, query: key <= query,
    Comparison.GT: lambda key, query: key > query,
    Comparison.GEQ: lambda key, query: key >= query,
    Comparison.NEQ: lambda key, query: key != query,
    Comparison.TRUE: lambda key, query: True,
    Comparison.FALSE: lambda key, query: False,
}


class Selector(RASPExpr):
    """A boolean matrix over (query, key) positions: which keys each query reads."""

    def __and__(self, other):
        return selector_and(self, other)

    def __rand__(self, other):
        return selector_and(other, self)

    def __or__(self, other):
        return selector_or(self, other)

    def __ror__(self, other):
        return selector_or(other, self)

    def __invert__(self):
        return selector_not(self)


class Select(Selector):
    """Query position q reads key position k where predicate(keys[k], queries[q])."""

    def __init__(self, keys: SOp, queries: SOp, predicate: Callable[[Value, Value], bool]):
        super().__init__()
        if not (isinstance(keys, SOp) and isinstance(queries, SOp)):
            raise TypeError("Select takes two S-ops (keys, queries) and a predicate")
        self.keys, self.queries, self.predicate = keys, queries, predicate

    @property
    def children(self):
        return [self.keys, self.queries]


class ConstantSelector(Selector):
    """A fixed matrix, for tests (the compiler refuses it)."""

    def __init__(self, value: SelectorValue, check_length: bool = True):
        super().__init__()
        self.value, self.check_length = value, check_length


class SelectorWidth(SOp):
    """How many keys each query's row of `selector` selects."""

    def __init__(self, selector: Selector):
        super().__init__()
        if not isinstance(selector, Selector):
            raise TypeError("SelectorWidth takes a selector")
        self.selector = selector

    @property
    def children(self):
        return [self.selector]


class _SelectorPair(Selector):
    def __init__(self, fst: Selector, snd: Selector):
        super().__init__()
        if not (isinstance(fst, Selector) and isinstance(snd, Selector)):
            raise TypeError(f"{type(self).__name__} takes two selectors")
        self.fst, self.snd = fst, snd

    @property
    def children(self):
        return [self.fst, self.snd]


class SelectorAnd(_SelectorPair):
    """Selected where both selectors select."""


class SelectorOr(_SelectorPair):
    """Selected where either selector selects."""


class SelectorNot(Selector):
    def __init__(self, inner: Selector):
        super().__init__()
        self.inner = inner

    @property
    def children(self):
        return [self.inner]


def selector_not(inner: Selector, simplify: bool = True) -> Selector:
    """~inner; a Select's negation is a Select of the negated predicate."""
    if simplify and isinstance(inner, Select):
        predicate = inner.predicate
        return Select(inner.keys, inner.queries, lambda k, q: not predicate(k, q))
    return SelectorNot(inner)


def selector_and(fst: Selector, snd: Selector, simplify: bool = True) -> Selector:
    if simplify and isinstance(fst, Select) and isinstance(snd, Select):
        merged = _merge_selects(fst, snd, lambda a, b: a and b)
        if merged is not None:
            return merged
    return SelectorAnd(fst, snd)


def selector_or(fst: Selector, snd: Selector, simplify: bool = True) -> Selector:
    if simplify and isinstance(fst, Select) and isinstance(snd, Select):
        merged = _merge_selects(fst, snd, lambda a, b: a or b)
        if merged is not None:
            return merged
    return SelectorOr(fst, snd)


def _merge_selects(fst: Select, snd: Select, combine) -> Select | None:
    """One Select for two on the same keys and queries (a Full side matches any S-op, its
    fill baked into the predicate), as tracr simplifies; None where they cannot merge."""
    p1, p2 = fst.predicate, snd.predicate
    keys = queries = None
    if isinstance(fst.keys, Full):
        keys, p1 = snd.keys, (lambda k, q, p=p1, fill=fst.keys.fill: p(fill, q))
    if isinstance(snd.keys, Full):
        keys, p2 = fst.keys, (lambda k, q, p=p2, fill=snd.keys.fill: p(fill, q))
    if isinstance(fst.queries, Full):
        queries, p1 = snd.queries, (lambda k, q, p=p1, fill=fst.queries.fill: p(k, fill))
    if isinstance(snd.queries, Full):
        queries, p2 = fst.queries, (lambda k, q, p=p2, fill=snd.queries.fill: p(k, fill))
    if fst.keys is snd.keys:
        keys = fst.keys
    if fst.queries is snd.queries:
        queries = fst.queries
    if keys is None or queries is None:
        return None
    return Select(keys, queries, lambda k, q: combine(p1(k, q), p2(k, q)))


class Aggregate(SOp):
    """Each query's mean of `sop` over the keys its selector row selects; `default` where it
    selects none. A categorical aggregate is meant to select one key (or keys of one value)."""

    def __init__(self, selector: Selector, sop: SOp, default: Value = None):
        super().__init__()
        if not isinstance(selector, Selector) or not isinstance(sop, SOp):
            raise TypeError("Aggregate takes a selector and an S-op")
        if default is not None and not isinstance(default, (str, float, bool, int)):
            raise TypeError(f"Aggregate's default must be a plain value, got {default!r}")
        self.selector, self.sop, self.default = selector, sop, default

    @property
    def children(self):
        return [self.selector, self.sop]


def numerical(sop):
    """`sop` stored as one number (its direction's length) rather than one-hot."""
    return annotate(sop, encoding=Encoding.NUMERICAL)


def categorical(sop):
    """`sop` stored one-hot, one direction per value (every S-op's default)."""
    return annotate(sop, encoding=Encoding.CATEGORICAL)


def get_encoding(sop: SOp) -> Encoding:
    return sop.annotations[_ENCODING_KEY]


def is_numerical(sop: SOp) -> bool:
    return get_encoding(sop) == Encoding.NUMERICAL


def is_categorical(sop: SOp) -> bool:
    return get_encoding(sop) == Encoding.CATEGORICAL


def _default_encoding(expr: RASPExpr) -> Encoding:
    if not isinstance(expr, SOp):
        raise TypeError(f"{expr!r} is not an S-op and has no encoding")
    return Encoding.CATEGORICAL


_DEFAULT_NAMES = [
    (TokensType, "tokens"),
    (IndicesType, "indices"),
    (LengthType, "length"),
    (LinearSequenceMap, "linear_sequence_map"),
    (SequenceMap, "sequence_map"),
    (Map, "map"),
    (Full, "full"),
    (ConstantSOp, "constant_sop"),
    (SelectorWidth, "selector_width"),
    (Aggregate, "aggregate"),
    (Select, "select"),
    (SelectorOr, "selector_or"),
    (SelectorAnd, "selector_and"),
    (SelectorNot, "selector_not"),
    (ConstantSelector, "constant_selector"),
    (SOp, "sop"),
    (Selector, "selector"),
]


def _default_name(expr: RASPExpr) -> str:
    return next(name for cls, name in _DEFAULT_NAMES if isinstance(expr, cls))


DEFAULT_ANNOTATORS: dict[str, Callable[[RASPExpr], Any]] = {
    _NAME_KEY: _default_name,
    _ENCODING_KEY: _default_encoding,
}


class DefaultRASPEvaluator:
    """tracr's evaluator object: `DefaultRASPEvaluator().evaluate(expr, xs)`."""

    def evaluate(self, expr: RASPExpr, xs: Sequence[Value]):
        return evaluate(expr, xs)


# The interpreter. The RASP interpreter: a program's value on one input, with the semantics of Weiss et al.
# 2021 as tracr's evaluator fixes them (Lindner et al. 2023): Map and SequenceMap pass None
# through; Aggregate averages the selected values, returns a single selected value as it is, and
# gives the default where nothing is selected; SelectorWidth counts each query's selected keys.
#
# Each expression is evaluated once per input (a program is a graph: shared parts are reused).


def evaluate(expr: RASPExpr, xs: Sequence[Value]):
    """`expr`'s value on input `xs`: a list (S-op) or a list of query rows (selector)."""
    return _Evaluation(list(xs)).value(expr)


def record_values(expr: RASPExpr, xs: Sequence[Value]) -> dict:
    """Every sub-expression's value on input `xs`, by the sub-expression's id: (expr, value)."""
    evaluation = _Evaluation(list(xs))
    evaluation.value(expr)
    return evaluation.memo


def categorical_aggregates(program: RASPExpr) -> list[Aggregate]:
    seen, stack, found = set(), [program], []
    while stack:
        expr = stack.pop()
        if id(expr) not in seen:
            seen.add(id(expr))
            stack.extend(expr.children)
            if isinstance(expr, Aggregate) and is_categorical(expr):
                found.append(expr)
    return found


def too_wide(program: RASPExpr, xs: Sequence[Value], memo: dict | None = None) -> str:
    """Why a categorical Aggregate cannot be compiled for input xs, if one averages different
    values there (a one-hot encoding holds no mean: Lindner et al. 2023 require such an
    aggregate to select one value); empty if none does. `memo`: the input's values, if known."""
    if memo is None:
        evaluation = _Evaluation(list(xs))
        try:
            evaluation.value(program)
        except Exception:  # the values computed before the failure are kept
            pass
        memo = evaluation.memo
    for agg in categorical_aggregates(program):
        if id(agg.selector) not in memo or id(agg.sop) not in memo:
            continue
        values = memo[id(agg.sop)][1]
        for q, row in enumerate(memo[id(agg.selector)][1]):
            picked = [v for s, v in zip(row, values) if s]
            if any((v is None) != (picked[0] is None) or v != picked[0] for v in picked):
                return (
                    f"categorical Aggregate {agg.label} selects {len(picked)} keys of different "
                    f"values at position {q} of input {list(xs)}: one direction per value holds "
                    "no mean; make it numerical or select one key"
                )
    return ""


class _Evaluation:
    def __init__(self, xs: list):
        self.xs = xs
        self.memo: dict[int, object] = {}

    def value(self, expr: RASPExpr):
        key = id(expr)
        if key not in self.memo:
            self.memo[key] = (expr, self.compute(expr))  # expr kept alive: its id stays unique
        return self.memo[key][1]

    def compute(self, expr: RASPExpr):
        xs, n = self.xs, len(self.xs)
        if isinstance(expr, TokensType):
            return list(xs)
        if isinstance(expr, IndicesType):
            return list(range(n))
        if isinstance(expr, LengthType):
            return [n] * n
        if isinstance(expr, Map):
            return [None if x is None else expr.f(x) for x in self.value(expr.inner)]
        if isinstance(expr, SequenceMap):
            pairs = zip(self.value(expr.fst), self.value(expr.snd))
            return [None if x is None or y is None else expr.f(x, y) for x, y in pairs]
        if isinstance(expr, Full):
            return [expr.fill] * n
        if isinstance(expr, (ConstantSOp, ConstantSelector)):
            if expr.check_length and len(expr.value) != n:
                raise ValueError(f"constant of length {len(expr.value)} on an input of {n}")
            return expr.value
        if isinstance(expr, SelectorWidth):
            return [sum(row) for row in self.value(expr.selector)]
        if isinstance(expr, Aggregate):
            values = self.value(expr.sop)
            return [
                _mean([v for s, v in zip(row, values) if s], expr.default)
                for row in self.value(expr.selector)
            ]
        if isinstance(expr, Select):
            keys, queries = self.value(expr.keys), self.value(expr.queries)
            return [[bool(expr.predicate(k, q)) for k in keys] for q in queries]
        if isinstance(expr, SelectorAnd):
            a, b = self.value(expr.fst), self.value(expr.snd)
            return [[x and y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
        if isinstance(expr, SelectorOr):
            a, b = self.value(expr.fst), self.value(expr.snd)
            return [[x or y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
        if isinstance(expr, SelectorNot):
            return [[not x for x in row] for row in self.value(expr.inner)]
        raise NotImplementedError(f"no evaluation of {type(expr).__name__}")


def _mean(selected: list, default):
    """tracr's Aggregate: the default for none, the value for one, else the numbers' mean."""
    if not selected:
        return default
    if len(selected) == 1:
        return selected[0]
    if all(isinstance(x, (int, bool, float)) for x in selected):
        return sum(selected) / len(selected)
    raise ValueError(f"Aggregate can only average numbers, got {selected}")
