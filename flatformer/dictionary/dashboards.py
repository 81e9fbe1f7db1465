"""What a dictionary's feature dashboards show, computed once here and drawn by the explorer's
dashboards page (explorer/dashboards.js), in the style of Anthropic's "Towards Monosemanticity"
feature browser and Neuronpedia's feature pages (SAELens's `sae_dashboard`):

- per latent, its firing frequency (density) over the run's held-out tokens and its largest
  activation, for the sortable list;
- the top activating contexts: the held-out windows where the latent is largest, with the
  latent's activation at every token of the window (the firing token is the largest);
- the tokens and positions it fires on most, each with its share of the latent's firings
  (`fit.firing`, the table `flatformer dictionary` prints);
- the activation histogram: the latent's nonzero activations over the held-out tokens in
  `BINS` equal bins from 0 to its maximum;
- the logit effect: the decoder direction through the model's direct path to the unembedding,
  `W_dec[i] W_U`, the later blocks left out, as SAELens's dashboards compute the logits
  Neuronpedia shows (SAEDashboard's `to_resid_direction` in `transformer_lens_wrapper.py`,
  then `feature_resid_dir @ W_U`): the decoder direction is first carried into the residual
  stream when the hook is not in it (a head's `hook_z` through `W_O`, `mlp.hook_post` through
  `W_out`), and a final LayerNorm is folded in as TransformerLens's `fold_ln` folds it into the
  `W_U` those dashboards read (the direction centred and scaled by the LayerNorm's weight; its
  1/sigma varies by token and is left out). Where SAEDashboard also treats a LayerNorm's
  output (`hook_normalized`) or `mlp.hook_pre` as writing to the residual stream, we give no
  logit effect: neither is written to it linearly;
- the decoder direction in the plane of the activation it writes (the plane itself when it has
  two dimensions, as the paper's model does; else the first two principal components of the
  held-out activations, `readout.fit_plane`): an arrow from b_dec to b_dec + max_i W_dec[i],
  the reconstruction when the latent alone fires at its largest; and the true feature closest
  to it (largest |cos|) when the caller knows the true features.

The page recomputes every activation it shows from the encoder weights and the input
activations it carries (`inputs`), and compares with `contexts`' numbers: its self-check.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import FlatformerError
from ..readout.plane import fit_plane
from .fit import firing
from .saelens import run_saelens

FORMAT = "flatformer-dashboards-1"
TOP_CONTEXTS = 10  # contexts per latent, as Neuronpedia's top-activations list opens
BINS = 24
TOP_LOGITS = 5
TOP_TOKENS = 5  # the tokens and positions a latent fires on most, with their share
PLANE_POINTS = 400  # held-out activations drawn behind the arrows
MAX_NUMBERS = 4_000_000  # about 80 MB of JSON: what a browser opens in a few seconds
# The page's encoders, by SAELens architecture: a BatchTopK dictionary is saved for inference
# as a JumpReLU with one threshold (saelens.py), which is BatchTopK's inference rule.
ENCODERS = {"standard": "relu", "transcoder": "relu", "topk": "topk", "jumprelu": "jumprelu"}
RESIDUAL = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out")
RESIDUAL += ("hook_mlp_out", "hook_embed", "hook_pos_embed")
NAME = re.compile(r"(?!\.\.?$)[\w.+-]{1,200}")  # a member's folder: a name, never a path


def residual_direction(model, hook: str, W_dec: np.ndarray) -> np.ndarray | None:
    """Decoder rows (m, d_hook) as directions in the residual stream (m, d_model), or None when
    the activation at `hook` does not write to the residual stream linearly."""
    params, cfg = model.tensors, model.cfg
    if hook.endswith(RESIDUAL):
        return W_dec
    if hook.endswith("mlp.hook_post"):
        return W_dec @ params[hook[: -len("hook_post")] + "W_out"]
    if hook.endswith("attn.hook_z"):
        prefix = hook[: -len("attn.hook_z")]
        if f"{prefix}attn.W_O" in params:
            W_O = params[f"{prefix}attn.W_O"]  # (H, dh, d): the heads side by side
            return W_dec @ W_O.reshape(-1, W_O.shape[-1])
        # no W_O (the paper's preset): each head writes its own d_head slice
        return W_dec if W_dec.shape[1] == cfg.d_model else None
    return None


def logit_effect(model, hook: str, W_dec: np.ndarray) -> np.ndarray | None:
    """Each latent's direct effect on the logits (m, vocab_out) per unit of activation (see the
    module's docstring), or None where the hook has none."""
    direction = residual_direction(model, hook, W_dec)
    if direction is None:
        return None
    params = model.tensors
    if "ln_final.w" in params:
        direction = (direction - direction.mean(-1, keepdims=True)) * params["ln_final.w"]
    return direction @ params["unembed.W_U"]


def histogram(values: np.ndarray, bins: int = BINS) -> dict:
    """Counts of the nonzero `values` in `bins` equal bins from 0 to their maximum."""
    on = values[values != 0]
    top = float(on.max()) if on.size else 1.0
    counts, edges = np.histogram(on, bins=bins, range=(0.0, top))
    return {"edges": edges.tolist(), "counts": counts.astype(int).tolist()}


def top_contexts(f: np.ndarray, B: int, T: int, n: int = TOP_CONTEXTS) -> list[tuple[int, int]]:
    """The (window, position) of the n largest positive values of f (B * T,), one per window
    (a latent that fires twice in a window shows the window once, at its largest)."""
    order = np.argsort(-f, kind="stable")
    out, seen = [], set()
    for idx in order:
        if f[idx] <= 0 or len(out) == n:
            break
        b, t = divmod(int(idx), T)
        if b not in seen:
            seen.add(b)
            out.append((b, t))
    return out


def page_encoder(cfg: dict, weights: dict) -> dict:
    """The encoder as the page's sae.js reads it: its kind, weights and threshold or k."""
    arch = cfg.get("architecture")
    if arch not in ENCODERS:
        raise FlatformerError(f"the dashboards page does not draw {arch!r} dictionaries")
    encoder = {
        "kind": ENCODERS[arch],
        "W_enc": weights["W_enc"].tolist(),
        "b_enc": weights["b_enc"].tolist(),
        "b_dec": weights["b_dec"].tolist() if cfg.get("apply_b_dec_to_input", True) else None,
    }
    if arch == "topk":
        encoder["k"] = int(cfg["k"])
    if arch == "jumprelu":
        encoder["threshold"] = weights["threshold"].tolist()
    return encoder


def member_dashboards(
    cfg: dict,
    weights: dict,
    x: np.ndarray,
    y: np.ndarray,
    tokens: np.ndarray,
    windows: dict,
    logits: np.ndarray | None,
    vocab: list[str],
    vocab_out: list[str],
    truth: dict | None = None,
) -> dict:
    """One dictionary's dashboards. x (B * T, d_in) the activations it reads, y (B * T, d_out)
    the ones it writes (x for an autoencoder), tokens (B, T); `windows` maps a window's index to
    its place in the page's `inputs` (filled here). `logits` (m, vocab_out) is `logit_effect`'s."""
    encoder = page_encoder(cfg, weights)
    B, T = tokens.shape
    f, _ = run_saelens(cfg, weights, x)
    W_dec = weights["W_dec"]
    plane = fit_plane(y)
    b_dec = weights["b_dec"] if cfg.get("apply_b_dec_to_input", True) else y.mean(0)
    rng = np.random.default_rng(0)
    shown = rng.choice(len(y), min(PLANE_POINTS, len(y)), replace=False)
    names, directions = list((truth or {}).keys()), np.array(list((truth or {}).values()))
    fires_on = firing(f, tokens, vocab, top=TOP_TOKENS)
    latents = []
    for i in range(f.shape[1]):
        fi = f[:, i]
        contexts = []
        for b, t in top_contexts(fi, B, T):
            windows.setdefault(b, len(windows))
            row = fi[b * T : (b + 1) * T]
            contexts.append({"window": windows[b], "pos": t, "acts": row.tolist()})
        top = float(fi.max()) if fi.size else 0.0
        latent = {
            "index": i,
            "density": float((fi != 0).mean()),
            "max": top,
            "mean": float(fi[fi != 0].mean()) if (fi != 0).any() else 0.0,
            "histogram": histogram(fi),
            "tokens": fires_on[i]["tokens"],
            "positions": fires_on[i]["positions"],
            "contexts": contexts,
            "arrow": plane.project(np.stack([b_dec, b_dec + max(top, 0.0) * W_dec[i]])).tolist(),
        }
        if logits is not None:
            order = np.argsort(-logits[i], kind="stable")
            k = min(TOP_LOGITS, len(order) // 2 or 1)
            latent["logits"] = {  # only tokens it raises, and only tokens it lowers
                "boosted": [
                    [vocab_out[j], float(logits[i, j])] for j in order[:k] if logits[i, j] > 0
                ],
                "suppressed": [
                    [vocab_out[j], float(logits[i, j])] for j in order[::-1][:k] if logits[i, j] < 0
                ],
            }
        if names:
            norm = np.linalg.norm(W_dec[i]) or 1.0
            cos = directions @ W_dec[i] / (np.linalg.norm(directions, axis=1) * norm)
            j = int(np.abs(cos).argmax())
            unit = np.sign(cos[j]) * directions[j] / np.linalg.norm(directions[j])
            end = b_dec + max(top, 0.0) * norm * unit
            latent["truth"] = {
                "name": names[j],
                "cos": float(abs(cos[j])),
                "arrow": plane.project(np.stack([b_dec, end])).tolist(),
            }
        latents.append(latent)
    labels = plane.axis_labels()
    return {
        "d_in": int(weights["W_enc"].shape[0]),
        "d_sae": int(weights["W_enc"].shape[1]),
        "encoder": encoder,
        "latents": latents,
        "plane": {
            "labels": list(labels),
            "points": plane.project(y[shown]).tolist(),
            "tokens": tokens.reshape(-1)[shown].astype(int).tolist(),
        },
    }


def dashboards(
    model,
    members: list[tuple[str, dict, dict]],
    tokens: np.ndarray,
    vocab: list[str],
    vocab_out: list[str],
    title: str,
    truth: dict | None = None,
    metrics: dict | None = None,
) -> dict:
    """The dashboards page's data for dictionaries [(name, cfg, weights)] on `model`, read on
    `tokens` (B, T) (a run's held-out windows). Every member reads the activation its cfg names
    (`metadata.hook_name`, and `hook_name_out` for a transcoder). `truth` maps a true feature's
    name to its direction in the written activation; `metrics` maps a member's name to the
    numbers `flatformer dictionary` measured (shown beside its name)."""
    from .activations import check_hook, read

    hooks = set()
    for name, cfg, _ in members:
        meta = cfg.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("hook_name"), str):
            raise FlatformerError(f"{name}: its cfg.json names no activation (metadata.hook_name)")
        hooks.update(h for h in (meta.get("hook_name"), meta.get("hook_name_out")) if h)
    for hook in sorted(hooks):
        check_hook(model, hook)
    acts = read(model, tokens, sorted(hooks))
    windows: dict[int, int] = {}
    data = []
    for name, cfg, weights in members:
        meta = cfg["metadata"]
        hook_in, hook_out = meta["hook_name"], meta.get("hook_name_out") or meta["hook_name"]
        x, y = acts[hook_in], acts[hook_out]
        if x.shape[1] != weights["W_enc"].shape[0] or y.shape[1] != weights["W_dec"].shape[1]:
            raise FlatformerError(
                f"{name}: reads {weights['W_enc'].shape[0]} and writes "
                f"{weights['W_dec'].shape[1]} numbers; {hook_in} has {x.shape[1]}"
            )
        logits = logit_effect(model, hook_out, weights["W_dec"])
        entry = member_dashboards(
            cfg, weights, x, y, tokens, windows, logits, vocab, vocab_out, truth
        )
        entry.update({"name": name, "hook_in": hook_in, "hook_out": hook_out})
        entry["ln_folded"] = logits is not None and "ln_final.w" in model.tensors
        entry["metrics"] = (metrics or {}).get(name, {})
        data.append(entry)
    order = sorted(windows, key=windows.get)
    T = tokens.shape[1]
    d_ins = {e["hook_in"]: e["d_in"] for e in data}
    numbers = sum(e["d_in"] * e["d_sae"] + len(e["latents"]) * TOP_CONTEXTS * T for e in data)
    numbers += len(order) * T * sum(d_ins.values())
    if numbers > MAX_NUMBERS:
        raise FlatformerError(
            f"the dashboards page would carry {numbers:,} numbers (weights and the activations "
            f"of the contexts shown), more than {MAX_NUMBERS:,}: draw fewer or narrower "
            f"dictionaries (one SAELens folder at a time with flatformer dictionary-page)"
        )
    inputs = {}
    for entry in data:  # each input activation once, for the windows shown
        if entry["hook_in"] not in inputs:
            a = acts[entry["hook_in"]].reshape(len(tokens), T, -1)
            inputs[entry["hook_in"]] = [a[b].tolist() for b in order]
    return {
        "format": FORMAT,
        "title": title,
        "vocab": list(vocab),
        "vocab_out": list(vocab_out),
        "windows": [tokens[b].astype(int).tolist() for b in order],
        "inputs": inputs,
        "dictionaries": data,
    }


def run_dashboards(run, folder, step: int | None = None, truth: dict | None = None) -> dict:
    """The dashboards of every dictionary `flatformer dictionary` wrote in `folder` (its
    metrics.json lists them), or of the one SAELens folder `folder`, on the run's held-out
    windows at checkpoint `step` (default: the step metrics.json names, else the last)."""
    from pathlib import Path

    from ..store.read import read_json
    from .activations import windows
    from .saelens import load_saelens

    folder = Path(folder)
    metrics, kind = {}, None
    if (folder / "metrics.json").is_file():
        summary = read_json(folder / "metrics.json", "dictionary metrics.json", 64 << 20)
        listed = summary.get("members") if isinstance(summary, dict) else None
        if not isinstance(listed, list) or not all(
            isinstance(m, dict) and NAME.fullmatch(str(m.get("name"))) for m in listed
        ):
            raise FlatformerError(f"{folder / 'metrics.json'} lists no dictionaries by name")
        metrics = {m["name"]: m.get("metrics") or {} for m in listed}
        kind = summary.get("kind")
        if step is None and isinstance(summary.get("step"), int):
            step = summary["step"]
        members = [(m["name"], *load_saelens(folder / m["name"])) for m in listed]
    else:
        members = [(folder.name, *load_saelens(folder))]
    if not members:
        raise FlatformerError(f"{folder} holds no dictionary")
    tokens = windows(run, n_train=1)["eval"]
    title = f"{run.path.name} · {folder.name}"
    data = dashboards(
        run.model(step), members, tokens, run.vocab, run.vocab_out, title, truth, metrics
    )
    if kind in ("relu", "topk", "batchtopk", "jumprelu", "transcoder"):
        for entry in data["dictionaries"]:  # a BatchTopK dictionary is saved as a JumpReLU
            entry["kind"] = kind
    return data
