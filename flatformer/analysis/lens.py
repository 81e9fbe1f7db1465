"""The logit lens, and the logits split into what each stage writes.

The residual stream is a sum: token embedding + position embedding + every attention output +
every MLP output. Without a final LayerNorm (`ln_final`), logits are that sum times W_U, plus
b_U (with `pre_ln` the LayerNorms sit inside the attention and MLP branches, before they read the
stream, never between the stream and W_U), so reading the stream after any stage with W_U is
exactly what the model would output if it stopped there, and the stage contributions add up to
the logits exactly. With `ln_final` the lens applies the final LayerNorm to each stage's stream
(recomputing its scale, as TransformerLens's `apply_ln=True`), which is again exactly what the
model would output if it stopped there; the decomposition freezes the final scale of the full
forward pass, which makes the LayerNorm linear, and adds its bias as its own term.
"""

from __future__ import annotations

import numpy as np

from ..readout import Hooks, by_length, kl_divergence, unembed, write_heads
from ..readout.landscape import frozen_norm
from ..model.transformer import Transformer

EXACT_NOTE = "exact: no final LayerNorm, the stream goes straight into W_U"
EXACT_NOTE_LN = (
    "exact: the LayerNorms sit inside the attention and MLP branches; there is no "
    "final LayerNorm, the stream goes straight into W_U"
)
FINAL_LN_NOTE = (
    "with the final LayerNorm: the lens recomputes it on each stage's stream; the "
    "decomposition freezes its scale at the full forward pass's"
)


def lens_note(model: Transformer) -> str:
    """What the report says about LayerNorm and the lens."""
    if model.cfg.ln_final:
        return FINAL_LN_NOTE
    return EXACT_NOTE_LN if model.cfg.normalization == "pre_ln" else EXACT_NOTE


def stage_names(model: Transformer) -> list[tuple[str, str]]:
    """(stage label, activation holding the stream after it), in forward order."""
    stages = [("embed", "blocks.0.hook_resid_pre")]
    for layer in range(model.cfg.n_layers):
        if model.cfg.attn_only:
            stages.append((f"{layer}.attn", f"blocks.{layer}.hook_resid_post"))
        elif model.cfg.parallel_attn_mlp:  # the stream holds attention and the MLP together
            stages.append((f"{layer}.attn+mlp", f"blocks.{layer}.hook_resid_post"))
        else:
            stages += [
                (f"{layer}.attn", f"blocks.{layer}.hook_resid_mid"),
                (f"{layer}.mlp", f"blocks.{layer}.hook_resid_post"),
            ]
    return stages


def logit_lens(model: Transformer, tokens, hooks: Hooks | None = None) -> dict[str, np.ndarray]:
    """{stage: logits (B, T, V)} read off the stream after the embeddings, each attention and
    each MLP. The last stage is the model's output."""
    _, cache = model.run_with_cache(tokens, hooks)
    return {label: unembed(model, cache[name]) for label, name in stage_names(model)}


def contributions(model: Transformer, tokens, by_head: bool = True) -> dict[str, np.ndarray]:
    """{term: logits (B, T, V)} whose sum is the model's logits.

    Terms, in forward order: `embed` (W_E), `pos` (W_pos, when positions enter the stream:
    not rotary or shortformer positions), per layer each head (`L.head h`, or
    `L.attn` with `by_head=False`), `L.attn bias` (b_O) with `attn_out_bias`, `L.mlp` (the neurons, post @ W_out) and `L.mlp bias`
    (b_out) unless the blocks are attention-only, `ln_final bias` with a final LayerNorm, then
    `bias` (b_U) when the model has one. Without W_O, head h writes its z into its own d_head
    slice of the stream. With a final LayerNorm each stream term x is read as
    (x - mean(x)) / scale * w (RMSNorm: x / scale * w), with the scale of the full forward
    pass.
    """
    cfg, t = model.cfg, model.params
    _, cache = model.run_with_cache(tokens)
    W_U = t["unembed.W_U"][0]
    if cfg.ln_final:
        scale, gain = cache["ln_final.hook_scale"], t["ln_final.w"][0]

        def read(x):
            return frozen_norm(cfg, x, gain, scale) @ W_U
    else:

        def read(x):
            return x @ W_U

    terms = {"embed": read(cache["hook_embed"])}
    if not (cfg.rotary or cfg.shortformer):  # else positions never reach the stream
        terms["pos"] = read(cache["hook_pos_embed"])
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        if by_head:
            W_O = t[b + "attn.W_O"][0] if cfg.attn_out else None
            written = write_heads(cfg, cache[b + "attn.hook_z"], W_O)  # (B, T, H, d)
            for h in range(cfg.n_heads):
                terms[f"{layer}.head {h}"] = read(written[:, :, h])
            if cfg.attn_out_bias:  # b_O belongs to no one head: a term of its own
                terms[f"{layer}.attn bias"] = read(
                    np.broadcast_to(t[b + "attn.b_O"][0], written.shape[:2] + (cfg.d_model,))
                )
        else:
            terms[f"{layer}.attn"] = read(cache[b + "hook_attn_out"])
        if cfg.attn_only:
            continue
        post = cache[b + "mlp.hook_post"]
        terms[f"{layer}.mlp"] = read(post @ t[b + "mlp.W_out"][0])
        terms[f"{layer}.mlp bias"] = read(
            np.broadcast_to(t[b + "mlp.b_out"][0], post.shape[:2] + (cfg.d_model,))
        )
    if cfg.ln_final and cfg.norm_kind == "ln":  # RMSNorm has no bias
        terms["ln_final bias"] = np.broadcast_to(t["ln_final.b"][0] @ W_U, terms["embed"].shape)
    if cfg.unembed_bias:
        terms["bias"] = np.broadcast_to(t["unembed.b_U"][0], terms["embed"].shape)
    return terms


def lens_summary(model: Transformer, prompts) -> list[dict]:
    """Per stage, over the prompts' last positions: how often the lens's top token is the model's
    final top token, and the mean KL(final || lens) in nats."""
    rows = []
    per_stage: dict[str, list] = {}
    for _, batch in by_length(prompts):
        for label, logits in logit_lens(model, batch).items():
            per_stage.setdefault(label, []).append(logits[:, -1])
    stages = {label: np.concatenate(parts) for label, parts in per_stage.items()}
    final = list(stages.values())[-1]
    for label, logits in stages.items():
        rows.append(
            {
                "stage": label,
                "agrees": float((logits.argmax(-1) == final.argmax(-1)).mean()),
                "kl": float(kl_divergence(final, logits).mean()),
            }
        )
    return rows
