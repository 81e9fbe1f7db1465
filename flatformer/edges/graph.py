"""The computational graph of a model as senders, receivers and edges, and the forward and
backward passes with any set of edges ablated.

Nodes (ACDC's, Conmy et al. 2023, "Towards Automated Circuit Discovery for Mechanistic
Interpretability"): the token embedding `tok`, the position embedding `pos`, every attention
head `aL.H`, every MLP `mL` and the `logits`. A head reads the residual stream three times, so it
has three receivers `aL.H.q`, `aL.H.k`, `aL.H.v`; an MLP and the logits have one receiver each,
named like the node. An edge `(sender, receiver)` is the sender's output as the receiver reads it
through the residual stream, whose value at a receiver is the sum of the outputs of every node
before it. This is exact: every LayerNorm (pre-LN blocks, the final one) sits inside the
receiver that reads through it, never on the stream itself.

Edge masks batch the ablations: a mask m (E, n_edges) gives E variants of the model, in which
receiver r reads x_r = sum over its edges e = (s, r) of ref_s + m_e (out_s - ref_s), where out_s
is the sender's output in that variant and ref_s its ablated value (zero, a mean, or its output
on a corrupted prompt). m_e = 1 keeps the edge, 0 ablates it, and values in between lie on the
straight line from the ablated to the clean activation (EAP-IG's path). Every edge's ablation is
a row of one batched forward pass; `backward` gives d metric / d x_r for every receiver and
d metric / d m_e for every edge in one pass.

The newer architectures compute with the engine's own components (RMSNorm, rotary, the gated
and SoLU MLPs, local layers' masks). Rotary and shortformer positions are not on the stream, so
such a model has no `pos` node (each head turns, or adds W_pos to, its own q and k); a parallel
block's MLP reads the stream its layer's heads read; a grouped head keeps its own k and v
receivers, computed with its group's weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config import attn_weight
from ..engine.components import (
    attention,
    attention_backward,
    embed,
    gated_mlp,
    gated_mlp_backward,
    layer_norm,
    layer_norm_backward,
    mlp,
    mlp_backward,
    pos_embed,
    rms_norm,
    rms_norm_backward,
    rotary,
    rotary_backward,
    rotary_tables,
    solu_mlp,
    solu_mlp_backward,
)
from ..engine.model import attention_bias
from ..model.transformer import Transformer


@dataclass
class Trace:
    """What `EdgeGraph.forward` keeps for `backward`."""

    masks: np.ndarray
    refs: dict
    edge_refs: dict = field(default_factory=dict)  # edge index -> its own ablated value
    outs: dict = field(default_factory=dict)  # sender -> output (E or 1, B, T, d)
    saved: dict = field(default_factory=dict)  # node -> intermediates
    shape: tuple = ()  # (E, B, T, d)
    positions: tuple | None = None  # (rows, index) the logits were read at


class EdgeGraph:
    """The edge graph of one model (a `Transformer`), with edge-masked forward and backward."""

    def __init__(self, model: Transformer):
        cfg = model.cfg
        self.cfg, self.t = cfg, model.tensors
        self.mlp = [f"blocks.{L}.mlp.W_in" in self.t for L in range(cfg.n_layers)]
        self.final_ln = "ln_final.w" in self.t
        # Rotary positions turn q and k; shortformer positions are added to q and k's inputs:
        # neither is in the stream, so neither is a sender (each head computes them itself).
        in_stream = not (cfg.rotary or cfg.shortformer)
        senders, receivers, edges = ["tok", "pos"] if in_stream else ["tok"], [], []
        for L in range(cfg.n_layers):
            before = senders
            heads = [f"a{L}.{h}" for h in range(cfg.n_heads)]
            for head in heads:
                for kind in "qkv":
                    receivers.append(f"{head}.{kind}")
                    edges += [(s, f"{head}.{kind}") for s in senders]
            senders = senders + heads
            if self.mlp[L]:
                # A parallel block's MLP reads the stream its heads read, not their outputs.
                readers = before if cfg.parallel_attn_mlp else senders
                receivers.append(f"m{L}")
                edges += [(s, f"m{L}") for s in readers]
                senders = senders + [f"m{L}"]
        receivers.append("logits")
        edges += [(s, "logits") for s in senders]
        self.senders, self.receivers, self.edges = senders, receivers, edges
        self.nodes = senders + ["logits"]
        # The attention output biases b_O (imported models) belong to no head: they are in the
        # stream whatever is ablated, so each receiver reads the sum of those before it.
        self.bias_before = {r: self._bias_before(r) for r in receivers}
        self.into = {r: [(e, s) for e, (s, d) in enumerate(edges) if d == r] for r in receivers}

    def _bias_before(self, r: str):
        node = self.node_of(r)
        after_heads = node[0] == "m" and not self.cfg.parallel_attn_mlp
        layers = (
            self.cfg.n_layers if node == "logits" else int(node[1:].split(".")[0]) + after_heads
        )
        biases = [
            self.t[f"blocks.{L}.attn.b_O"]
            for L in range(layers)
            if f"blocks.{L}.attn.b_O" in self.t
        ]
        return sum(biases) if biases else None

    @property
    def n_edges(self) -> int:
        """How many edges the graph has: the length of every mask row."""
        return len(self.edges)

    def edge_index(self, src: str, dst: str) -> int:
        """The position of edge (`src`, `dst`) in `edges`, and so in every mask row."""
        return self.edges.index((src, dst))

    @staticmethod
    def node_of(receiver: str) -> str:
        """The node a receiver belongs to: `a0.1.q` -> `a0.1`; `m0` and `logits` are their own."""
        return receiver[:-2] if receiver.endswith((".q", ".k", ".v")) else receiver

    def zero_refs(self) -> dict:
        return {s: np.zeros(self.cfg.d_model) for s in self.senders}

    def _read(self, r, tr: Trace, at=None):
        """Receiver r's input in every variant, (E, B, T, d), or (E, R, d) at `at` = (rows,
        index) only: the sum over its senders of the sender's output where the edge is kept
        (mask 1) and its ablated value where not (mask 0), i.e. ref + mask (out - ref).

        The terms that are the same in every variant (the ablated values, and the outputs of
        the embeddings or of a single-variant pass) go through one product with their masks;
        only the outputs that differ between variants take passes over the whole array."""
        E, B, T, d = tr.shape

        def part(a):  # broadcast to (1 or E, B, T, d); at `at`: (1 or E, R, d)
            a = np.asarray(a)
            a = np.broadcast_to(a, (a.shape[0] if a.ndim == 4 else 1, B, T, d))
            return a if at is None else a[:, at[0], at[1]]

        bias = self.bias_before[r]
        base, edges, terms, varying = (0.0 if bias is None else bias), [], [], []
        for e, s in self.into[r]:  # the ablated values are the same in every variant
            ref, out = part(tr.edge_refs.get(e, tr.refs[s])), part(tr.outs[s])
            base = base + ref
            edges.append(e)
            if out.shape[0] == 1:
                terms.append((out - ref).reshape(-1))
            else:  # mask (out - ref) as mask out - mask ref
                terms.append(-ref.reshape(-1))
                varying.append((e, out))
        shape = (E, B, T, d) if at is None else (E, len(at[0]), d)
        weights = np.concatenate([tr.masks[:, edges], np.ones((E, 1))], axis=1)
        x = (weights @ np.stack([*terms, base.reshape(-1)])).reshape(shape)
        scratch = np.empty(shape) if varying else None
        for e, out in varying:
            x += np.multiply(out, tr.masks[:, e].reshape(E, *[1] * (len(shape) - 1)), out=scratch)
        return x

    def forward(
        self, tokens, refs: dict, masks, positions=None, edge_refs: dict | None = None
    ) -> tuple[np.ndarray, Trace]:
        """Logits of E variants: (E, B, T, V), or (E, R, V) at the R `positions` = (rows,
        index), prompt rows[i] at position index[i].

        `tokens` (B, T); `refs` maps every sender to its ablated output, broadcastable to
        (B, T, d); `masks` (E, n_edges), 1 = edge kept; `edge_refs` gives single edges an
        ablated value of their own (path patching).
        """
        cfg, t = self.cfg, self.t
        tokens = np.asarray(tokens)
        B, T = tokens.shape
        d = cfg.d_model
        masks = np.atleast_2d(np.asarray(masks, dtype=float))
        tr = Trace(masks, refs, edge_refs or {}, shape=(len(masks), B, T, d))
        tr.outs["tok"] = embed(t["embed.W_E"], tokens)[None]
        if "pos" in self.senders:
            tr.outs["pos"] = pos_embed(t["pos_embed.W_pos"], tokens[None])
        for L in range(cfg.n_layers):
            b = f"blocks.{L}."
            # Only the logits (and a last MLP, there too) read the last layer's heads: with
            # `positions` each of them attends from the query at the position alone.
            at, mask = self._queries(positions if L == cfg.n_layers - 1 else None, T, L)
            for h in range(cfg.n_heads):
                head = f"a{L}.{h}"
                saved, qkv = {}, []
                for kind in "qkv":
                    x = self._read(f"{head}.{kind}", tr, at if kind == "q" else None)
                    if kind == "q" and at is not None:
                        x = x[:, :, None]  # (E, B, 1, d): one query each
                    if cfg.pre_norm:
                        x, *saved["ln_" + kind] = self._norm(x, b + "ln1")
                    where = at if kind == "q" else None
                    if cfg.shortformer and kind in "qk":  # positions join q and k's inputs
                        x = x + self._positions(T, where)
                    W, bias = self._qkv_weights(L, h, kind)
                    y = x @ W
                    if bias is not None:
                        y = y + bias
                    if cfg.rotary and kind in "qk":
                        y = rotary(y, *self._angles(T, where), cfg.rotary_adjacent_pairs)
                    if kind != "q" and at is not None:
                        y = y[:, at[0]]  # each query's prompt (a prompt may be read at many)
                    qkv.append(y)
                q, k, v = qkv
                z, pattern = attention(q, k, v, mask, coeff=cfg.attn_coeff)
                saved.update(q=q, k=k, v=v, pattern=pattern, bias=mask)
                tr.saved[head] = saved
                out = self._head_out(z, L, h)
                tr.outs[head] = out if at is None else self._scatter(out[:, :, 0], at, tr.shape)
            if self.mlp[L]:
                # Only the logits read the last MLP: with `positions` it runs there alone.
                only_there = positions is not None and L == cfg.n_layers - 1
                x = self._read(f"m{L}", tr, positions if only_there else None)
                saved = {}
                if cfg.pre_norm:
                    x, *saved["ln"] = self._norm(x, b + "ln2")
                out, saved["mlp"] = self._mlp(x, L)
                saved["x"] = x
                tr.saved[f"m{L}"] = saved
                if only_there:
                    out = self._scatter(out, positions, tr.shape)
                tr.outs[f"m{L}"] = out
        x = self._read("logits", tr, positions)
        tr.positions = positions
        if self.final_ln:
            x, *tr.saved["logits"] = self._norm(x, "ln_final")
        logits = x @ t["unembed.W_U"]
        if "unembed.b_U" in t:
            logits = logits + t["unembed.b_U"]
        return logits, tr

    def _queries(self, positions, T, L=0):
        """The queries layer L attends from: every position, with the engine's attention bias
        (T, T) (the causal mask, a local layer's window, or zeros for a model that attends
        both ways); or with `positions` = (rows, index) the one at index[b] of each prompt b,
        with its row of the bias (B, 1, T)."""
        if positions is None:
            return None, attention_bias(self.cfg, T, np.float64, layer=L)
        return positions, attention_bias(self.cfg, T, np.float64, positions[1], L)[:, None]

    def _norm(self, x, name):
        """The engine's LayerNorm (or RMSNorm) `name` on x: (y, x_hat, scale)."""
        t, cfg = self.t, self.cfg
        if cfg.norm_kind == "rms":
            return rms_norm(x, t[name + ".w"], cfg.eps)
        return layer_norm(x, t[name + ".w"], t[name + ".b"], cfg.eps)

    def _norm_backward(self, dy, saved, name):
        """dx through `_norm`, given its saved (x_hat, scale)."""
        backward = rms_norm_backward if self.cfg.norm_kind == "rms" else layer_norm_backward
        return backward(dy, *saved, self.t[name + ".w"])[0]

    def _qkv_weights(self, L, h, kind):
        """W and b (or None) head h of layer L computes its `kind` (q, k, v) with: grouped keys
        and values are those of the head's group, h // (n_heads / n_kv_heads)."""
        cfg, b = self.cfg, f"blocks.{L}."
        w = kind.upper()
        i = h if kind == "q" else h // (cfg.n_heads // cfg.n_kv_heads)
        bias = self.t[b + attn_weight(cfg, w, "b")][i] if cfg.qkv_bias else None
        return self.t[b + attn_weight(cfg, w)][i], bias

    def _positions(self, T, at=None):
        """Shortformer's W_pos rows: (T, d), or (B, 1, d) at the queries `at` = (rows, index)."""
        W_pos = self.t["pos_embed.W_pos"]
        return W_pos[:T] if at is None else W_pos[at[1]][:, None]

    def _angles(self, T, at=None):
        """Rotary positions' (cos, sin): (T, r), or (B, 1, r) at the queries `at`."""
        cfg = self.cfg
        cos, sin = rotary_tables(
            T, cfg.rotated_dims, float(cfg.rotary_base), cfg.rotary_adjacent_pairs
        )
        return (cos, sin) if at is None else (cos[at[1]][:, None], sin[at[1]][:, None])

    def _mlp_weights(self, L):
        b = f"blocks.{L}.mlp."
        return tuple(self.t[b + w] for w in ("W_in", "b_in", "W_out", "b_out"))

    def _mlp(self, x, L):
        """MLP L on x as the engine computes it (plain, gated or SoLU): (out, saved)."""
        cfg, b = self.cfg, f"blocks.{L}.mlp."
        W_in, b_in, W_out, b_out = self._mlp_weights(L)
        if cfg.gated_mlp:
            return gated_mlp(x, self.t[b + "W_gate"], W_in, b_in, W_out, b_out, cfg.act_fn)
        if cfg.act_fn == "solu_ln":
            ln = self.t[b + "ln.w"], self.t[b + "ln.b"]
            return solu_mlp(x, W_in, b_in, *ln, W_out, b_out, cfg.eps)
        return mlp(x, W_in, b_in, W_out, b_out, cfg.act_fn)

    def _mlp_backward(self, dy, x, L, saved):
        """dx through `_mlp`, given its input and what it saved."""
        cfg, b = self.cfg, f"blocks.{L}.mlp."
        W_in, b_in, W_out, b_out = self._mlp_weights(L)
        if cfg.gated_mlp:
            W_gate = self.t[b + "W_gate"]
            return gated_mlp_backward(dy, x, W_gate, W_in, b_in, W_out, b_out, cfg.act_fn, saved)[0]
        if cfg.act_fn == "solu_ln":
            ln = self.t[b + "ln.w"], self.t[b + "ln.b"]
            return solu_mlp_backward(dy, x, W_in, b_in, *ln, W_out, b_out, saved)[0]
        return mlp_backward(dy, x, W_in, b_in, W_out, b_out, cfg.act_fn, saved)[0]

    @staticmethod
    def _scatter(values, positions, shape):
        """(E, R, d) values at (rows, index) of a zero (E, B, T, d) array."""
        full = np.zeros(shape)
        full[:, positions[0], positions[1]] = values
        return full

    @staticmethod
    def _sum_rows(values, rows, B):
        """(E, R, ...) values of readouts from prompts `rows` summed per prompt: (E, B, ...)."""
        full = np.zeros((values.shape[0], B, *values.shape[2:]))
        np.add.at(full, (slice(None), rows), values)
        return full

    def _head_out(self, z, L, h):
        """What head h of layer L writes to the stream: z W_O, or z into its own slice."""
        cfg = self.cfg
        if cfg.attn_out:
            return z @ self.t[f"blocks.{L}.attn.W_O"][h]
        out = np.zeros((*z.shape[:-1], cfg.d_model))
        out[..., h * cfg.d_head : (h + 1) * cfg.d_head] = z
        return out

    def backward(self, tr: Trace, dlogits) -> tuple[dict, np.ndarray]:
        """Given d metric / d logits (shaped like `forward`'s logits): d metric / d x_r for every
        receiver r, (E, B, T, d), and d metric / d m_e for every edge, (E, n_edges)."""
        cfg, t = self.cfg, self.t
        E, B, T, d = tr.shape
        dh = cfg.d_head
        grads, dmask = {}, np.zeros((E, self.n_edges))
        dout = {s: np.zeros(tr.shape) for s in self.senders}

        def send(r):
            for e, s in self.into[r]:
                dout[s] += tr.masks[:, e, None, None, None] * grads[r]
                ref = tr.edge_refs.get(e, tr.refs[s])
                dmask[:, e] = ((tr.outs[s] - ref) * grads[r]).sum((1, 2, 3))

        dx = dlogits @ t["unembed.W_U"].T
        if self.final_ln:
            dx = self._norm_backward(dx, tr.saved["logits"], "ln_final")
        if tr.positions is not None:
            dx = self._scatter(dx, tr.positions, tr.shape)
        grads["logits"] = dx
        send("logits")
        for L in reversed(range(cfg.n_layers)):
            b = f"blocks.{L}."
            at = tr.positions if L == cfg.n_layers - 1 else None
            if self.mlp[L]:
                saved = tr.saved[f"m{L}"]
                only_there = tr.positions is not None and L == cfg.n_layers - 1
                dy = dout[f"m{L}"]
                if only_there:
                    dy = dy[:, tr.positions[0], tr.positions[1]]
                dx = self._mlp_backward(dy, saved["x"], L, saved["mlp"])
                if cfg.pre_norm:
                    dx = self._norm_backward(dx, saved["ln"], b + "ln2")
                grads[f"m{L}"] = self._scatter(dx, tr.positions, tr.shape) if only_there else dx
                send(f"m{L}")
            for h in reversed(range(cfg.n_heads)):
                head = f"a{L}.{h}"
                saved = tr.saved[head]
                dy = dout[head] if at is None else dout[head][:, at[0], at[1]][:, :, None]
                if cfg.attn_out:
                    dz = dy @ t[b + "attn.W_O"][h].T
                else:
                    dz = dy[..., h * dh : (h + 1) * dh]
                dqkv = attention_backward(
                    dz,
                    saved["q"],
                    saved["k"],
                    saved["v"],
                    saved["pattern"],
                    coeff=cfg.attn_coeff,
                    bias=saved["bias"],
                )
                T = tr.shape[2]
                for kind, dy in zip("qkv", dqkv):
                    where = at if kind == "q" else None
                    if kind != "q" and at is not None:
                        dy = self._sum_rows(dy, at[0], B)
                    if cfg.rotary and kind in "qk":
                        dy = rotary_backward(dy, *self._angles(T, where), cfg.rotary_adjacent_pairs)
                    dx = dy @ self._qkv_weights(L, h, kind)[0].T
                    if cfg.pre_norm:
                        dx = self._norm_backward(dx, saved["ln_" + kind], b + "ln1")
                    if kind == "q" and at is not None:
                        dx = self._scatter(dx[:, :, 0], at, tr.shape)
                    grads[f"{head}.{kind}"] = dx
                    send(f"{head}.{kind}")
        return grads, dmask
