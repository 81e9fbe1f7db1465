"""What each view costs on an imported model: wall time and peak memory of `figures`, `eval`,
`analyze`, `circuits`, `explore`, `generate`, `geometry`, `graph` and `dictionary` (each with
its defaults) on Hugging Face GPT-2 models of about 0.1M, 1M and 5M parameters, each imported
with a held-out text. (`animate` needs a run's training checkpoints: an imported model has one.)

    python bench/views_speed.py [--sizes 0.1M,1M,5M] [--timeout 600]

The models are built offline with `transformers` (random weights, `save_pretrained`) and
imported with `flatformer import --corpus`; the text is 20,000 token ids drawn from a Zipf
law, so some tokens are frequent, as in real text. Each view runs as its own process, as a user
runs it, under /usr/bin/time -v: its wall time and the largest resident set of the process or
any of its workers. A view that refuses prints one line, recorded as it is; one that runs past
--timeout is stopped and recorded as such. Needs the `lens` extra (transformers, torch).
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# name: (vocabulary, context, d_model, layers, heads)
SIZES = {
    "0.1M": (400, 64, 64, 2, 4),
    "1M": (2000, 256, 128, 4, 4),
    "5M": (4000, 1024, 256, 5, 8),
}
TEXT_TOKENS = 20_000
PROMPT = "1 2 3 4 5 6 7 8"  # token ids: the imported models read ids


def build(folder: Path, vocab: int, ctx: int, d: int, layers: int, heads: int) -> Path:
    """A GPT-2 folder with random weights and a held-out text of Zipf-distributed ids."""
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=vocab,
        n_positions=ctx,
        n_embd=d,
        n_layer=layers,
        n_head=heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    GPT2LMHeadModel(config).eval().save_pretrained(folder, safe_serialization=True)
    ids = np.minimum(np.random.default_rng(0).zipf(1.3, TEXT_TOKENS) - 1, vocab - 1)
    text = folder / "text.txt"
    text.write_text(" ".join(map(str, ids)))
    return text


def timed(args: list[str], timeout: int) -> tuple[str, str, str]:
    """(wall seconds, peak memory, outcome) of one command."""
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "flatformer", *args]
    started = time.perf_counter()
    # Its own process group, ended whole at the timeout: killing /usr/bin/time alone would
    # leave the command running.
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"> {timeout}", "", f"stopped after {timeout} s"
    seconds = time.perf_counter() - started
    peak = next(
        (
            int(line.split(":")[1]) * 1024
            for line in stderr.splitlines()
            if "Maximum resident set size" in line
        ),
        0,
    )
    lines = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip() and not line.startswith("\t") and "Command exited" not in line
    ]
    outcome = "ok" if proc.returncode == 0 else (lines[-1] if lines else f"exit {proc.returncode}")
    return f"{seconds:.0f}", f"{peak / 1e9:.2f} GB", outcome.replace("|", "/")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per view")
    args = parser.parse_args()
    from common import record  # bench/, the script's own folder

    load = os.getloadavg()[0]
    with record(__file__, "Every view on imported models", markdown=True):
        print(
            "| model | parameters | view | seconds | peak memory | outcome |\n"
            "| --- | --- | --- | --- | --- | --- |"
        )
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.sizes.split(","):
                vocab, ctx, d, layers, heads = SIZES[name]
                source, run = Path(tmp) / f"hf-{name}", Path(tmp) / f"run-{name}"
                text = build(source, vocab, ctx, d, layers, heads)
                subprocess.run(
                    [sys.executable, "-m", "flatformer", "import", str(source), "--corpus"]
                    + [str(text), "--out", str(run)],
                    check=True,
                    capture_output=True,
                )
                from flatformer.store.runs import load_run

                params = load_run(run).cfg.n_params
                shape = f"vocabulary {vocab:,}, context {ctx:,}, d_model {d}, {layers} layers"

                def tmp_out(kind: str) -> Path:
                    return Path(tmp) / f"{kind}-{name}"

                views = {
                    "figures": ["figures", str(run), "--out", str(Path(tmp) / f"fig-{name}")],
                    "eval": ["eval", str(run)],
                    "analyze": ["analyze", str(run)],
                    "circuits": ["circuits", str(run)],
                    "explore": ["explore", str(run), "--out", str(Path(tmp) / f"{name}.html")],
                    "generate": ["generate", str(run), "--prompt", PROMPT, "-n", "32"],
                    "geometry": ["geometry", str(run)],
                    "graph": ["graph", str(run), "--prompt", PROMPT, "--out", str(tmp_out("g"))],
                    "dictionary": ["dictionary", str(run), "--out", str(tmp_out("d"))],
                }
                for view, command in views.items():
                    seconds, peak, outcome = timed(command, args.timeout)
                    outcome = outcome.replace(str(run), f"RUN-{name}")  # not this machine's path
                    print(
                        f"| {name} ({shape}) | {params:,} | {view} | {seconds} | {peak} | "
                        f"{outcome} |",
                        flush=True,
                    )
        print(
            "\nThe peak is the largest resident set of the command or any one of its worker "
            "processes (`/usr/bin/time -v`). Views run past --timeout "
            f"({args.timeout} s) are recorded as stopped, not guessed at. The machine's load "
            f"average over a minute was {load:.1f} when the script began and "
            f"{os.getloadavg()[0]:.1f} when it ended, on {os.cpu_count()} cores: on a shared "
            "machine the times are upper bounds for an idle one."
        )


if __name__ == "__main__":
    main()
