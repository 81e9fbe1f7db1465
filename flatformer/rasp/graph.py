"""A RASP program as a graph the compiler can lay out: its expressions in dependency order,
each S-op's encoding and the set of values it can take on inputs over a vocabulary up to a
length. Where there are at most `exact_limit` such inputs the sets are observed, by running
the interpreter on every one of them (exact: the model gets a direction for each value that
occurs and no other); otherwise they are inferred by applying each operation to its inputs'
sets (tracr's basis inference, Lindner et al. 2023), which can include values that never
occur. The checks that make a program uncompilable raise one line each."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..errors import FlatformerError
from . import rasp as r
from .rasp import categorical_aggregates, record_values, too_wide
from .library import make_length

MAX_VALUES = 4096  # the most values one S-op may take (one residual direction each)
EXACT_LIMIT = 20_000  # observe the value sets where there are at most this many inputs

COMPILABLE = (
    r.TokensType,
    r.IndicesType,
    r.Full,
    r.Map,
    r.SequenceMap,
    r.Aggregate,
    r.SelectorWidth,
    r.Select,
)


PRIMITIVES = (r.TokensType, r.IndicesType, r.Full)


@dataclass
class Node:
    """One expression: its children (as nodes), encoding and possible values."""

    expr: r.RASPExpr
    label: str
    children: list["Node"] = field(default_factory=list)
    numerical: bool = False
    values: list = field(default_factory=list)  # sorted possible values (S-ops only)

    @property
    def is_sop(self) -> bool:
        return isinstance(self.expr, r.SOp)


class ProgramGraph:
    """The nodes of `program` (dependencies first) with their value sets over `vocab` and
    inputs of 1 to `max_len` tokens. `length` is compiled as tracr's library computes it."""

    def __init__(self, program: r.SOp, vocab, max_len: int, exact_limit: int = EXACT_LIMIT):
        if not isinstance(program, r.SOp):
            raise FlatformerError(f"a program is an S-op, got {type(program).__name__}")
        self.vocab, self.max_len = list(vocab), max_len
        self._length = make_length()
        self.nodes: dict[int, Node] = {}
        self.order: list[Node] = []
        self.labels: set[str] = {"one", "bos"}  # the constant directions' names
        n_inputs = sum(len(self.vocab) ** n for n in range(1, max_len + 1))
        self.exact = n_inputs <= exact_limit
        self.output = self._visit(program, set())
        if self.exact and not self._observe(program):
            self.exact = False
            for node in self.order:
                if node.is_sop:
                    node.values = self._values(node)

    def _observe(self, program: r.SOp) -> bool:
        """Each derived S-op's values over every input; False if the program fails on one."""
        derived = {
            key: node
            for key, node in self.nodes.items()
            if node.is_sop and not isinstance(node.expr, PRIMITIVES)
        }
        seen: dict[int, set] = {id(node): set() for node in derived.values()}
        checked = bool(categorical_aggregates(program))
        for n in range(1, self.max_len + 1):
            for xs in itertools.product(self.vocab, repeat=n):
                try:
                    memo = record_values(program, list(xs))
                except Exception as e:  # the program fails: a wide aggregate, or otherwise
                    cause = too_wide(program, xs) if checked else ""
                    raise (FlatformerError(cause) if cause else _fails(xs, e)) from None
                cause = too_wide(program, xs, memo) if checked else ""
                if cause:
                    raise FlatformerError(cause)
                try:
                    for key, (_, values) in memo.items():
                        if key in derived:
                            seen[id(derived[key])].update(values)
                except TypeError:  # an unhashable value: _values names its S-op
                    return False
        for node in derived.values():
            node.values = sorted(seen[id(node)], key=order_key)
        return True

    def _visit(self, expr, path: set[int]) -> Node:
        if isinstance(expr, r.LengthType):  # the same node under the primitive's id too
            self.nodes[id(expr)] = node = self._visit(self._length, path)
            return node
        if not isinstance(expr, r.RASPExpr):
            raise FlatformerError(f"a program's parts are RASP expressions, got {expr!r:.40}")
        key = id(expr)
        if key in path:
            raise FlatformerError(f"the program has a cycle through {expr.label}")
        if key in self.nodes:
            return self.nodes[key]
        if type(expr) not in COMPILABLE and type(expr) is not r.LinearSequenceMap:
            raise FlatformerError(
                f"{expr.label}: {type(expr).__name__} has no compiled form (the compiler "
                f"knows {', '.join(c.__name__ for c in COMPILABLE)}, LinearSequenceMap, length)"
            )
        path.add(key)
        children = [self._visit(child, path) for child in expr.children]
        path.discard(key)
        label = self._unique_label(expr)
        node = Node(expr, label, children)
        if node.is_sop:
            node.numerical = r.is_numerical(expr)
            if not self.exact or isinstance(expr, PRIMITIVES):
                node.values = self._values(node)
        self.nodes[key] = node
        self.order.append(node)
        return node

    def _unique_label(self, expr) -> str:
        label = expr.name
        if label in self.labels:  # a second S-op of this name (a copy of tokens, say)
            label = f"{label}_{expr.unique_id}"
        self.labels.add(label)
        return label

    def _values(self, node: Node) -> list:
        e, kids = node.expr, node.children
        if isinstance(e, r.TokensType):
            values = set(self.vocab)
        elif isinstance(e, r.IndicesType):
            values = set(range(self.max_len))
        elif isinstance(e, r.Full):
            values = {e.fill}
        elif isinstance(e, r.Map):
            values = _value_set(node, (_apply(e.f, x) for x in kids[0].values))
        elif isinstance(e, r.SequenceMap):
            pairs = ((x, y) for x in kids[0].values for y in kids[1].values)
            values = _value_set(node, (_apply(e.f, x, y) for x, y in pairs))
        elif isinstance(e, r.SelectorWidth):
            values = set(range(self.max_len + 1))
        else:  # Aggregate
            values = self._aggregate_values(node)
        values.discard(_FAILED)
        if len(values) > MAX_VALUES:
            raise FlatformerError(
                f"{node.label} can take {len(values)} values over this vocabulary and length "
                f"(the compiler allows {MAX_VALUES}); shorten max_len or the vocabulary"
            )
        return sorted(values, key=order_key)

    def _aggregate_values(self, node: Node) -> set:
        e, sop = node.expr, node.children[1]
        if not node.numerical:
            return set(sop.values) | {e.default}
        # the mean of any multiset of the values, of any size up to max_len
        numbers = [v for v in sop.values if v is not None]
        sums, means = {0}, {e.default}
        for size in range(1, self.max_len + 1):
            sums = {s + v for s in sums for v in numbers}
            if len(sums) > MAX_VALUES:
                raise FlatformerError(
                    f"{node.label}: the numerical mean of {sop.label} can take over "
                    f"{MAX_VALUES} values; shorten max_len"
                )
            means |= {s / size for s in sums}
        return means | set(numbers)


_FAILED = object()


def _fails(xs, error: Exception) -> FlatformerError:
    message = str(error).splitlines()[0] if str(error) else ""
    return FlatformerError(
        f"the program fails on input {list(xs)} ({type(error).__name__}: {message:.120}); a "
        "compiled model needs a value at every input up to max_len"
    )


def _value_set(node: Node, values) -> set:
    try:
        return set(values)
    except TypeError:
        raise FlatformerError(
            f"{node.label}: its function returns a value that is not a number, string, bool or None"
        ) from None


def _apply(f, *args):
    """f on possible values, None passing through as in the interpreter; a value f raises on
    cannot occur in a run that succeeds, so it is left out."""
    if any(a is None for a in args):
        return None
    try:
        return f(*args)
    except Exception:
        return _FAILED


def order_key(value):
    """Values sorted numbers first (by size), then the rest by their text; None last."""
    if value is None:
        return (2, 0, "")
    if isinstance(value, (int, float)):
        return (0, value, "")
    return (1, 0, f"{type(value).__name__}:{value}")
