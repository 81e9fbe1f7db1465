"""Sparse dictionaries against a compiled program's variables, in superposition.

    python bench/dictionary_compiled.py

Each program is compiled (inputs of up to 5 values) and its residual stream compressed to its
rank (`flatformer compile --compress`): d one-hot directions in D < d dimensions, no longer
orthogonal, with every output kept (one dimension fewer loses most outputs on some programs:
bench/rasp_compress.py). Dictionaries as wide as the true features and twice as wide (TopK
at k the true L0 rounded, the mean number of true features active per token; ReLU at two L1
coefficients) are trained on the last block's `hook_resid_post` over every input of 5 values (`flatformer
dictionary`'s path). The true features there are the directions of the variables' values that
vary at that activation, each a row of the compression map; a dictionary is scored against
them by the MCC (mean |cos| after Hungarian matching) and counts of the true features
recovered (some latent at |cos| >= 0.9), missed and split; "MCC centred" scores against each
variable's values less their mean (the part they share, which a dictionary may keep in its
decoder bias instead).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
from common import record
from rasp_library import PROGRAMS

from flatformer.dictionary.fit import fit_run
from flatformer.dictionary.train import Recipe
from flatformer.dictionary.truth import truth_report
from flatformer.model.transformer import Transformer
from flatformer.rasp.compile import compile_rasp_to_model
from flatformer.rasp.compress import compress
from flatformer.rasp.run import domain, known_features, write_compiled_run
from flatformer.rasp.validate import validate
from flatformer.store.runs import load_run

MAX_LEN, STEPS, COMPRESS_STEPS = 5, 2000, 50
CHOSEN = ("hist", "sort_unique", "reverse", "frac_prevs", "count")
RELU_L1 = (0.3, 1.0)


def stream_rank(compiled, batches) -> int:
    model = Transformer(compiled.cfg, compiled.tensors)
    rows = []
    for tokens in batches:
        _, cache = model.run_with_cache(tokens)
        rows += [x.reshape(-1, x.shape[-1]) for n, x in cache.items() if "resid" in n]
    s = np.linalg.svd(np.concatenate(rows), compute_uv=False)
    return int((s > 1e-9 * s[0]).sum())


def true_l0(compiled, hook: str, residual: list[str], present: list[str]) -> float:
    """Mean number of true features active per token at `hook` (the uncompressed model's
    coordinates there), over every input of MAX_LEN values."""
    model = Transformer(compiled.cfg, compiled.tensors)
    tokens = domain(compiled)[0][MAX_LEN - 1]
    x = model.run_with_cache(tokens)[1][hook].reshape(-1, compiled.cfg.d_model)
    columns = [residual.index(n) for n in present]
    return float((np.abs(x[:, columns]) > 1e-9).sum(1).mean())


def centred(run, hook: str) -> np.ndarray:
    """The true features at `hook`, each variable's values less their mean."""
    features = known_features(run, hook)
    names = list(features)
    rows = np.stack([features[n] for n in names])
    variable = np.array([n.split(":")[0] for n in names])
    for v in set(variable):
        same = variable == v
        if same.sum() > 1:
            rows[same] -= rows[same].mean(0)
    return rows


def main() -> int:
    programs = {name: (program, vocab) for name, program, vocab, _ in PROGRAMS}
    title = "Sparse dictionaries against compiled programs' variables"
    with record(__file__, title, markdown=True), tempfile.TemporaryDirectory() as tmp:
        print(__doc__.split("\n\n", 2)[2].strip() + "\n")
        print(
            "| program | d -> D | outputs kept | hook | true features | true L0 | dictionary "
            "| L0 | FVU | MCC | recovered | missed | split | MCC centred |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name in CHOSEN:
            program, vocab = programs[name]
            compiled = compile_rasp_to_model(program, vocab, MAX_LEN)
            batches = domain(compiled)[0]
            width = stream_rank(compiled, batches)
            squeezed = compress(compiled, batches, width, COMPRESS_STEPS)
            squeezed.validation = validate(program, squeezed.compressed)
            folder = Path(tmp) / name
            write_compiled_run(
                program, compiled, validate(program, compiled), name, folder, squeezed
            )
            run = load_run(folder)
            hook = f"blocks.{run.cfg.n_layers - 1}.hook_resid_post"
            kept = squeezed.validation_record()["input_accuracy"]
            present = run.config["imported"]["rasp"]["present"][hook]
            n_true, shared = len(present), centred(run, hook)
            l0 = true_l0(compiled, hook, compiled.residual, present)
            k = max(1, round(l0))
            for kind, knobs in (("topk", (k,)), ("relu", RELU_L1)):
                by_k, widths = kind == "topk", (n_true, 2 * n_true)
                result = fit_run(
                    run,
                    hook,
                    kind,
                    widths,
                    knobs if by_k else (1,),
                    (1.0,) if by_k else knobs,
                    Recipe(steps=STEPS),
                )
                for s, member in enumerate(result["members"]):
                    m, t = member["metrics"], member["metrics"]["truth"]
                    mcc = truth_report(result["stack"].member(s)["W_dec"], shared)["mcc"]
                    print(
                        f"| {name} | {compiled.cfg.d_model} -> {width} | {kept:.1%} | {hook} | "
                        f"{t['features']} | {l0:.2f} | {member['name']} | {m['l0']:.2f} | "
                        f"{m['fvu']:.4f} | {t['mcc']:.3f} | {t['recovered']} | {t['missed']} | "
                        f"{t['split']} | {mcc:.3f} |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
