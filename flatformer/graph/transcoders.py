"""One transcoder per MLP (Dunefsky, Chlenski & Nanda 2024): a sparse ReLU map from the MLP's
input (after its LayerNorm) to its output, f = ReLU(x W_enc + b_enc), out = f W_dec + b_dec.
Trained with flatformer's dictionaries (flatformer/dictionary), kept on disk in SAELens's
transcoder format, one folder per block (`blocks.L`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dictionary.activations import read, transcoder_hooks, windows
from ..dictionary.metrics import reconstruction_metrics
from ..dictionary.saelens import load_saelens, save_saelens, saelens_cfg
from ..dictionary.train import Recipe, train_stack
from ..engine.components import linear
from ..errors import FlatformerError

# The defaults `flatformer graph` trains with when a run has none: wide enough for the paper's
# 32-unit MLPs, an L1 that keeps a few features per token.
WIDTH, L1, STEPS = 32, 0.3, 2000
READ_BYTES = 2**30  # the MLP inputs and outputs read in one pass over the windows


@dataclass
class Transcoder:
    """Block `layer`'s transcoder: W_enc (d, m), b_enc (m,), W_dec (m, d), b_dec (d,), reading
    `hook_in` and standing in for `hook_out` (blocks.L.hook_mlp_out)."""

    layer: int
    W_enc: np.ndarray
    b_enc: np.ndarray
    W_dec: np.ndarray
    b_dec: np.ndarray
    hook_in: str
    hook_out: str

    @property
    def width(self) -> int:
        return self.W_enc.shape[1]

    def pre(self, x: np.ndarray) -> np.ndarray:
        """Pre-activations x W_enc + b_enc (..., m)."""
        return linear(x, self.W_enc, self.b_enc)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Feature activations ReLU(x W_enc + b_enc) (..., m)."""
        return np.maximum(self.pre(x), 0.0)

    def decode(self, f: np.ndarray) -> np.ndarray:
        """The MLP output it reconstructs, f W_dec + b_dec (..., d)."""
        return linear(f, self.W_dec, self.b_dec)

    def weights(self) -> dict[str, np.ndarray]:
        return {"W_enc": self.W_enc, "b_enc": self.b_enc, "W_dec": self.W_dec, "b_dec": self.b_dec}


def mlp_layers(cfg) -> list[int]:
    return [] if cfg.attn_only else list(range(cfg.n_layers))


def train_transcoders(
    run,
    step: int | None = None,
    width: int = WIDTH,
    l1: float = L1,
    steps: int = STEPS,
    n_train: int = 500,
    seed: int = 0,
    progress=None,
) -> tuple[list[Transcoder], list[dict]]:
    """A ReLU transcoder for every MLP of the run, trained on its training windows (flatformer's
    dictionary recipe), and each one's reconstruction metrics on the held-out windows."""
    model = run.model(step)
    data = windows(run, n_train)
    out, metrics = [], []
    layers = mlp_layers(model.cfg)
    hooks = {layer: transcoder_hooks(model, f"blocks.{layer}.hook_mlp_out") for layer in layers}
    # Several MLPs' activations from one pass over the windows (a long context's passes are
    # most of the time), as many as READ_BYTES holds.
    tokens = data["train"].size + data["eval"].size
    together = max(1, READ_BYTES // (2 * tokens * model.cfg.d_model * 8))
    acts = held = {}
    for i, layer in enumerate(layers):
        hook_in, hook_out = hooks[layer]
        if hook_in not in acts:
            group = [h for later in layers[i : i + together] for h in hooks[later]]
            acts = read(model, data["train"], sorted(set(group)))
            held = read(model, data["eval"], sorted(set(group)))

        def report(j, n, message, i=i):
            if progress:
                progress(i * n + j, len(layers) * n, f"block {layer}: {message}")

        recipe = Recipe(steps=steps, seed=seed)
        stack, _ = train_stack(
            "relu", acts[hook_in], acts[hook_out], [width], None, [l1], recipe, report
        )
        w = stack.member(0)
        tc = Transcoder(layer, w["W_enc"], w["b_enc"], w["W_dec"], w["b_dec"], hook_in, hook_out)
        f = tc.encode(held[hook_in])
        metrics.append({"layer": layer, **reconstruction_metrics(held[hook_out], tc.decode(f), f)})
        out.append(tc)
    return out, metrics


def fit_transcoders(
    model, tokens, layers, width: int = WIDTH, l1: float = L1, steps: int = STEPS
) -> tuple[list[Transcoder], list[float]]:
    """A ReLU transcoder for each MLP in `layers`, trained on the activations of `tokens`
    (B, T) (a compiled program's every input, say), and each one's FVU on them."""
    _, cache = model.run_with_cache(tokens)
    out, fvu = [], []
    for layer in layers:
        hook_in, hook_out = transcoder_hooks(model, f"blocks.{layer}.hook_mlp_out")
        x = cache[hook_in].reshape(-1, model.cfg.d_model)
        y = cache[hook_out].reshape(-1, model.cfg.d_model)
        stack, _ = train_stack("relu", x, y, [width], None, [l1], Recipe(steps=steps))
        w = stack.member(0)
        tc = Transcoder(layer, w["W_enc"], w["b_enc"], w["W_dec"], w["b_dec"], hook_in, hook_out)
        f = tc.encode(x)
        fvu.append(reconstruction_metrics(y, tc.decode(f), f)["fvu"])
        out.append(tc)
    return out, fvu


def save_transcoders(transcoders: list[Transcoder], folder, model_name: str = "") -> Path:
    """One SAELens transcoder folder per block, `folder/blocks.L`, in float64."""
    folder = Path(folder)
    for tc in transcoders:
        cfg = saelens_cfg(
            "relu", tc.weights(), tc.hook_in, tc.hook_out, dtype="float64", model_name=model_name
        )
        save_saelens(folder / f"blocks.{tc.layer}", cfg, tc.weights())
    return folder


BLOCK = re.compile(r"blocks\.([0-9]+)\.hook_mlp_out")


def load_transcoders(folder, model) -> list[Transcoder]:
    """The transcoders in `folder`: every SAELens transcoder folder in it (any name), placed by
    the MLP output it stands in for; every MLP of `model` must have exactly one."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FlatformerError(f"--transcoders {folder} is not a folder")
    found: dict[int, Transcoder] = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "cfg.json").is_file()):
        cfg, w = load_saelens(sub)
        if cfg.get("architecture") != "transcoder":
            continue
        meta = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
        match = BLOCK.fullmatch(str(meta.get("hook_name_out", "")))
        if match is None:
            raise FlatformerError(f"{sub}: a transcoder must write blocks.L.hook_mlp_out")
        layer = int(match.group(1))
        if layer in found:
            raise FlatformerError(f"{folder} holds two transcoders for block {layer}")
        hook_in, hook_out = transcoder_hooks(model, f"blocks.{layer}.hook_mlp_out")
        if meta.get("hook_name") != hook_in:
            raise FlatformerError(
                f"{sub} reads {meta.get('hook_name')!r}; block {layer}'s MLP reads {hook_in}"
            )
        d = model.cfg.d_model
        if w["W_enc"].shape[0] != d or w["W_dec"].shape[1] != d:
            raise FlatformerError(
                f"{sub} maps {w['W_enc'].shape[0]} -> {w['W_dec'].shape[1]}; "
                f"the model's MLPs map {d} -> {d}"
            )
        found[layer] = Transcoder(
            layer, w["W_enc"], w["b_enc"], w["W_dec"], w["b_dec"], hook_in, hook_out
        )
    missing = [L for L in mlp_layers(model.cfg) if L not in found]
    if missing:
        raise FlatformerError(f"{folder} has no transcoder for block {missing[0]}'s MLP")
    return [found[L] for L in mlp_layers(model.cfg)]
