"""Dictionaries on a run: read its activations, train a stack, score each member as SAELens
does, say which latents fire on which token and position, and write SAELens folders plus one
metrics.json. Computing only; `flatformer dictionary` prints."""

from __future__ import annotations

import itertools
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..errors import FlatformerError
from ..store.limits import strict_json
from ..store.write import atomic_write
from .activations import check_hook, read, transcoder_hooks, windows
from .metrics import reconstruction_metrics, spliced_scores
from .saelens import save_saelens, saelens_cfg
from .sae import Stack, decode, encode
from .train import Recipe, train_stack
from .truth import truth_report
from ..rasp.run import known_features

COMMAND_KINDS = ("relu", "topk", "batchtopk", "jumprelu", "transcoder")


def members(kind: str, widths, ks, coefs) -> tuple[list, list, list]:
    """Every combination of the widths with the ks (TopK kinds) or coefficients (the others)."""
    widths = [int(w) for w in widths]
    if any(w < 1 for w in widths):
        raise FlatformerError("--width must be at least 1")
    if kind in ("topk", "batchtopk"):
        grid = list(itertools.product(widths, [int(k) for k in ks]))
        if any(not 1 <= k <= w for w, k in grid):
            raise FlatformerError("--k must be at least 1 and at most every --width")
        return [w for w, _ in grid], [k for _, k in grid], [0.0] * len(grid)
    grid = list(itertools.product(widths, [float(c) for c in coefs]))
    if any(c < 0 for _, c in grid):
        raise FlatformerError("--l1 must be at least 0")
    return [w for w, _ in grid], [0] * len(grid), [c for _, c in grid]


def member_name(stack: Stack, s: int, transcoder: bool) -> str:
    kind = "transcoder" if transcoder else stack.kind
    if stack.kind in ("topk", "batchtopk"):
        return f"{kind}-w{int(stack.width[s])}-k{int(stack.k[s])}"
    return f"{kind}-w{int(stack.width[s])}-c{float(stack.coef[s]):g}"


def firing(f: np.ndarray, tokens: np.ndarray, vocab: list[str], top: int = 3) -> list[dict]:
    """Per latent: how often it fires over the evaluation tokens, and the tokens and positions it
    fires on most (with the share of its firings each takes). f (B * T, m), tokens (B, T)."""
    B, T = tokens.shape
    tok, pos = tokens.reshape(-1), np.tile(np.arange(T), B)
    rows = []
    for i in range(f.shape[1]):
        on = f[:, i] != 0
        n = int(on.sum())
        row = {
            "latent": i,
            "density": n / len(on),
            "mean_activation": float(f[on, i].mean()) if n else 0.0,
        }
        for key, ids, names in (("tokens", tok, vocab), ("positions", pos, None)):
            counts = np.bincount(ids[on], minlength=len(names) if names else T)
            order = np.argsort(-counts, kind="stable")[:top]
            row[key] = [
                [names[j] if names else int(j), round(float(counts[j] / max(n, 1)), 4)]
                for j in order
                if counts[j]
            ]
        rows.append(row)
    return rows


def fit_run(
    run,
    hook: str,
    kind: str = "topk",
    widths=(16,),
    ks=(1,),
    coefs=(1.0,),
    recipe: Recipe | None = None,
    step: int | None = None,
    n_train: int = 2000,
    progress=None,
) -> dict:
    """Train dictionaries of every width x k (or width x coefficient) on the run's activations at
    `hook` and score them on its held-out windows. Returns {"stack", "members": [...], ...}."""
    if kind not in COMMAND_KINDS:
        raise FlatformerError(f"--kind must be one of {', '.join(COMMAND_KINDS)}, got {kind!r}")
    model = run.model(step)
    check_hook(model, hook)
    transcoder = kind == "transcoder"
    base = "relu" if transcoder else kind
    hook_in, hook_out = transcoder_hooks(model, hook) if transcoder else (hook, hook)
    w, k, c = members(base, widths, ks, coefs)
    data = windows(run, n_train)
    if progress:
        progress(0, 1, "reading activations")
    acts = read(model, data["train"], sorted({hook_in, hook_out}))
    x, y = acts[hook_in], (acts[hook_out] if transcoder else None)
    stack, history = train_stack(base, x, y, w, k, c, recipe, progress=progress)
    held = read(model, data["eval"], sorted({hook_in, hook_out}))
    f_all = encode(stack, held[hook_in])
    out_all = decode(stack, f_all)
    truth = known_features(run, hook_out)  # a compiled program's variables, where present
    results = []
    for s in range(stack.size):
        m = int(stack.width[s])
        f = f_all[s][:, :m]
        metrics = reconstruction_metrics(held[hook_out], out_all[s], f)

        def reconstruct(a, s=s):
            flat = a.reshape(-1, stack.W_enc.shape[1])
            return decode(stack, encode(stack, flat))[s]

        for ablation in ("zero", "mean"):
            scores = spliced_scores(
                model,
                data["eval"],
                data["targets"],
                data["weights"],
                hook_in,
                hook_out,
                reconstruct,
                ablation,
                mean=held[hook_out].mean(0),
            )
            scores.pop("ablation")
            metrics.update(
                {
                    f"{n}" if ablation == "zero" else f"{n}_mean_ablation": v
                    for n, v in scores.items()
                }
            )
        if truth:
            decoder = stack.member(s)["W_dec"]
            metrics["truth"] = truth_report(decoder, np.stack(list(truth.values())))
        results.append(
            {
                "name": member_name(stack, s, transcoder),
                "width": m,
                "k": int(stack.k[s]) if base in ("topk", "batchtopk") else None,
                "coef": float(stack.coef[s]) if base not in ("topk", "batchtopk") else None,
                "metrics": metrics,
                "latents": firing(f, data["eval"], run.vocab),
            }
        )
    return {
        "stack": stack,
        "kind": kind,
        "hook_in": hook_in,
        "hook_out": hook_out,
        "step": run.resolve_step(step),
        "recipe": asdict(recipe or Recipe()),
        "history": history,
        "members": results,
        "train_tokens": int(x.shape[0]),
        "eval_tokens": int(held[hook_in].shape[0]),
    }


def write_result(result: dict, out, run, dtype: str = "float32") -> Path:
    """One SAELens folder per member under `out`, and `out/metrics.json` with every member's
    metrics, latents and the training history."""
    out = Path(out)
    stack = result["stack"]
    transcoder = result["kind"] == "transcoder"
    for s, member in enumerate(result["members"]):
        cfg = saelens_cfg(
            stack.kind,
            stack.member(s),
            result["hook_in"],
            result["hook_out"] if transcoder else None,
            k=member["k"],
            dtype=dtype,
            model_name=str(run.path.name),
            context_size=run.cfg.n_ctx,
        )
        save_saelens(out / member["name"], cfg, stack.member(s))
    summary = {k: v for k, v in result.items() if k != "stack"}
    summary["run"] = str(run.path)
    atomic_write(out / "metrics.json", (strict_json(summary, indent=1) + "\n").encode())
    return out
