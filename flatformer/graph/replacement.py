"""The replacement model of one prompt (Ameisen et al. 2025, "Circuit Tracing", Section 2):
the model's own forward pass (Transformer.run_with_cache) with hooks that

- freeze every attention pattern and every LayerNorm's (or RMSNorm's) scale at their values on
  the prompt (components.layer_norm_frozen, rms_norm_frozen), so that the pass is linear in what
  enters the residual stream (rotary or shortformer positions turn or shift q and k only, which
  the frozen patterns make irrelevant; a gated or SoLU MLP is replaced as any other);
- replace each MLP's output by its transcoder's features, fixed at their activations on the
  prompt, plus b_dec, plus an error node, the real output minus the transcoder's;
- scale each source node (feature, error, token embedding, position embedding) by a coefficient
  per sequence of the batch, so one batched pass runs many interventions at once.

With every coefficient 1 the pass is the real model's on the prompt, to rounding. Source nodes
are ordered as circuit-tracer orders its graph's columns: active features (layer, position,
index, in that order), then error nodes (layer-major), then token embeddings, then (flatformer's
models have them) position embeddings.
"""

from __future__ import annotations

import numpy as np

from ..engine.components import layer_norm_frozen, rms_norm_frozen
from ..errors import FlatformerError
from .transcoders import Transcoder


class Replacement:
    """`model` (a Transformer) on `tokens` (T,) with `transcoders` (one per MLP, in block order)
    standing in for its MLPs. `heads` (a set of (layer, head)) keeps only those heads' paths,
    the others' frozen patterns set to 0 (None: every head): the edges through one head are the
    graph with it minus the graph without."""

    def __init__(self, model, transcoders: list[Transcoder], tokens, heads=None):
        self.model, self.cfg = model, model.cfg
        self.tokens = model.check_tokens(tokens)[0]
        self.T = T = len(self.tokens)
        self.transcoders = {tc.layer: tc for tc in transcoders}
        for L in range(self.cfg.n_layers):
            W_out = model.tensors.get(f"blocks.{L}.mlp.W_out")
            if W_out is not None and L not in self.transcoders and W_out.any():
                raise FlatformerError(
                    f"block {L}'s MLP has no transcoder: the replacement model needs one for "
                    "every MLP that writes anything"
                )
        logits, cache = model.run_with_cache(self.tokens)
        self.logits, self.cache = logits[0], cache  # (T, V); the cache keeps its batch axis
        self.patterns = {
            L: cache[f"blocks.{L}.attn.hook_pattern"][0] for L in range(self.cfg.n_layers)
        }
        self.heads = heads
        self.frozen = {L: p.copy() for L, p in self.patterns.items()}  # what `run` attends with
        for L, p in self.frozen.items():
            for h in range(self.cfg.n_heads):
                if heads is not None and (L, h) not in heads:
                    p[h] = 0.0
        self.scales = {
            n[: -len(".hook_scale")]: cache[n][0] for n in cache if n.endswith(".hook_scale")
        }
        feats, acts, errors = [], [], []
        for L, tc in self.transcoders.items():
            f = tc.encode(cache[tc.hook_in][0])  # (T, m)
            pos, idx = np.nonzero(f)
            feats += [(L, int(p), int(i)) for p, i in zip(pos, idx)]
            acts += f[pos, idx].tolist()
            errors.append(cache[tc.hook_out][0] - tc.decode(f))  # (T, d)
        self.features = np.array(feats, dtype=np.int64).reshape(-1, 3)  # (n_f, 3)
        self.activations = np.array(acts, dtype=np.float64)
        self.errors = np.array(errors).reshape(len(errors), T, self.cfg.d_model)  # (n_L, T, d)
        self.error_layers = list(self.transcoders)
        self.n_features = len(self.features)
        self.n_errors = len(self.error_layers) * T
        self.n_sources = self.n_features + self.n_errors + 2 * T

    # ---- the batched, hooked forward pass ---------------------------------------------------

    def split(self, coef: np.ndarray) -> tuple:
        """(features (B, n_f), errors (B, n_L, T), tokens (B, T), positions (B, T)) of a
        coefficient matrix (B, n_sources)."""
        nf, ne, T = self.n_features, self.n_errors, self.T
        errors = coef[:, nf : nf + ne].reshape(len(coef), -1, T)
        return coef[:, :nf], errors, coef[:, nf + ne : nf + ne + T], coef[:, nf + ne + T :]

    def run(self, coef: np.ndarray):
        """Logits (B, T, V) and the cache of the replacement model with each source node scaled
        by coef (B, n_sources): 1 its value on the prompt, 0 ablated."""
        coef = np.atleast_2d(np.asarray(coef, dtype=np.float64))
        B = len(coef)
        c_feat, c_err, c_tok, c_pos = self.split(coef)
        params = self.model.tensors
        streams: dict[str, np.ndarray] = {}
        hooks = {"hook_embed": lambda x, n: x * c_tok[..., None]}
        if not self.cfg.rotary:  # rotary positions are no node: they turn the frozen q and k
            hooks["hook_pos_embed"] = lambda x, n: x * c_pos[..., None]

        def keep(key):
            def hook(x, n):
                streams[key] = x
                return x

            return hook

        def frozen(ln, key):
            w, scale = params[ln + ".w"], self.scales[ln]
            if self.cfg.norm_kind == "rms":
                return lambda x, n: rms_norm_frozen(streams[key], w, scale)
            b = params[ln + ".b"]
            return lambda x, n: layer_norm_frozen(streams[key], w, b, scale)

        def pattern(L):
            return lambda x, n: np.broadcast_to(self.frozen[L], x.shape)

        def mlp_out(L):
            tc, rows = self.transcoders[L], np.flatnonzero(self.features[:, 0] == L)
            e = self.error_layers.index(L)

            def hook(x, n):
                f = np.zeros((B, self.T, tc.width))
                _, pos, idx = self.features[rows].T
                f[:, pos, idx] = c_feat[:, rows] * self.activations[rows]
                return tc.decode(f) + c_err[:, e, :, None] * self.errors[e]

            return hook

        pre_norm, parallel = self.cfg.pre_norm, self.cfg.parallel_attn_mlp
        for L in range(self.cfg.n_layers):
            b = f"blocks.{L}."
            hooks[b + "attn.hook_pattern"] = pattern(L)
            hooks[b + "hook_resid_pre"] = keep(b + "pre")
            if pre_norm:
                hooks[b + "ln1.hook_normalized"] = frozen(b + "ln1", b + "pre")
            if L in self.transcoders:
                mlp_in = b + "pre" if parallel else b + "mid"  # a parallel MLP reads e
                if not parallel:
                    hooks[b + "hook_resid_mid"] = keep(b + "mid")
                if pre_norm:
                    hooks[b + "ln2.hook_normalized"] = frozen(b + "ln2", mlp_in)
                hooks[b + "hook_mlp_out"] = mlp_out(L)
        if self.cfg.ln_final:
            last = f"blocks.{self.cfg.n_layers - 1}.hook_resid_post"
            hooks[last] = keep("final")
            hooks["ln_final.hook_normalized"] = frozen("ln_final", "final")
        return self.model.run_with_cache(np.broadcast_to(self.tokens, (B, self.T)), hooks)

    # ---- what the targets read ----------------------------------------------------------------

    def feature_inputs(self, cache, rows=None) -> np.ndarray:
        """Pre-activations (B, n) of the active features (all, or `rows` of them) in a cache of
        `run`: each feature's input, x W_enc + b_enc at its block and position."""
        rows = np.arange(self.n_features) if rows is None else np.asarray(rows)
        out = np.zeros((len(next(iter(cache.values()))), len(rows)))
        for L, tc in self.transcoders.items():
            sel = np.flatnonzero(self.features[rows, 0] == L)
            _, pos, idx = self.features[rows[sel]].T
            x = cache[tc.hook_in][:, pos]  # (B, k, d)
            out[:, sel] = np.einsum("bkd,dk->bk", x, tc.W_enc[:, idx]) + tc.b_enc[idx]
        return out

    @staticmethod
    def logit_inputs(logits: np.ndarray, logit_tokens) -> np.ndarray:
        """The logit nodes' inputs (B, k) at the last position: each logit minus the mean logit
        (circuit-tracer's demeaned unembedding direction)."""
        last = logits[:, -1]
        return last[:, logit_tokens] - last.mean(-1, keepdims=True)
