"""`flatformer dictionary`: sparse dictionaries on a run's activations, scored as SAELens scores
them, written in SAELens's format."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from ..errors import FlatformerError
from .app import ProgressDisplay, app, out

COLUMNS = (
    ("l0", "L0", ".2f"),
    ("fvu", "FVU", ".4f"),
    ("ce_loss_score", "CE", ".3f"),
    ("kl_div_score", "KL", ".3f"),
    ("ce_loss_score_mean_ablation", "CE mean", ".3f"),
    ("l2_ratio", "L2", ".3f"),
    ("dead", "dead", "d"),
    ("dense", "dense", "d"),
)


def render(result: dict, run: Path, folder: Path):
    out.print(
        Text(
            f"{run}, step {result['step']}: {result['kind']} on {result['hook_in']}"
            + (f" -> {result['hook_out']}" if result["hook_out"] != result["hook_in"] else "")
            + f", {result['train_tokens']} training tokens, scored on "
            f"{result['eval_tokens']} held-out tokens"
        )
    )
    table = Table(box=None, padding=(0, 1), header_style="bold")  # fits 80 columns
    table.add_column("dictionary", no_wrap=True)
    for _, header, _ in COLUMNS:
        table.add_column(header, justify="right", no_wrap=True)
    for m in result["members"]:
        v = m["metrics"]
        table.add_row(Text(m["name"]), *[format(v[key], spec) for key, _, spec in COLUMNS])
    out.print(table)
    out.print(
        Text(
            "FVU: fraction of variance unexplained; CE, KL: cross-entropy loss recovered and KL "
            "score with the dictionary spliced in, against zero ablation (CE mean: against mean "
            "ablation); L2: shrinkage, mean |x_hat| / |x|; dense: active on over 10% of tokens."
        )
    )
    truths = [
        (m["name"], m["metrics"]["truth"]) for m in result["members"] if "truth" in m["metrics"]
    ]
    for name, t in truths:
        out.print(
            Text(
                f"{name} against the program's {t['features']} variables' values there: MCC "
                f"{t['mcc']:.3f}, recovered {t['recovered']} (|cos| >= 0.9), missed "
                f"{t['missed']}, split {t['split']}"
            )
        )
    first = result["members"][-1]
    out.print(Text(f"Latents of {first['name']} (top tokens and positions, share of firings):"))
    for row in first["latents"]:
        if row["density"] == 0:
            out.print(Text(f"  {row['latent']:>3}  dead"))
            continue
        toks = ", ".join(f"{t} {s:.0%}" for t, s in row["tokens"])
        pos = ", ".join(f"{p} {s:.0%}" for p, s in row["positions"])
        out.print(
            Text(
                f"  {row['latent']:>3}  density {row['density']:.3f}  tokens {toks}  positions {pos}"
            )
        )
    out.print(
        Text(
            f"wrote {len(result['members'])} SAELens folders, metrics.json and dashboards.html "
            f"(feature dashboards, offline: open it in a browser) in {folder}"
        )
    )


@app.command()
def dictionary(
    run: Path = typer.Argument(..., help="A run folder."),
    hook: str = typer.Option(
        "blocks.0.hook_resid_post", help="The activation (a transcoder: any hook of its block)."
    ),
    kind: str = typer.Option("topk", help="relu, topk, batchtopk, jumprelu or transcoder."),
    width: list[int] = typer.Option([16], help="Latents; repeat to train several together."),
    k: list[int] = typer.Option([1], help="Active latents (topk, batchtopk); repeatable."),
    l1: list[float] = typer.Option(
        [1.0], help="Sparsity coefficient (relu, transcoder: L1; jumprelu: L0); repeatable."
    ),
    steps: int = typer.Option(3000, help="Adam steps."),
    lr: float = typer.Option(3e-3, help="Adam's learning rate."),
    batch: int = typer.Option(1024, help="Tokens per step."),
    seed: int = typer.Option(0, help="Seed of the initialisation and batches."),
    step: int | None = typer.Option(None, help="The run's checkpoint [last]."),
    out_dir: Path = typer.Option(
        ..., "--out", help="Folder for the SAELens folders and metrics.json."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print metrics.json's members as JSON."),
):
    """Train sparse dictionaries on a run's activations (its training windows) and score them on
    its held-out windows: L0, FVU, CE loss recovered and KL with the dictionary spliced in,
    dead and dense latents, shrinkage; and which latents fire on which token and position."""
    from ..dictionary.fit import fit_run, write_result
    from ..store.limits import strict_json
    from ..store.write import claim_folder
    from ..dictionary.train import Recipe
    from ..store.runs import load_run

    for name, value in (("--steps", steps), ("--batch", batch)):
        if value < 1:
            raise FlatformerError(f"{name} must be at least 1, got {value}")
    if not lr > 0:
        raise FlatformerError(f"--lr must be positive, got {lr}")
    the_run = load_run(run)
    # Refused before the training, not after it: a folder of someone else's files, or a link.
    claim_folder(out_dir, "--out", ours=lambda f: (Path(f) / "metrics.json").is_file())
    recipe = Recipe(steps=steps, batch=batch, lr=lr, seed=seed)
    with ProgressDisplay({"dictionary": "dictionary"}) as progress:
        result = fit_run(
            the_run,
            hook,
            kind,
            width,
            k,
            l1,
            recipe,
            step,
            progress=lambda i, n, msg: progress("dictionary", i, n, msg),
        )
    folder = write_result(result, out_dir, the_run)
    write_dashboards(the_run, folder, folder / "dashboards.html")
    if as_json:
        print(strict_json(result["members"]))
        return
    render(result, run, folder)


def write_dashboards(run, folder: Path, target: Path) -> Path:
    """The dashboards page of the dictionaries in `folder` on `run`, written to `target`."""
    from ..dictionary.dashboards import run_dashboards
    from ..explorer.dashboards_page import dashboards_html
    from ..store.write import write_file

    from ..rasp.run import known_features
    from ..store.read import read_json

    summary = folder / "metrics.json"
    hook = (
        read_json(summary, "metrics.json", 64 << 20).get("hook_out") if summary.is_file() else None
    )
    truth = known_features(run, hook) if isinstance(hook, str) else None
    data = run_dashboards(run, folder, truth=truth)
    return write_file(target, dashboards_html(data).encode(), "--out")


@app.command("dictionary-page")
def dictionary_page(
    folder: Path = typer.Argument(
        ..., help="What flatformer dictionary wrote (--out), or one SAELens folder."
    ),
    run: Optional[Path] = typer.Option(
        None, help="The run the dictionaries read [the one metrics.json names]."
    ),
    out_file: Optional[Path] = typer.Option(
        None, "--out", help="HTML file [FOLDER/dashboards.html]."
    ),
):
    """Write the feature dashboards of a dictionary: one offline HTML file with each latent's top
    activating contexts, activation histogram, logit effect and decoder direction, which
    recomputes every activation it shows from the weights to check itself."""
    from ..store.read import read_json
    from ..store.runs import load_run

    if not folder.is_dir():
        raise FlatformerError(f"{folder} is not a folder")
    if run is None:
        if not (folder / "metrics.json").is_file():
            raise FlatformerError(f"{folder} has no metrics.json naming its run: give --run")
        summary = read_json(folder / "metrics.json", "dictionary metrics.json", 64 << 20)
        if not isinstance(summary, dict) or not isinstance(summary.get("run"), str):
            raise FlatformerError(f"{folder / 'metrics.json'} names no run: give --run")
        run = Path(summary["run"])
        if not run.is_dir():
            raise FlatformerError(
                f"{folder / 'metrics.json'} names the run {run}, which is not here: give --run"
            )
    target = write_dashboards(load_run(run), folder, out_file or folder / "dashboards.html")
    out.print(Text(f"{target}: feature dashboards (works offline: open it in a browser)"))
