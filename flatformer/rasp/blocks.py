"""The attention heads and MLP units that compute RASP operations on named residual
directions, after tracr's constructions (Lindner et al. 2023):

- Map and SequenceMap on categorical inputs: a lookup table, one ReLU unit per input value
  (per pair of values), writing the output's value direction (or its number).
- A Map of a numerical input: a discretising MLP, a pair of ReLUs per gap between consecutive
  possible values making a step there, the output the sum of the steps' changes.
- LinearSequenceMap of numerical inputs: ReLU(x) - ReLU(-x) per input, scaled.
- Aggregate: a head whose query-key table is the selector's predicate times SCORE; the BOS key
  scores SCORE / 2, so it takes the attention only where nothing is selected, and its value is
  the default (a categorical default, None included, has its own direction).
- SelectorWidth: the BOS key scores SCORE like a selected key, so BOS gets 1 / (width + 1);
  an MLP reads the width off that number.

Every MLP unit is switched off at the BOS position (a large negative weight from `bos`), so
that derived variables are zero there and BOS's value in a head is only what the head gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FlatformerError
from . import rasp as r
from .layout import Residual

SCORE = 100.0  # a selected key's attention score: unselected keys get e^-50 of BOS's weight


@dataclass
class Unit:
    """One MLP hidden unit: ReLU(sum of weight * direction + bias) times its output weights."""

    inputs: dict[int, float]
    outputs: dict[int, float]
    bias: float = 0.0


@dataclass
class Head:
    """One attention head as sparse entries (residual direction, head dimension, weight)."""

    step: str  # the label of the RASP expression it computes
    query: list[tuple[int, int, float]] = field(default_factory=list)
    key: list[tuple[int, int, float]] = field(default_factory=list)
    value: list[tuple[int, int, float]] = field(default_factory=list)
    output: list[tuple[int, int, float]] = field(default_factory=list)  # (dim, direction, w)

    @property
    def dims(self) -> int:
        used = [e[1] for e in self.query + self.key + self.value] + [e[0] for e in self.output]
        return max(used, default=-1) + 1


def directions_of(res: Residual, node) -> list[tuple[object, int]]:
    """A categorical node's (value, direction index) pairs."""
    return [(v, res.at(node.label, v)) for v in node.values]


def out_weights(res: Residual, node, value) -> dict[int, float]:
    """What one unit writes so that `node` reads `value`."""
    if node.numerical:
        if value is None:
            return {}
        return {res.at(node.label, numerical=True): float(value)}
    if not res.has(node.label, value):  # a value that occurs on no input (observed sets)
        return {}
    return {res.at(node.label, value): 1.0}


def categorical_map_units(res: Residual, node) -> list[Unit]:
    """Map of a categorical input: a unit per input value, writing f(value)."""
    (inner,) = node.children
    f = node.expr.f
    units = []
    for value, d in directions_of(res, inner):
        result = None if value is None else _call(f, value)
        if result is not _SKIP:
            units.append(Unit({d: 1.0}, out_weights(res, node, result)))
    return units


def sequence_map_units(res: Residual, node) -> list[Unit]:
    """SequenceMap of categorical inputs: a unit per pair of values, on when both are."""
    fst, snd = node.children
    if fst.numerical or snd.numerical:
        if isinstance(node.expr, r.LinearSequenceMap) and fst.numerical and snd.numerical:
            return linear_units(res, node)
        raise FlatformerError(
            f"{node.label}: a SequenceMap of numerical inputs compiles only as a "
            "LinearSequenceMap of two numerical S-ops to a numerical one"
        )
    units = []
    for a, da in directions_of(res, fst):
        for b, db in directions_of(res, snd):
            result = None if a is None or b is None else _call(node.expr.f, a, b)
            if result is _SKIP:
                continue
            inputs = {da: 1.0} if da == db else {da: 1.0, db: 1.0}
            bias = 0.0 if da == db else -1.0
            if da != db or a == b:
                units.append(Unit(inputs, out_weights(res, node, result), bias))
    return units


def linear_units(res: Residual, node) -> list[Unit]:
    """fst_fac * x + snd_fac * y of numerical x, y: ReLU(x) - ReLU(-x) for each."""
    if not node.numerical:
        raise FlatformerError(f"{node.label}: a LinearSequenceMap of numbers must be numerical")
    out = res.at(node.label, numerical=True)
    units = []
    for child, factor in zip(node.children, (node.expr.fst_fac, node.expr.snd_fac)):
        d = res.at(child.label, numerical=True)
        units += [Unit({d: 1.0}, {out: factor}), Unit({d: -1.0}, {out: -factor})]
    return units


def numerical_map_units(res: Residual, node, source: int, values, f) -> list[Unit]:
    """f of the number at direction `source`, whose possible values are `values`: the output
    at the smallest value, plus a step of f's change at each midpoint between consecutive
    values (a pair of ReLUs each, exactly 0 below the step's lower value and 1 above its upper)."""
    points = merged(values)
    first = _call(f, points[0])
    units = [Unit({}, _writes(res, node, first), bias=1.0)]
    previous = first
    for low, high in zip(points, points[1:]):
        now = _call(f, high)
        if _same(now, previous):
            continue
        low, high = float(low), float(high)
        slope = 4.0 / (high - low)  # +-2 at the two values: the step is exactly 0 or 1 there
        middle = (low + high) / 2
        change = _writes_change(res, node, previous, now)
        units.append(Unit({source: slope}, change, bias=1.0 - slope * middle))
        units.append(
            Unit({source: slope}, {k: -w for k, w in change.items()}, bias=-slope * middle)
        )
        previous = now
    return units


def numerical_input_units(res: Residual, node, inner, f) -> list[Unit]:
    """f of a numerical S-op `inner` (a Map, or the readout of a numerical output)."""
    return numerical_map_units(res, node, res.at(inner.label, numerical=True), inner.values, f)


def selector_width_readout(res: Residual, node, scratch: int) -> list[Unit]:
    """The width w from the BOS weight 1 / (w + 1) that the head wrote at `scratch`."""
    weights = [1.0 / (w + 1) for w in node.values]
    return numerical_map_units(res, node, scratch, weights, lambda x: round(1.0 / x) - 1)


def merged(values) -> list:
    """The values (numbers) sorted, each within 1e-9 of the previous one left out. A bool
    among them (a mean over one selected boolean) is its number: 0.0 and False are one value,
    and a numerical output is named as a number."""
    numbers = sorted(
        (float(v) if isinstance(v, bool) else v for v in values if v is not None), key=float
    )
    out: list = []
    for x in numbers:
        if not out or float(x) - float(out[-1]) > 1e-9 * max(1.0, abs(float(x))):
            out.append(x)
    if not out:
        raise FlatformerError("a numerical S-op with no possible value")
    return out


def _writes(res, node, value) -> dict[int, float]:
    return {} if value is _SKIP else out_weights(res, node, value)


def _writes_change(res, node, before, after) -> dict[int, float]:
    change = dict(_writes(res, node, after))
    for k, w in _writes(res, node, before).items():
        change[k] = change.get(k, 0.0) - w
    return change


_SKIP = object()


def selects(predicate, key, query) -> bool:
    """Whether the predicate selects, as the interpreter reads it (truthy); False if it raises."""
    result = _call(predicate, key, query)
    return result is not _SKIP and bool(result)


def _call(f, *args):
    try:
        return f(*args)
    except Exception:
        return _SKIP


def select_head(res: Residual, step: str, select: r.Select, graph, bos_score: float) -> Head:
    """Query-key weights scoring SCORE where the predicate holds, and bos_score on BOS."""
    if not isinstance(select, r.Select):
        raise FlatformerError(
            f"{step}: only a Select compiles to attention; write {select.label} "
            f"({type(select).__name__}) as one Select on a combined S-op"
        )
    keys, queries = graph.nodes[id(select.keys)], graph.nodes[id(select.queries)]
    if keys.numerical or queries.numerical:
        raise FlatformerError(f"{step}: a Select's keys and queries must be categorical")
    head = Head(step)
    for j, (q, dq) in enumerate(directions_of(res, queries)):
        head.query.append((dq, j, 1.0))
        for k, dk in directions_of(res, keys):
            if q is not None and k is not None and selects(select.predicate, k, q):
                head.key.append((dk, j, SCORE))
    bos_dim = len(queries.values)
    head.query.append((res.at("one", numerical=True), bos_dim, 1.0))
    head.key.append((res.at("bos", numerical=True), bos_dim, bos_score))
    return head


def aggregate_head(res: Residual, node, graph) -> Head:
    """The mean of the selected keys' values; the default where none is selected."""
    selector, sop = node.children
    head = select_head(res, node.label, selector.expr, graph, SCORE / 2)
    e = node.expr
    if node.numerical:
        if not sop.numerical:
            raise FlatformerError(f"{node.label}: a numerical Aggregate needs a numerical S-op")
        if e.default is None or e.default != 0:
            raise FlatformerError(f"{node.label}: a numerical Aggregate's default must be 0")
        head.value.append((res.at(sop.label, numerical=True), 0, 1.0))
        head.output.append((0, res.at(node.label, numerical=True), 1.0))
        return head
    if sop.numerical:
        raise FlatformerError(
            f"{node.label}: a categorical Aggregate needs a categorical S-op "
            f"({sop.label} is numerical)"
        )
    for j, (value, d_out) in enumerate(directions_of(res, node)):
        for v, d_in in directions_of(res, sop):
            if _same(v, value):
                head.value.append((d_in, j, 1.0))
        if _same(value, e.default):
            head.value.append((res.at("bos", numerical=True), j, 1.0))
        head.output.append((j, d_out, 1.0))
    return head


def _same(a, b) -> bool:
    """Equal as residual directions are (None only to None)."""
    return (a is None) == (b is None) and a == b


def selector_width_head(res: Residual, node, graph, scratch: int) -> Head:
    """BOS scored like a selected key: its weight 1 / (width + 1) written to the scratch."""
    (selector,) = node.children
    head = select_head(res, node.label, selector.expr, graph, SCORE)
    head.value.append((res.at("bos", numerical=True), 0, 1.0))
    head.output.append((0, scratch, 1.0))
    return head
