"""Training speed at every model size against PyTorch as its users write it: flatformer's step
(the compiled float64 engine, the NumPy engine in float64 and float32, and which of them
`flatformer train` picks by default at that batch, asked of engine/select.py) against a
nanoGPT-style model of the same architecture and parameter count (a fused QKV nn.Linear, F.scaled_dot_product_attention(is_causal=True),
nn.LayerNorm, nn.GELU, torch.optim.AdamW, float32), per step with one thread each and two, and
end to end through `flatformer train` against an eager PyTorch training loop of the same steps.

    python bench/train_speed.py [--quick] [--no-end-to-end]

Each time is the best of a few repeats (the least disturbed by other processes sharing the
machine), the engines of one model taking turns so that a change in the load hits them alike.
Ratios are PyTorch's time over ours: above 1 we are faster. Results go to
bench/results/train_speed.md.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import record  # noqa: E402

from flatformer.config import LN_EPS, ModelConfig, preset  # noqa: E402
from flatformer.tasks.windows import Corpus  # noqa: E402
from flatformer.engine import kernels  # noqa: E402
from flatformer.engine.engines import COMPILED, REFERENCE  # noqa: E402
from flatformer.engine.select import resolve  # noqa: E402
from flatformer.engine.model import (  # noqa: E402
    forward,
    init_params,
    keep_freed_memory,
)
from flatformer.engine.optim import AdamW  # noqa: E402
from flatformer.training.recipes import get_recipe  # noqa: E402


def bigger(d, heads, layers, ctx, vocab):
    return preset(
        "simulator-16d",
        vocab,
        d_model=d,
        n_heads=heads,
        d_head=d // heads,
        n_layers=layers,
        d_mlp=4 * d,
        n_ctx=ctx,
    )


# The size curve: name, config, sequences per batch
MODELS = [
    ("paper-2d", preset("paper-2d", 12), 8),
    ("simulator-16d", preset("simulator-16d", 28), 8),
    ("d32 2L ctx32", bigger(32, 4, 2, 32, 64), 32),
    ("d48 2L ctx32", bigger(48, 4, 2, 32, 64), 32),
    ("d64 2L ctx32", bigger(64, 4, 2, 32, 64), 32),
    ("d96 2L ctx64", bigger(96, 4, 2, 64, 128), 64),
    ("d128 2L ctx64", bigger(128, 4, 2, 64, 128), 64),
]


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, hd = cfg.d_model, cfg.n_heads * cfg.d_head
        self.cfg = cfg
        norm = cfg.normalization == "pre_ln"
        self.ln_1 = nn.LayerNorm(d, eps=LN_EPS) if norm else nn.Identity()
        self.c_attn = nn.Linear(d, 3 * hd, bias=cfg.qkv_bias)
        self.c_proj = nn.Linear(hd, d, bias=cfg.attn_out_bias) if cfg.attn_out else nn.Identity()
        if not cfg.attn_only:
            self.ln_2 = nn.LayerNorm(d, eps=LN_EPS) if norm else nn.Identity()
            act = nn.ReLU() if cfg.act_fn == "relu" else nn.GELU(approximate="tanh")
            self.mlp = nn.Sequential(nn.Linear(d, cfg.d_mlp), act, nn.Linear(cfg.d_mlp, d))

    def forward(self, x):
        B, T, _ = x.shape
        H, dh = self.cfg.n_heads, self.cfg.d_head
        q, k, v = self.c_attn(self.ln_1(x)).split(H * dh, dim=2)
        q, k, v = (t.view(B, T, H, dh).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, H * dh))
        return x if self.cfg.attn_only else x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    """Our architecture as PyTorch users write it (nanoGPT's layout; embedding and unembedding
    untied, as our configs have them)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.d_vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=LN_EPS) if cfg.ln_final else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_out, bias=cfg.unembed_bias)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def load(self, p: dict, cfg: ModelConfig):
        """Our parameters (one seed's tensors) into this module, to check the two agree."""
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        with torch.no_grad():
            self.wte.weight.copy_(t(p["embed.W_E"]))
            self.wpe.weight.copy_(t(p["pos_embed.W_pos"]))
            for i, block in enumerate(self.h):
                b = f"blocks.{i}."
                qkv = [
                    p[b + f"attn.W_{w}"].transpose(1, 0, 2).reshape(cfg.d_model, -1) for w in "QKV"
                ]
                block.c_attn.weight.copy_(t(np.concatenate(qkv, 1).T))
                if cfg.qkv_bias:
                    block.c_attn.bias.copy_(
                        t(np.concatenate([p[b + f"attn.b_{w}"].ravel() for w in "QKV"]))
                    )
                if cfg.attn_out:
                    block.c_proj.weight.copy_(t(p[b + "attn.W_O"].reshape(-1, cfg.d_model).T))
                for ln in ("ln1", "ln2"):
                    if b + f"{ln}.w" in p:
                        module = block.ln_1 if ln == "ln1" else block.ln_2
                        module.weight.copy_(t(p[b + f"{ln}.w"]))
                        module.bias.copy_(t(p[b + f"{ln}.b"]))
                if not cfg.attn_only:
                    block.mlp[0].weight.copy_(t(p[b + "mlp.W_in"].T))
                    block.mlp[0].bias.copy_(t(p[b + "mlp.b_in"]))
                    block.mlp[2].weight.copy_(t(p[b + "mlp.W_out"].T))
                    block.mlp[2].bias.copy_(t(p[b + "mlp.b_out"]))
            self.lm_head.weight.copy_(t(p["unembed.W_U"].T))
            if cfg.unembed_bias:
                self.lm_head.bias.copy_(t(p["unembed.b_U"]))


def check_same_model(cfg: ModelConfig):
    """The reference is our model: the same parameter count, and in float64 the same logits."""
    model = NanoGPT(cfg).double()
    ours = sum(p.numel() for p in model.parameters())
    assert ours == cfg.n_params, f"torch reference has {ours} parameters, ours {cfg.n_params}"
    params = init_params(cfg, [np.random.default_rng(0)])
    model.load(params.seed(0), cfg)
    tokens = np.random.default_rng(1).integers(0, cfg.d_vocab, (1, 2, cfg.n_ctx))
    want = forward(params, tokens)[0][0]
    got = model(torch.from_numpy(tokens[0])).detach().numpy()
    assert np.abs(got - want).max() < 1e-9, "the torch reference computes another model"


def batches(cfg, batch, steps, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.d_vocab, (steps, 1, batch, cfg.n_ctx))
    return tokens, rng.integers(0, cfg.d_vocab, tokens.shape), np.ones(tokens.shape)


def corpus_steps(engine, cfg, batch, steps, dtype=np.float64):
    """`steps` training steps on `engine` in `dtype` (run once first: the compiled engine
    compiles or loads its kernel), as the trainer calls it: each step's windows cut from a
    corpus."""
    keep_freed_memory()  # as the trainer does
    params = init_params(cfg, [np.random.default_rng(0)])
    params = params.like(params.flat.astype(dtype))
    rng, n = np.random.default_rng(0), 4096
    corpus = Corpus(
        rng.integers(0, cfg.d_vocab, n),
        np.full(n, -1),
        np.full(n, -1),
        np.array([0]),
        np.array([n]),
    )
    starts = rng.integers(0, n - cfg.n_ctx - 1, (steps, 1, batch))
    opt, loss = AdamW(params.flat), np.zeros(1)
    engine.train_steps(params, opt, corpus, starts[:1], False, [1e-3], loss)
    return lambda: engine.train_steps(params, opt, corpus, starts, False, [1e-3] * steps, loss)


def torch_steps(cfg, batch, steps):
    """`steps` idiomatic eager PyTorch float32 steps (run once first)."""
    torch.manual_seed(0)
    model = NanoGPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens, targets, _ = (torch.from_numpy(a[:, 0]) for a in batches(cfg, batch, steps))

    def run():
        for k in range(steps):
            logits = model(tokens[k])
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets[k].view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    run()
    return run


def best_of_each(runs, repeats):
    """Each run's best time, the runs taking turns."""
    times = [[] for _ in runs]
    for _ in range(repeats):
        for run, t in zip(runs, times):
            start = time.perf_counter()
            run()
            t.append(time.perf_counter() - start)
    return [min(t) for t in times]


def default_engine(cfg, batch) -> str:
    """What `flatformer train` runs this model on by default at this batch size (the default
    recipe, Recipe dtype and --engine auto: select.resolve, as a Job asks it)."""
    recipe, engine = resolve(cfg, get_recipe("default", batch_size=batch, candidates=1))
    return f"{engine.name} f{recipe.dtype[-2:]}"


# The engines a step is measured on, as the table's columns name them.
OURS = ("numba f64", "numpy f64", "numpy f32")


def per_step(quick: bool):
    print(
        f"{'model':<15}{'params':>8}{'thr':>4}{'numba f64':>11}{'numpy f64':>11}"
        f"{'numpy f32':>11}{'torch f32':>11}  {'default':<11}{'x best':>7}{'x torch':>8}"
    )
    ratios = {}
    for name, cfg, batch in MODELS:
        check_same_model(cfg)
        steps = 20 if cfg.d_model <= 16 else max(1, 4 if quick else 8) if cfg.d_model <= 64 else 2
        reps = 3 if quick else 7
        engines = {
            "numpy f64": corpus_steps(REFERENCE, cfg, batch, steps, np.float64),
            "numpy f32": corpus_steps(REFERENCE, cfg, batch, steps, np.float32),
            "torch f32": torch_steps(cfg, batch, steps),
        }
        if kernels.supports(cfg) and cfg.d_model <= 64:  # beyond, a step takes seconds compiled
            engines["numba f64"] = corpus_steps(COMPILED, cfg, batch, steps)
        chosen = default_engine(cfg, batch)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with threadpool_limits(threads, user_api="blas"):
                times = dict(zip(engines, best_of_each(list(engines.values()), reps)))
            ms = {k: v / steps * 1e3 for k, v in times.items()}
            best = min(ms[k] for k in OURS if k in ms)
            ratio = ms["torch f32"] / ms[chosen]
            ratios[name, threads] = (cfg.n_params, best / ms[chosen], ratio)
            cell = lambda k: f"{ms[k]:>9.2f}ms" if k in ms else f"{'-':>11}"  # noqa: E731
            print(
                f"{name:<15}{cfg.n_params:>8}{threads:>4}{cell('numba f64')}{cell('numpy f64')}"
                f"{cell('numpy f32')}{cell('torch f32')}  {chosen:<11}{best / ms[chosen]:>6.2f}x"
                f"{ratio:>8.2f}x"
            )
    near = all(b >= 0.9 for _, b, _ in ratios.values())
    mid = [
        r for (_, threads), (n, _, r) in ratios.items() if threads == 1 and 30_000 <= n < 100_000
    ]
    print(
        f"the default within 10% of the fastest of ours at every size: {'yes' if near else 'NO'}; "
        f"at 30k-100k parameters, one thread, at least eager PyTorch's speed: "
        f"{'yes' if mid and min(mid) >= 1 else 'NO'}"
    )
    return ratios


TORCH_LOOP = """
import json, sys, time
start = time.perf_counter()
sys.path.insert(0, {bench!r})
import numpy as np, torch, torch.nn.functional as F
from train_speed import NanoGPT
from flatformer.config import ModelConfig
cfg = ModelConfig.from_dict(json.load(open({config!r}))["model"])
text = open({corpus!r}).read().split()
vocab = sorted(set(text))
ids = torch.tensor([vocab.index(w) for w in text])
torch.manual_seed(0)
model = NanoGPT(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
T, B = cfg.n_ctx, {batch}
for step in range({steps}):
    starts = torch.randint(0, len(ids) - T - 1, (B,))
    x = torch.stack([ids[s : s + T] for s in starts])
    y = torch.stack([ids[s + 1 : s + T + 1] for s in starts])
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(time.perf_counter() - start)
"""


def end_to_end(quick: bool):
    """`flatformer train --corpus` with default options (the `paper` recipe: batch 8, one
    candidate; the default dtype and engine) against an eager PyTorch loop of the same steps,
    each a fresh process (imports included), with one thread each and two."""
    steps = 200 if quick else 1000
    reps = "one each" if quick else "best of 2, alternating"
    print(f"\nend to end, {steps} steps of 8 sequences, fresh processes ({reps})")
    print(f"{'model':<15}{'params':>8}{'thr':>4}{'flatformer':>12}{'torch':>9}{'x torch':>9}")
    bench = str(Path(__file__).resolve().parent)
    ratios = {}
    for name, d, ctx, vocab in (("d64 2L ctx32", 64, 32, 64), ("d128 2L ctx64", 128, 64, 128)):
        with tempfile.TemporaryDirectory() as tmp:
            rng = np.random.default_rng(0)
            corpus = Path(tmp) / "words.txt"
            corpus.write_text(" ".join(f"w{i}" for i in rng.permutation(np.arange(20000) % vocab)))
            sets = dict(d_model=d, n_heads=4, d_head=d // 4, n_layers=2, d_mlp=4 * d, n_ctx=ctx)
            ours = [sys.executable, "-m", "flatformer", "train", "--corpus", str(corpus)]
            ours += ["--recipe", "paper", "--steps", str(steps)]
            ours += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
            for threads in (1, 2):
                env = dict(os.environ)
                for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                    env[var] = str(threads)
                flat, eager = [], []
                for rep in range(1 if quick else 2):
                    out = f"{tmp}/run{threads}{rep}"
                    start = time.perf_counter()
                    subprocess.run([*ours, "--out", out], check=True, env=env, capture_output=True)
                    flat.append(time.perf_counter() - start)
                    config = json.loads(Path(out, "config.json").read_text())
                    trained = ModelConfig.from_dict(config["model"])
                    assert default_engine(trained, 8).endswith(config["recipe"]["dtype"][-2:])
                    loop = TORCH_LOOP.format(
                        bench=bench,
                        config=f"{out}/config.json",
                        corpus=str(corpus),
                        batch=8,
                        steps=steps,
                    )
                    start = time.perf_counter()
                    subprocess.run(
                        [sys.executable, "-c", loop], check=True, env=env, capture_output=True
                    )
                    eager.append(time.perf_counter() - start)
                n = ModelConfig.from_dict(config["model"]).n_params
                ratios[name, threads] = min(eager) / min(flat)
                print(
                    f"{name:<15}{n:>8}{threads:>4}{min(flat):>10.1f} s{min(eager):>7.1f} s"
                    f"{ratios[name, threads]:>8.2f}x"
                )
    return ratios


def blas_kernels(quick: bool):
    """The float32 step at 110k and 436k parameters with the OpenBLAS kernels the environment
    names (OPENBLAS_CORETYPE, read when NumPy loads OpenBLAS), with those OpenBLAS detects for
    this CPU itself (unset), and with its AVX-512 ones; one thread, each in a fresh process
    against torch in that process."""
    print("\nfloat32 step by OpenBLAS kernel choice (one thread, fresh process each)")
    print(
        f"{'model':<15}{'OPENBLAS_CORETYPE':<19}{'kernels':<10}{'numpy f32':>11}"
        f"{'torch f32':>11}{'x torch':>8}"
    )
    setting = os.environ.get("OPENBLAS_CORETYPE")
    cores = dict.fromkeys([setting, None, "SkylakeX"])  # as set, unset, AVX-512; once each
    for name in ("d64 2L ctx32", "d128 2L ctx64"):
        for core in cores:
            env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
            if core:
                env["OPENBLAS_CORETYPE"] = core
            args = [sys.executable, __file__, "--step-only", name] + ["--quick"] * quick
            out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
            arch, ours, eager = out.split()
            label = (core or "unset") + (" (as set)" if core == setting else "")
            print(
                f"{name:<15}{label:<19}{arch:<10}{float(ours):>9.2f}ms{float(eager):>9.2f}ms"
                f"{float(eager) / float(ours):>7.2f}x"
            )


def blas_architecture() -> str:
    from threadpoolctl import threadpool_info

    return next(i.get("architecture", "?") for i in threadpool_info() if i["user_api"] == "blas")


def step_only(name: str, quick: bool):
    cfg, batch = next((c, b) for n, c, b in MODELS if n == name)
    torch.set_num_threads(1)
    steps = 2
    with threadpool_limits(1, user_api="blas"):
        runs = [
            corpus_steps(REFERENCE, cfg, batch, steps, np.float32),
            torch_steps(cfg, batch, steps),
        ]
        ours, eager = best_of_each(runs, 3 if quick else 7)
    print(blas_architecture(), ours / steps * 1e3, eager / steps * 1e3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats (minutes)")
    parser.add_argument("--no-end-to-end", action="store_true", help="per step only")
    parser.add_argument("--step-only", help=argparse.SUPPRESS)  # one model's f32 step, for blas
    args = parser.parse_args()
    if args.step_only:
        return step_only(args.step_only, args.quick)
    with record(__file__, "Training speed against idiomatic PyTorch"):
        print(
            "per step (ms; best of repeats, engines alternating); default = the engine and dtype "
            "`flatformer train` picks at that batch; x best = the fastest of ours over the "
            "default's time; x torch = torch f32 time over the default's; NumPy's "
            f"OpenBLAS runs its {blas_architecture()} kernels "
            f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')})"
        )
        per_step(args.quick)
        blas_kernels(args.quick)
        if not args.no_end_to_end:
            end_to_end(args.quick)


if __name__ == "__main__":
    main()
