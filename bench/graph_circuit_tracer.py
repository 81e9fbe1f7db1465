"""flatformer's attribution graph against circuit-tracer's, on the same model and transcoders.

    python bench/graph_circuit_tracer.py [--run RUN --transcoders DIR] [--prompts N]

Needs circuit-tracer (0.5), which pins huggingface-hub < 1.0 and transformers <= 4.57.3: in an
environment of its own, e.g. `python -m venv --system-site-packages ENV; ENV/bin/pip install
circuit-tracer "huggingface-hub<1.0" "transformers<=4.57.3"`, then `ENV/bin/python bench/...`.

The model: simulator-16d with two blocks, a final LayerNorm and a 20-token context (circuit-
tracer needs LayerNorms: it hooks every `ln*.hook_scale`), trained on plus-last-even, with
transcoders trained by `flatformer graph`'s defaults (or --run and --transcoders). It becomes
circuit-tracer's TransformerLens replacement model (its `from_config`, our weights loaded,
absent biases zero; TransformerLens's `ln2.hook_normalized` is x_hat before the gain and bias,
so the gain and bias are folded into the encoder it is given, the same pre-activations). Then,
per held-out prompt (20 tokens): both graphs, and
- the logits of its model against ours;
- features: Jaccard of the active (layer, position, index) sets, positions after 0
  (circuit-tracer zeroes every feature at position 0, where its models have BOS);
- edges among the features both have, the tokens, the error nodes and the logits: Pearson
  correlation and the largest difference, by source kind;
- seconds per graph (median), each in this process on one thread.
Its own ground-truth test asks for feature Jaccard >= 0.85 and edge Pearson >= 0.99.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from circuit_tracer.attribution.attribute import attribute as ct_attribute  # noqa: E402
from circuit_tracer.replacement_model.replacement_model_transformerlens import (  # noqa: E402
    TransformerLensReplacementModel,
)
from circuit_tracer.transcoder import TranscoderSet  # noqa: E402
from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder  # noqa: E402
from transformer_lens import HookedTransformerConfig  # noqa: E402

from common import record  # noqa: E402
from flatformer.graph import attribute, load_transcoders, save_transcoders  # noqa: E402
from flatformer.graph import train_transcoders  # noqa: E402
from flatformer.training.jobs import JobSpec  # noqa: E402
from flatformer.store.runs import load_run  # noqa: E402
from flatformer.training.trainer import train  # noqa: E402

torch.set_num_threads(1)
SETS = {"n_layers": 2, "ln_final": True, "n_ctx": 20, "steps": 3000}
BIASES = ("b_Q", "b_K", "b_V", "b_O", "b_U")


class Tokens:
    """The tokenizer circuit-tracer asks its model for. Our prompts are token ids already and
    have no BOS; circuit-tracer prepends one unless the first token is special (and fails when
    the tokenizer has none), so `compare` declares each prompt's first token special."""

    padding_side = "right"
    bos_token_id = pad_token_id = eos_token_id = None

    def __init__(self, vocab):
        self.vocab, self.vocab_size, self.all_special_ids = vocab, len(vocab), []

    def decode(self, ids):
        ids = np.atleast_1d(np.asarray(ids)).tolist()
        return " ".join(self.vocab[i] for i in ids)


def their_model(model, transcoders, vocab):
    cfg, w = model.cfg, model.tensors
    assert cfg.normalization == "pre_ln" and cfg.ln_final and cfg.act_fn == "gelu"
    hc = HookedTransformerConfig(
        d_model=cfg.d_model, d_head=cfg.d_head, n_heads=cfg.n_heads, n_layers=cfg.n_layers,
        d_mlp=cfg.d_mlp, n_ctx=cfg.n_ctx, d_vocab=cfg.d_vocab, act_fn="gelu_new",
        normalization_type="LN", eps=1e-5, positional_embedding_type="standard",
        dtype=torch.float64, default_prepend_bos=False, device="cpu",
    )  # fmt: skip
    sets = {}
    for tc in transcoders:
        t = SingleLayerTranscoder(
            cfg.d_model, tc.width, torch.nn.ReLU(), tc.layer, dtype=torch.float64,
            device=torch.device("cpu"),
        )  # fmt: skip
        gain, bias = w[f"blocks.{tc.layer}.ln2.w"], w[f"blocks.{tc.layer}.ln2.b"]
        t.W_enc.data = torch.tensor((gain[:, None] * tc.W_enc).T.copy())
        t.b_enc.data = torch.tensor(tc.b_enc + bias @ tc.W_enc)
        t.W_dec.data = torch.tensor(tc.W_dec.copy())
        t.b_dec.data = torch.tensor(tc.b_dec.copy())
        sets[tc.layer] = t
    ts = TranscoderSet(sets, "ln2.hook_normalized", "hook_mlp_out", scan="flatformer")
    rm = TransformerLensReplacementModel.from_config(hc, ts)
    state = {}
    for name, value in rm.state_dict().items():
        ours = name.replace("old_mlp.", "").replace("old_unembed.", "")
        if ours in w:
            state[name] = torch.tensor(w[ours], dtype=torch.float64)
        elif name.endswith(BIASES):
            state[name] = torch.zeros_like(value)
        else:
            state[name] = value
    rm.load_state_dict(state)
    rm.tokenizer = Tokens(vocab)
    return rm


def compare(model, transcoders, rm, tokens) -> dict:
    cfg, T = model.cfg, len(tokens)
    rm.tokenizer.all_special_ids = [int(tokens[0])]
    with torch.no_grad():
        logits = rm(torch.tensor(tokens)[None]).numpy()[0]
    start = time.perf_counter()
    theirs = ct_attribute(torch.tensor(tokens), rm, batch_size=512)
    t_theirs = time.perf_counter() - start
    start = time.perf_counter()
    ours = attribute(model, transcoders, tokens)
    t_ours = time.perf_counter() - start
    A = theirs.adjacency_matrix.double().numpy()
    active = theirs.active_features.numpy()
    their_nodes = [tuple(active[i]) for i in theirs.selected_features.numpy()]
    our_nodes = [tuple(map(int, f)) for f in ours.features]
    mine = {n for n in our_nodes if n[1] > 0}
    common = sorted(set(their_nodes) & mine)
    jaccard = len(common) / max(len(set(their_nodes) | mine), 1)
    ti = {n: i for i, n in enumerate(their_nodes)}
    oi = {n: i for i, n in enumerate(our_nodes)}
    k = min(len(theirs.logit_tokens), ours.n_logits)
    same_logits = bool((theirs.logit_tokens.numpy()[:k] == ours.logit_tokens[:k]).all())
    nf_t, ne = len(their_nodes), cfg.n_layers * T
    rows_t = [ti[n] for n in common] + list(range(len(A) - len(theirs.logit_tokens), len(A)))[:k]
    n_o = len(ours.adjacency)
    rows_o = [oi[n] for n in common] + list(range(n_o - ours.n_logits, n_o))[:k]
    kinds = {
        "features": ([ti[n] for n in common], [oi[n] for n in common]),
        "tokens": (
            list(range(nf_t + ne, nf_t + ne + T)),
            list(range(ours.n_features + ours.n_errors, ours.n_features + ours.n_errors + T)),
        ),
        "errors at position 0": (
            list(range(nf_t, nf_t + ne, T)), list(range(ours.n_features, ours.n_features + ne, T))
        ),
        "errors after position 0": (
            [nf_t + i for i in range(ne) if i % T], [ours.n_features + i for i in range(ne) if i % T]
        ),
    }  # fmt: skip
    a = np.concatenate([A[np.ix_(rows_t, c)].ravel() for c, _ in kinds.values()])
    b = np.concatenate([ours.adjacency[np.ix_(rows_o, c)].ravel() for _, c in kinds.values()])
    diffs = {
        kind: float(np.abs(A[np.ix_(rows_t, ct)] - ours.adjacency[np.ix_(rows_o, co)]).max())
        for kind, (ct, co) in kinds.items()
    }
    return {
        "logits": float(np.abs(logits - model(tokens)[0]).max()),
        "jaccard": jaccard,
        "same_logits": same_logits,
        "pearson": float(np.corrcoef(a, b)[0, 1]),
        "edges": int(a.size),
        "diffs": diffs,
        "theirs_s": t_theirs,
        "ours_s": t_ours,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=None)
    parser.add_argument("--transcoders", default=None)
    parser.add_argument("--prompts", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        record(__file__, "Attribution graphs: flatformer against circuit-tracer", markdown=True),
    ):
        if args.run is None:
            job, out = JobSpec(
                "plus-last-even",
                "simulator-16d",
                "default",
                out_dir=Path(tmp) / "run",
                overrides=SETS,
            ).build()
            train(job)
            args.run = out
        run = load_run(args.run)
        model = run.model()
        if args.transcoders is None:
            transcoders, _ = train_transcoders(run)
            args.transcoders = save_transcoders(transcoders, Path(tmp) / "tc")
        transcoders = load_transcoders(args.transcoders, model)
        rm = their_model(model, transcoders, run.vocab)
        print(
            "| prompt | logits max diff | same top logits | feature Jaccard (pos > 0) "
            "| edges compared | edge Pearson | largest edge diff: features, tokens, "
            "errors at 0, errors after 0 | circuit-tracer s | flatformer s |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for i, tokens in enumerate(np.asarray(run.data().val_inputs)[: args.prompts]):
            r = compare(model, transcoders, rm, tokens)
            d = r["diffs"]
            print(
                f"| {i} | {r['logits']:.1e} | {'yes' if r['same_logits'] else 'no'} "
                f"| {r['jaccard']:.3f} | {r['edges']} | {r['pearson']:.6f} "
                f"| {d['features']:.1e}, {d['tokens']:.1e}, {d['errors at position 0']:.1e}, "
                f"{d['errors after position 0']:.1e} | {r['theirs_s']:.3f} | {r['ours_s']:.3f} |"
            )
        print()
        print(
            "circuit-tracer zeroes every feature at position 0 (its models' BOS), so its error "
            "node there holds those features too: the one place the graphs differ by more than "
            "rounding. Its graphs have no position nodes (position embeddings are not among its "
            "sources); edges from ours are not compared. Times: one graph each, this process, "
            "one thread; circuit-tracer's is its first call's on each prompt."
        )


if __name__ == "__main__":
    main()
