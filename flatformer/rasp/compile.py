"""Compile a RASP program into transformer weights (after tracr, Lindner et al. 2023): the
program's graph is laid out in layers (each Aggregate in an attention sublayer, each Map and
SequenceMap in an MLP sublayer, as early as its inputs allow), every S-op gets named residual
directions, and blocks.py builds the heads and MLP units. The model reads BOS then the tokens;
the argmax of its logits at position i + 1 is the program's value at position i.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..config import LIMITS, MAX_PARAMS, ModelConfig
from ..errors import FlatformerError
from . import blocks
from . import rasp as r
from .graph import EXACT_LIMIT, Node, ProgramGraph, order_key
from .layout import Direction, Residual


@dataclass
class Step:
    """One RASP operation placed in the model: where it runs and what it writes."""

    label: str
    kind: str  # "attention", "mlp" or "selector_width" (a head, then an MLP)
    sublayer: int  # 2 * layer for attention, 2 * layer + 1 for the MLP
    node: Node


@dataclass
class CompiledProgram:
    """A compiled program: the model (`cfg`, `tensors`), its token and class names, and the
    ground truth of what each residual direction, head and MLP unit computes."""

    cfg: ModelConfig
    tensors: dict[str, np.ndarray]
    vocab: list  # the input values, token i + 1 each (token 0 is BOS)
    classes: list  # the output values, logit c each
    max_len: int
    residual: list[str]  # each direction's "variable:value" (or variable, if numerical)
    heads: dict[str, str] = field(default_factory=dict)  # "blocks.L.attn.h" -> step label
    mlps: dict[str, list] = field(default_factory=dict)  # "blocks.L.mlp" -> [label, start, end]
    seconds: float = 0.0
    exact_values: bool = False  # value sets observed on every input (else inferred)

    @property
    def token_names(self) -> list[str]:
        names = ["BOS"] + [str(v) for v in self.vocab]
        return names + [f"(unused {i})" for i in range(self.cfg.d_vocab - len(names))]

    @property
    def class_names(self) -> list[str]:
        return [str(v) for v in self.classes]

    def encode(self, xs) -> list[int]:
        """BOS followed by the token of each input value."""
        index = {v: i + 1 for i, v in enumerate(self.vocab)}
        try:
            return [0] + [index[x] for x in xs]
        except KeyError as e:
            raise FlatformerError(f"{e.args[0]!r} is not in the vocabulary {self.vocab}") from None

    def ground_truth(self) -> dict:
        """What the config of a run records: directions, heads and MLP units by step."""
        return {
            "residual": self.residual,
            "heads": self.heads,
            "mlps": self.mlps,
            "vocab": self.token_names,
            "classes": self.class_names,
            "max_len": self.max_len,
            "values": "observed on every input" if self.exact_values else "inferred",
        }


def compile_rasp_to_model(
    program: r.SOp,
    vocab,
    max_seq_len: int,
    causal: bool | None = None,
    exact_limit: int = EXACT_LIMIT,
) -> CompiledProgram:
    """The model of `program` on inputs of 1 to `max_seq_len` values from `vocab`. causal=None
    makes it causal exactly when every Select only looks back (a key index <= its query's).
    Each S-op's values are observed on every input where there are at most `exact_limit`
    inputs, else inferred (graph.py)."""
    start = time.process_time()
    vocab = _checked_vocab(vocab)
    if not isinstance(max_seq_len, int) or not 1 <= max_seq_len < LIMITS["n_ctx"][1]:
        raise FlatformerError(
            f"max_len must be a whole number from 1 to {LIMITS['n_ctx'][1] - 1}, "
            f"got {max_seq_len!r}"
        )
    graph = ProgramGraph(program, vocab, max_seq_len, exact_limit)
    steps, output = _schedule(graph)
    if causal is None:
        causal = _looks_back_only(graph)
    res = _residual(graph, steps, output)
    _check_size(graph, steps, res)
    model = _assemble(graph, steps, output, res, causal)
    model.exact_values = graph.exact
    model.seconds = time.process_time() - start
    return model


def _checked_vocab(vocab) -> list:
    """The input values in token order: a list's order, or a set's sorted (tracr passes sets)."""
    values = sorted(vocab, key=order_key) if isinstance(vocab, (set, frozenset)) else list(vocab)
    if not values:
        raise FlatformerError("the vocabulary is empty")
    names = [str(v) for v in values]
    if any(v is None for v in values) or len(set(names)) != len(values):
        raise FlatformerError(
            f"the vocabulary must be distinct values, as text too (no None), got {names!r:.80}"
        )
    if "BOS" in names:
        raise FlatformerError(
            "the vocabulary cannot hold 'BOS', the name of the model's first token"
        )
    if len(values) + 1 > LIMITS["d_vocab"][1]:
        raise FlatformerError(f"a vocabulary of {len(values)} is over the model's limit")
    return values


def _schedule(graph: ProgramGraph) -> tuple[list[Step], Node]:
    """Each operation in the earliest sublayer its inputs allow; a numerical output gets a
    readout MLP that makes it categorical, so that the logits' argmax reads it."""
    ready: dict[int, int] = {}
    steps: list[Step] = []
    for node in graph.order:
        after = max((ready[id(c.expr)] for c in node.children), default=0)
        e = node.expr
        if isinstance(e, (r.TokensType, r.IndicesType, r.Full)):
            ready[id(e)] = 0
        elif isinstance(e, r.Select):
            ready[id(e)] = after
        elif isinstance(e, (r.Map, r.SequenceMap)):
            s = after if after % 2 else after + 1
            steps.append(Step(node.label, "mlp", s, node))
            ready[id(e)] = s + 1
        elif isinstance(e, r.Aggregate):
            s = after if after % 2 == 0 else after + 1
            steps.append(Step(node.label, "attention", s, node))
            ready[id(e)] = s + 1
        else:  # SelectorWidth
            s = after if after % 2 == 0 else after + 1
            steps.append(Step(node.label, "selector_width", s, node))
            ready[id(e)] = s + 2
    output = graph.output
    if output.numerical:
        after = ready[id(output.expr)]
        readout = Node(
            None, output.label + ".readout", [output], False, blocks.merged(output.values)
        )
        steps.append(Step(readout.label, "readout", after if after % 2 else after + 1, readout))
        output = readout
    return steps, output


def _looks_back_only(graph: ProgramGraph) -> bool:
    """Whether every Select reads indices against indices and never a later key."""
    n = graph.max_len
    for node in graph.order:
        e = node.expr
        if isinstance(e, r.Select):
            if not (isinstance(e.keys, r.IndicesType) and isinstance(e.queries, r.IndicesType)):
                return False
            if any(blocks.selects(e.predicate, k, q) for q in range(n) for k in range(q + 1, n)):
                return False
    return True


def _residual(graph: ProgramGraph, steps: list[Step], output: Node) -> Residual:
    res = Residual()
    res.add(Direction("one", numerical=True))
    res.add(Direction("bos", numerical=True))
    nodes = [n for n in graph.order if n.is_sop] + ([output] if output.expr is None else [])
    for node in nodes:
        if node.numerical:
            bound = max((abs(float(v)) for v in node.values if v is not None), default=1.0)
            res.add(Direction(node.label, numerical=True, bound=max(bound, 1.0)))
        else:
            for value in node.values:
                res.add(Direction(node.label, value))
    for step in steps:
        if step.kind == "selector_width":
            res.add(Direction(step.label + ".bos_weight", numerical=True))
    return res


def _check_size(graph: ProgramGraph, steps: list[Step], res: Residual) -> None:
    """Refuse a model over flatformer's limits before building its tables."""
    too_big = None
    if len(res) > LIMITS["d_model"][1]:
        too_big = ("d_model", len(res))
    for step in steps:
        node, e = step.node, step.node.expr
        if isinstance(e, (r.Aggregate, r.SelectorWidth)) and isinstance(e.selector, r.Select):
            width = len(graph.nodes[id(e.selector.queries)].values) + 1
            if width > LIMITS["d_head"][1]:
                too_big = too_big or ("d_head", width)
        if isinstance(e, r.SequenceMap):
            pairs = len(node.children[0].values) * len(node.children[1].values)
            if pairs > LIMITS["d_mlp"][1]:
                too_big = too_big or ("d_mlp", pairs)
    if too_big:
        name, size = too_big
        raise FlatformerError(
            f"the compiled model needs {name} {size}, over flatformer's limit of "
            f"{LIMITS[name][1]}; use a smaller vocabulary or max_len"
        )


def _assemble(graph, steps, output: Node, res: Residual, causal: bool) -> CompiledProgram:
    n_sub = max([s.sublayer + (2 if s.kind == "selector_width" else 1) for s in steps] + [1])
    n_layers = math.ceil(n_sub / 2)
    heads: list[list[blocks.Head]] = [[] for _ in range(n_layers)]
    mlps: list[list[tuple[str, list[blocks.Unit]]]] = [[] for _ in range(n_layers)]
    for step in steps:
        layer, node = step.sublayer // 2, step.node
        if step.kind == "attention":
            heads[layer].append(blocks.aggregate_head(res, node, graph))
        elif step.kind == "selector_width":
            scratch = res.at(step.label + ".bos_weight", numerical=True)
            heads[layer].append(blocks.selector_width_head(res, node, graph, scratch))
            mlps[layer].append((step.label, blocks.selector_width_readout(res, node, scratch)))
        elif step.kind == "readout":
            units = blocks.numerical_input_units(res, node, node.children[0], lambda x: x)
            mlps[layer].append((step.label, units))
        elif isinstance(node.expr, r.Map) and node.children[0].numerical:
            units = blocks.numerical_input_units(res, node, node.children[0], node.expr.f)
            mlps[layer].append((step.label, units))
        elif isinstance(node.expr, r.Map):
            mlps[layer].append((step.label, blocks.categorical_map_units(res, node)))
        else:
            mlps[layer].append((step.label, blocks.sequence_map_units(res, node)))
    # a unit that writes nothing (its values never occur together) is left out
    mlps = [
        [(label, [u for u in units if any(u.outputs.values())]) for label, units in layer]
        for layer in mlps
    ]
    classes = list(output.values) or [None]
    if len(classes) == 1:
        classes.append("(unused)")
    d_vocab = max(len(graph.vocab) + 1, len(classes))
    cfg = _config(
        d_model=len(res),
        n_heads=max([len(h) for h in heads] + [1]),
        d_head=max([h.dims for hs in heads for h in hs] + [1]),
        n_layers=n_layers,
        d_mlp=max(sum(len(u) for _, u in layer) for layer in mlps),
        n_ctx=graph.max_len + 1,
        d_vocab=d_vocab,
        d_vocab_out=len(classes) if len(classes) < d_vocab else 0,
        causal=causal,
    )
    tensors = {name: np.zeros(shape) for name, shape in cfg.param_shapes().items()}
    model = CompiledProgram(
        cfg, tensors, graph.vocab, classes, graph.max_len, [d.name for d in res.directions]
    )
    _embed(tensors, graph, res)
    root_dh = math.sqrt(cfg.d_head)
    for layer, layer_heads in enumerate(heads):
        b = f"blocks.{layer}.attn."
        for h, head in enumerate(layer_heads):
            model.heads[f"blocks.{layer}.attn.{h}"] = head.step
            for name, entries, scale in (
                ("W_Q", head.query, 1.0),
                ("W_K", head.key, root_dh),
                ("W_V", head.value, 1.0),
            ):
                for d, j, w in entries:
                    tensors[b + name][h, d, j] += w * scale
            for j, d, w in head.output:
                tensors[b + "W_O"][h, j, d] += w
    for layer, parts in enumerate(mlps):
        _mlp(tensors, model, f"blocks.{layer}.mlp", parts, res)
    for c, value in enumerate(output.values):
        tensors["unembed.W_U"][res.at(output.label, value), c] = 1.0
    return model


def _config(**fields) -> ModelConfig:
    for name in ("d_model", "d_head", "d_mlp", "n_heads", "n_layers"):
        if fields[name] > LIMITS[name][1]:
            raise FlatformerError(
                f"the compiled model needs {name} {fields[name]}, over flatformer's limit of "
                f"{LIMITS[name][1]}; use a smaller vocabulary or max_len"
            )
    cfg = ModelConfig(
        act_fn="relu",
        normalization="none",
        qkv_bias=False,
        attn_out=True,
        unembed_bias=False,
        ln_final=False,
        **fields,
    )
    if cfg.n_params > MAX_PARAMS:  # ModelConfig refuses it first; kept for clarity
        raise FlatformerError(f"the compiled model is over {MAX_PARAMS:,} parameters")
    return cfg


def _embed(tensors, graph: ProgramGraph, res: Residual) -> None:
    """BOS: `one` and `bos`; a token: `one`, its tokens direction and every Full's value;
    position p >= 1: indices p - 1."""
    W_E, W_pos = tensors["embed.W_E"], tensors["pos_embed.W_pos"]
    W_E[0, res.at("one", numerical=True)] = W_E[0, res.at("bos", numerical=True)] = 1.0
    tokens = [(i + 1, v) for i, v in enumerate(graph.vocab)]
    for node in graph.order:
        e = node.expr
        if isinstance(e, r.TokensType):
            for row, v in tokens:
                _write(W_E[row], res, node, v)
        elif isinstance(e, r.IndicesType):
            for p in range(graph.max_len):
                _write(W_pos[p + 1], res, node, p)
        elif isinstance(e, r.Full):
            for row, _ in tokens:
                _write(W_E[row], res, node, e.fill)
    W_E[1 : len(graph.vocab) + 1, res.at("one", numerical=True)] = 1.0


def _write(row: np.ndarray, res: Residual, node: Node, value) -> None:
    """Make `node` read `value` in this embedding row: its number, or its value's direction."""
    if node.numerical:
        row[res.at(node.label, numerical=True)] = float(value)
    else:
        row[res.at(node.label, value)] = 1.0


def _mlp(tensors, model: CompiledProgram, name: str, parts, res: Residual) -> None:
    """The units of one MLP sublayer side by side, each switched off at BOS."""
    if not parts:
        return
    W_in, b_in, W_out = tensors[name + ".W_in"], tensors[name + ".b_in"], tensors[name + ".W_out"]
    bos = res.at("bos", numerical=True)
    u = 0
    for label, units in parts:
        model.mlps.setdefault(name, []).append([label, u, u + len(units)])
        for unit in units:
            gate = 1.0 + abs(unit.bias)
            for d, w in unit.inputs.items():
                W_in[d, u] += w
                gate += abs(w) * res.directions[d].bound
            W_in[bos, u] -= gate
            b_in[u] = unit.bias
            for d, w in unit.outputs.items():
                W_out[u, d] += w
            u += 1
