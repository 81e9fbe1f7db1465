"""The RASP interpreter: a program's value on one input, with the semantics of Weiss et al.
2021 as tracr's evaluator fixes them (Lindner et al. 2023): Map and SequenceMap pass None
through; Aggregate averages the selected values, returns a single selected value as it is, and
gives the default where nothing is selected; SelectorWidth counts each query's selected keys.

Each expression is evaluated once per input (a program is a graph: shared parts are reused).
"""

from __future__ import annotations

from typing import Sequence

from . import rasp as r


def evaluate(expr: r.RASPExpr, xs: Sequence[r.Value]):
    """`expr`'s value on input `xs`: a list (S-op) or a list of query rows (selector)."""
    return _Evaluation(list(xs)).value(expr)


def record_values(expr: r.RASPExpr, xs: Sequence[r.Value]) -> dict:
    """Every sub-expression's value on input `xs`, by the sub-expression's id: (expr, value)."""
    evaluation = _Evaluation(list(xs))
    evaluation.value(expr)
    return evaluation.memo


def categorical_aggregates(program: r.RASPExpr) -> list[r.Aggregate]:
    seen, stack, found = set(), [program], []
    while stack:
        expr = stack.pop()
        if id(expr) not in seen:
            seen.add(id(expr))
            stack.extend(expr.children)
            if isinstance(expr, r.Aggregate) and r.is_categorical(expr):
                found.append(expr)
    return found


def too_wide(program: r.RASPExpr, xs: Sequence[r.Value], memo: dict | None = None) -> str:
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

    def value(self, expr: r.RASPExpr):
        key = id(expr)
        if key not in self.memo:
            self.memo[key] = (expr, self.compute(expr))  # expr kept alive: its id stays unique
        return self.memo[key][1]

    def compute(self, expr: r.RASPExpr):
        xs, n = self.xs, len(self.xs)
        if isinstance(expr, r.TokensType):
            return list(xs)
        if isinstance(expr, r.IndicesType):
            return list(range(n))
        if isinstance(expr, r.LengthType):
            return [n] * n
        if isinstance(expr, r.Map):
            return [None if x is None else expr.f(x) for x in self.value(expr.inner)]
        if isinstance(expr, r.SequenceMap):
            pairs = zip(self.value(expr.fst), self.value(expr.snd))
            return [None if x is None or y is None else expr.f(x, y) for x, y in pairs]
        if isinstance(expr, r.Full):
            return [expr.fill] * n
        if isinstance(expr, (r.ConstantSOp, r.ConstantSelector)):
            if expr.check_length and len(expr.value) != n:
                raise ValueError(f"constant of length {len(expr.value)} on an input of {n}")
            return expr.value
        if isinstance(expr, r.SelectorWidth):
            return [sum(row) for row in self.value(expr.selector)]
        if isinstance(expr, r.Aggregate):
            values = self.value(expr.sop)
            return [
                _mean([v for s, v in zip(row, values) if s], expr.default)
                for row in self.value(expr.selector)
            ]
        if isinstance(expr, r.Select):
            keys, queries = self.value(expr.keys), self.value(expr.queries)
            return [[bool(expr.predicate(k, q)) for k in keys] for q in queries]
        if isinstance(expr, r.SelectorAnd):
            a, b = self.value(expr.fst), self.value(expr.snd)
            return [[x and y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
        if isinstance(expr, r.SelectorOr):
            a, b = self.value(expr.fst), self.value(expr.snd)
            return [[x or y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
        if isinstance(expr, r.SelectorNot):
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
