"""Sparse dictionaries against features known to be there.

    python bench/dictionary_truth.py [--steps N] [--quick]

Activations with planted features (flatformer/dictionary/truth.py): K = 64 random unit
directions in d = 16 dimensions (superposition, 4 features a dimension), each active with
probability 3 / 64 (true L0 = 3) at a magnitude in [0.5, 1.5]; 40,000 samples to train on,
10,000 fresh ones to score on. Each kind trains its widths and sparsities together (one stack),
then every member is scored: the MCC (Hungarian matching of decoder rows to true directions,
mean |cos|; O'Neill et al. 2024, SAELens's synthetic eval), coverage (matched cosines summed
over the 64 true features), true features recovered (some latent at |cos| >= 0.9), missed and
split, L0 and FVU. Then the paper's plane model (plus-last-even, trained here in seconds if
--run is not given): which latents of a TopK dictionary on its residual stream fire on which
token and position.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: the cores are shared
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))


from common import record  # noqa: E402
from flatformer.dictionary import Recipe, decode, encode, train_stack  # noqa: E402
from flatformer.dictionary.metrics import reconstruction_metrics  # noqa: E402
from flatformer.dictionary.truth import planted_features, truth_report  # noqa: E402

K, D, L0 = 64, 16, 3
PLANS = [  # kind, widths, ks or coefficients
    ("topk", [16, 32, 64, 128], [3]),
    ("topk", [64, 128], [1, 8]),
    ("relu", [32, 64, 128], [1.0, 3.0]),
    ("batchtopk", [32, 64, 128], [3]),
    ("jumprelu", [64, 128], [0.5, 2.0]),
]


def grid(kind, widths, values):
    w = [a for a in widths for _ in values]
    v = [b for _ in widths for b in values]
    if kind in ("topk", "batchtopk"):
        return w, v, None
    return w, None, v


def truth_table(steps: int, plans) -> list[str]:
    train = planted_features(K, D, 40_000, L0, seed=0)
    test = planted_features(K, D, 10_000, L0, seed=1)
    test.features[...] = train.features  # the same directions, fresh samples
    test.x[...] = test.codes @ train.features
    rows = [
        "| kind | width | k / coef | L0 | FVU | MCC | coverage | recovered | missed | split |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, widths, values in plans:
        w, ks, coefs = grid(kind, widths, values)
        stack, _ = train_stack(
            kind, train.x, None, w, ks, coefs, Recipe(steps=steps, batch=1024, lr=3e-3)
        )
        f = encode(stack, test.x)
        x_hat = decode(stack, f)
        for s in range(stack.size):
            m = int(stack.width[s])
            met = reconstruction_metrics(test.x, x_hat[s], f[s][:, :m])
            tr = truth_report(stack.member(s)["W_dec"], train.features)
            setting = ks[s] if ks else coefs[s]
            rows.append(
                f"| {kind} | {m} | {setting} | {met['l0']:.2f} | {met['fvu']:.3f} | "
                f"{tr['mcc']:.3f} | {tr['coverage']:.3f} | {tr['recovered']} | "
                f"{tr['missed']} | {tr['split']} |"
            )
            print(rows[-1], file=sys.stderr)
    return rows


def plane_table(run_path: Path | None, steps: int) -> list[str]:
    from flatformer.dictionary.fit import fit_run
    from flatformer.store.runs import load_run

    if run_path is None:
        from flatformer.commands.cli import main

        run_path = Path(tempfile.mkdtemp()) / "plus-last-even"
        try:
            main(["train", "plus-last-even", "--out", str(run_path)])
        except SystemExit as exc:
            if exc.code:
                raise
    run = load_run(run_path)
    result = fit_run(
        run, "blocks.0.hook_resid_post", "topk", [8], [1], recipe=Recipe(steps=steps, lr=3e-3)
    )
    member = result["members"][0]
    met = member["metrics"]
    lines = [
        f"TopK, width 8, k 1 on `blocks.0.hook_resid_post` (d_model 2), "
        f"{result['train_tokens']} training tokens, {result['eval_tokens']} held-out: "
        f"L0 {met['l0']:.2f}, FVU {met['fvu']:.4f}, CE loss recovered {met['ce_loss_score']:.3f} "
        f"(zero ablation), {met['ce_loss_score_mean_ablation']:.3f} (mean ablation), "
        f"KL score {met['kl_div_score']:.3f}, dead {met['dead']}, dense {met['dense']}.",
        "",
        "| latent | density | top tokens (share of its firings) | top positions |",
        "|---|---|---|---|",
    ]
    for row in member["latents"]:
        toks = ", ".join(f"`{t}` {s:.0%}" for t, s in row["tokens"]) or "dead"
        pos = ", ".join(f"{p} {s:.0%}" for p, s in row["positions"]) or "-"
        lines.append(f"| {row['latent']} | {row['density']:.3f} | {toks} | {pos} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--run", type=Path, default=None, help="A plus-last-even run.")
    parser.add_argument("--quick", action="store_true", help="TopK rows only, 1,000 steps.")
    args = parser.parse_args()
    steps = 1000 if args.quick else args.steps
    plans = PLANS[:1] if args.quick else PLANS
    with record(__file__, "Sparse dictionaries against planted features", markdown=True):
        print(
            f"Planted: K = {K} unit directions in d = {D} dimensions, true L0 = {L0}; "
            f"{steps} Adam steps of 1,024 samples at learning rate 3e-3; scored on 10,000 "
            "fresh samples. MCC: mean |cos| over the Hungarian matching (over min(width, K) "
            "pairs); coverage: the matched cosines summed over the K true features; recovered: "
            "true features with some latent at |cos| >= 0.9; split: with two or more.\n"
        )
        print("\n".join(truth_table(steps, plans)))
        print("\n## The paper's plane model\n")
        print("\n".join(plane_table(args.run, steps)))


if __name__ == "__main__":
    main()
