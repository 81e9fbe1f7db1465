"""Why flatformer's clocks score a lower gradient symmetricity than the published table's:
the paper's own model and training, with and without the `=` token.

    python bench/atlas_gradient_sim.py [--steps 4000] [--seeds 2] [--published CSV]

Zhong et al.'s main table reads `a b` and answers at b (their `eqn_sign` 0); flatformer's
modular-addition task reads `a b =` and answers at `=` (their `eqn_sign` 1). This trains the
paper's model as its `train-main.py` builds it (no LayerNorm, attention unmasked, scaled by
attn_coeff, d_model 128, 4 heads, d_mlp 512, p 59; AdamW lr 1e-3, weight decay 2, betas
(0.9, 0.98), 10 steps of warm-up, full batch on 80% of the pairs, float32), written here in
PyTorch from that file, at attn_coeff 1, both ways. Each model's gradient symmetricity is
measured as the paper's notebook does (`eval-main.ipynb`: the first 100 of every triple
shuffled by random.Random(42), the logit of c at the last position, float64), on the input it
was trained on, and for an `a b =` model also on `a b` alone, which is what the notebook's cell
feeds every model. flatformer's own measure (`analysis.mechanism.gradient_symmetricity`) is run
on each `a b =` model too: the same weights, the same number. --published takes the paper's
`result/1l_fixedwidth.csv` and prints its clocks' median per `eqn_sign`. Needs torch.
"""

import argparse
import random
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

P, D, HEADS = 59, 128, 4


def forward(w: dict, x, coeff: float = 1.0):
    """The paper's forward (train-main.py), from the input embeddings (returned, for their
    gradients) to the logits."""
    import torch

    emb = w["W_E"][:, x].permute(1, 2, 0)
    if emb.requires_grad:
        emb.retain_grad()
    h = emb + w["W_pos"][: x.shape[1]]
    k, q, v = (torch.einsum("ihd,bpd->biph", w[n], h) for n in ("W_K", "W_Q", "W_V"))
    scores = torch.einsum("biph,biqh->biqp", k, q) / np.sqrt(k.shape[-1])
    pattern = torch.softmax(scores, -1) * coeff + (1 - coeff)
    z = torch.einsum("biph,biqp->biqh", v, pattern)
    z = z.permute(0, 2, 1, 3).reshape(z.shape[0], z.shape[2], -1)
    h = h + torch.einsum("df,bqf->bqd", w["W_O"], z)
    hidden = torch.relu(torch.einsum("md,bpd->bpm", w["W_in"], h) + w["b_in"])
    h = h + torch.einsum("dm,bpm->bpd", w["W_out"], hidden) + w["b_out"]
    return emb, h @ w["W_U"]


def symmetricity(w: dict, equals: bool) -> float:
    """eval-main.ipynb's gradient symmetricity, in float64, on `a b =` or on `a b`."""
    import torch

    w = {n: t.detach().double() for n, t in w.items()}
    w["W_E"].requires_grad_(True)
    triples = [(a, b, c) for a in range(P) for b in range(P) for c in range(P)]
    random.Random(42).shuffle(triples)
    total = 0.0
    for a, b, c in triples[:100]:
        emb, logits = forward(w, torch.tensor([[a, b] + ([P] if equals else [])]))
        logits[0, -1, c].backward()
        g = emb.grad[0].numpy()
        total += (g[0] @ g[1]) / np.linalg.norm(g[0]) / np.linalg.norm(g[1])
    return total / 100


def ours(w: dict) -> float:
    """flatformer's gradient symmetricity of an `a b =` model, its weights in flatformer's
    layout."""
    from flatformer.analysis.mechanism import gradient_symmetricity
    from flatformer.config import ModelConfig
    from flatformer.tasks import get_task

    n = {k: t.detach().double().numpy() for k, t in w.items()}
    cfg = ModelConfig(
        d_model=D, n_heads=HEADS, d_head=D // HEADS, n_layers=1, d_mlp=4 * D, n_ctx=3,
        d_vocab=P + 1, act_fn="relu", normalization="none", attn_out=True, unembed_bias=False,
    )  # fmt: skip
    tensors = {
        "embed.W_E": n["W_E"].T,
        "pos_embed.W_pos": n["W_pos"],
        **{f"blocks.0.attn.W_{x}": n[f"W_{x}"].transpose(0, 2, 1) for x in "QKV"},
        "blocks.0.attn.W_O": n["W_O"].T.reshape(HEADS, D // HEADS, D),
        "blocks.0.mlp.W_in": n["W_in"].T,
        "blocks.0.mlp.b_in": n["b_in"],
        "blocks.0.mlp.W_out": n["W_out"].T,
        "blocks.0.mlp.b_out": n["b_out"],
        "unembed.W_U": n["W_U"],
    }
    task = get_task("modular-addition", {"p": P, "train_fraction": 0.8})
    return gradient_symmetricity(tensors, cfg, task)


def train(job: tuple[int, int, int]) -> dict:
    """One run of the paper's training (`equals`: with the `=` token), measured."""
    import torch

    from flatformer.analysis.grokking import distance_irrelevance

    equals, seed, steps = job
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    V, T, dh = P + equals, 2 + equals, D // HEADS
    w = {  # train-main.py's initialisation
        "W_E": torch.randn(D, V) / np.sqrt(D),
        "W_pos": torch.randn(T, D) / np.sqrt(D),
        "W_U": torch.randn(D, V) / np.sqrt(V),
        **{f"W_{x}": torch.randn(HEADS, dh, D) / np.sqrt(D) for x in "KQV"},
        "W_O": torch.randn(D, D) / np.sqrt(D),
        "W_in": torch.randn(4 * D, D) / np.sqrt(4 * D),
        "b_in": torch.zeros(4 * D),
        "W_out": torch.randn(D, 4 * D) / np.sqrt(D),
        "b_out": torch.zeros(D),
    }
    for t in w.values():
        t.requires_grad_(True)
    a, b = np.divmod(np.arange(P * P), P)
    x = torch.tensor(np.stack([a, b] + ([np.full_like(a, P)] if equals else []), 1))
    y = torch.tensor((a + b) % P)
    kept = torch.randperm(P * P)[: int(0.8 * P * P)]
    opt = torch.optim.AdamW(w.values(), lr=1e-3, weight_decay=2.0, betas=(0.9, 0.98))
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(s / 10, 1))
    started = time.process_time()
    for _ in range(steps):
        _, logits = forward(w, x[kept])
        loss = -torch.log_softmax(logits[:, -1].double(), -1).gather(1, y[kept, None]).mean()
        loss.backward()
        opt.step()
        warmup.step()
        opt.zero_grad()
    with torch.no_grad():
        logits = forward(w, x)[1][:, -1].double().numpy()
    row = {
        "input": "a b =" if equals else "a b",
        "seed": seed,
        "accuracy": float((logits[:, :P].argmax(-1) == (a + b) % P).mean()),
        "distance_irrelevance": distance_irrelevance(logits, P),
        "gradient_sim": symmetricity(w, bool(equals)),
        "cpu_seconds": time.process_time() - started,
    }
    if equals:
        row["gradient_sim_on_a_b"] = symmetricity(w, False)
        row["flatformer"] = ours(w)
    return row


def published(path) -> dict:
    """The published table's clocks (attn_coeff at least 0.9, distance irrelevance above 0.6,
    the main setting's width, one vocabulary for a and b) by eqn_sign: (count, median
    gradient_sim)."""
    import csv

    def number(text):
        try:
            return float(text)
        except ValueError:
            return None

    out = {}
    for eqn in ("0", "1"):
        sims = [
            number(r["gradient_sim"])
            for r in csv.DictReader(open(path, newline=""))
            if r["eqn_sign"] == eqn and r["diff_vocab"] == "0"
            and r["d_model"] == "128" and r["n_layers"] == "1"
            and (number(r["attn_coeff"]) or 0) >= 0.9
            and (number(r["distance_irrelevance"]) or 0) > 0.6
            and number(r["gradient_sim"]) is not None
        ]  # fmt: skip
        out[eqn] = (len(sims), statistics.median(sims))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--published", help="the paper's result/1l_fixedwidth.csv")
    args = parser.parse_args()
    jobs = [(equals, seed, args.steps) for seed in range(args.seeds) for equals in (0, 1)]
    with ProcessPoolExecutor(2) as pool:
        rows = list(pool.map(train, jobs))
    print(
        f"The paper's model and training, attn_coeff 1, {args.steps:,} steps "
        f"(the paper trains 20,000), one run per input and seed:\n"
    )
    print(
        "| input | seed | accuracy | distance irrelevance | gradient symmetricity | "
        "the same on `a b` alone | flatformer's measure | CPU seconds |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    for r in rows:
        alone = f"{r['gradient_sim_on_a_b']:.3f}" if "flatformer" in r else "-"
        mine = f"{r['flatformer']:.3f}" if "flatformer" in r else "-"
        print(
            f"| `{r['input']}` | {r['seed']} | {r['accuracy']:.3f} | "
            f"{r['distance_irrelevance']:.3f} | {r['gradient_sim']:.3f} | {alone} | {mine} | "
            f"{r['cpu_seconds']:.0f} |"
        )
    if args.published:
        table = published(args.published)
        print(
            "\nThe published table's clocks (attn_coeff 0.9 to 1, distance irrelevance above "
            "0.6, d_model 128, one layer, one vocabulary): median gradient symmetricity "
            f"{table['0'][1]:.3f} of {table['0'][0]} runs reading `a b` (eqn_sign 0), "
            f"{table['1'][1]:.3f} of {table['1'][0]} reading `a b =` (eqn_sign 1)."
        )


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "The clocks' gradient symmetricity, with and without `=`", markdown=True):
        main()
