"""`flatformer geometry`: representational geometry of every named activation (RDMs, CKA,
Procrustes), across activations, over training and across seeds."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import typer
from rich.table import Table
from rich.text import Text

from ..errors import FlatformerError
from ..store.limits import strict_json
from ..tasks.prompts import read_lines
from .app import ProgressDisplay, app, console, out

STAGES = {
    "forward": "geometry: stimuli",
    "comparisons": "geometry: comparisons",
    "checkpoints": "geometry: checkpoints",
    "seeds": "geometry: seeds",
}


def claim_figures(folder: Path) -> Path:
    """RUN/geometry, ours to draw into: new, or holding only figures (never a link)."""
    from ..store.write import claim_folder, holds_only

    return claim_folder(folder, "geometry folder", holds_only(".png"))


def write_figures(report: dict, folder: Path):
    from ..figures.rsa import write_figures as draw

    claim_figures(folder)  # again: the report took a while
    with console.status("geometry: figures"):
        paths = draw(report, folder)
    console.print(f"geometry: {len(paths)} figures in {folder}")


def export_rsatoolbox(report: dict, path: Path):
    """The RDMs as an rsatoolbox `RDMs` (one per activation and kind; rdm_descriptors
    "activation" and "kind", pattern_descriptors "stimulus"), saved by `RDMs.save` as HDF5:
    `rsatoolbox.rdm.load_rdm(path)` reads it back."""
    try:
        from rsatoolbox.rdm import RDMs
    except ImportError:
        raise FlatformerError(
            "--export .hdf5 needs rsatoolbox: pip install 'flatformer[neuro]'"
        ) from None
    pairs = [(n, k) for n, d in report["rdms"].items() for k in d]
    rdms = RDMs(
        np.array([report["rdms"][n][k] for n, k in pairs]),
        dissimilarity_measure="mixed: see rdm_descriptors 'kind'",
        rdm_descriptors={"activation": [n for n, _ in pairs], "kind": [k for _, k in pairs]},
        pattern_descriptors={"stimulus": list(report["stimuli"])},
    )
    from ..store.write import atomic_path

    with atomic_path(path, "--export") as tmp:
        rdms.save(tmp, file_type="hdf5", overwrite=True)


def export_rdms(report: dict, path: Path):
    """The RDMs as .npz (one array per activation and kind), .mat (scipy.io.savemat) or
    rsatoolbox's .hdf5."""
    arrays = {
        f"{n}|{k}".replace(".", "_").replace("|", "__"): np.asarray(v)
        for n, d in report["rdms"].items()
        for k, v in d.items()
    }
    from ..store.write import write_file

    if path.suffix in (".hdf5", ".h5"):
        return export_rsatoolbox(report, path)
    buffer = io.BytesIO()  # written whole by the store: never through a link or into a FIFO
    if path.suffix == ".npz":
        np.savez(buffer, **arrays)
    elif path.suffix == ".mat":
        from scipy.io import savemat

        savemat(buffer, {k[:63]: v for k, v in arrays.items()})
    else:
        raise FlatformerError(f"--export takes a .npz, .mat or .hdf5 file, got {path}")
    write_file(path, buffer.getvalue(), "--export")


@app.command()
def geometry(
    run: Path = typer.Argument(..., help="A run folder, or a --seeds folder with --seeds."),
    step: int | None = typer.Option(None, help="Checkpoint step [last]."),
    stimuli_file: Path | None = typer.Option(
        None, "--stimuli", help="One prompt a line, read at its last token."
    ),
    seeds: bool = typer.Option(
        False, "--seeds", help="RUN is a seed folder: CKA between seeds per activation."
    ),
    training: bool = typer.Option(
        False,
        "--training",
        help="Each activation's CKA with its final geometry at every checkpoint.",
    ),
    export: Path | None = typer.Option(
        None, help="Write the RDMs (.npz, .mat, or rsatoolbox's .hdf5)."
    ),
    data: Path | None = typer.Option(
        None,
        help="Recordings (.npy, .npz, .csv): stimuli x channels or stimuli x repeats x channels.",
    ),
    rdm: str = typer.Option(
        "euclidean",
        help="Dissimilarity for --data: euclidean, correlation, or crossnobis (needs repeats).",
    ),
    measure: str = typer.Option(
        "cka",
        help="Comparison for --seeds, --training and --against: cka, cka-rbf, procrustes, "
        "spearman, tau-a, cosine (comma-separated), or all.",
    ),
    crossnobis: bool = typer.Option(
        False,
        "--crossnobis",
        help="The model's crossnobis RDMs: conditions = forced answers, held-out windows "
        "as repeats.",
    ),
    noise: str = typer.Option(
        "shrinkage_diag",
        help="Noise covariance for crossnobis: shrinkage_diag, shrinkage_eye, diag, identity.",
    ),
    compare: str = typer.Option("spearman", help="RDM comparison for --data: spearman or pearson."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples of the stimuli (--data)."),
    permutations: int = typer.Option(1000, help="Stimulus-label permutations (--data)."),
    seed: int = typer.Option(0, help="Seed of the bootstrap and permutations."),
    against: Path | None = typer.Option(
        None, help="Another run: activation x activation linear CKA between the two."
    ),
    figures: bool = typer.Option(False, "--figures", help="Write PNG figures into RUN/geometry/."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Representational geometry of every named activation on a stimulus set (the 96
    token-position points for plane models, held-out rule windows otherwise)."""
    from ..rsa.stimuli import short
    from ..rsa.crossnobis import NOISE_METHODS
    from ..rsa.report import geometry_report, parse_measures, seeds_report
    from ..store.runs import load_run, seed_runs

    measures = parse_measures(measure)
    if export:  # refused before the work, not after it
        from ..store.write import output_file

        output_file(export, "--export")
    if figures:
        claim_figures(run / "geometry")
    if noise not in NOISE_METHODS:
        raise FlatformerError(f"--noise must be one of {', '.join(NOISE_METHODS)}, got {noise!r}")
    if seeds:
        with ProgressDisplay(STAGES, transient=True) as progress:
            report = seeds_report(seed_runs(run), step, measures, progress)
        if figures:
            write_figures(report, run / "geometry")
        if as_json:
            print(strict_json(report))
            return
        print_seeds(report)
        return
    loaded = load_run(run)
    prompts = None
    if stimuli_file:
        prompts, cut = read_lines(stimuli_file, loaded.task, loaded.cfg.n_ctx, "--stimuli")
        if cut:
            console.print(f"geometry: {cut} stimuli cut to their last {loaded.cfg.n_ctx} tokens")
    with ProgressDisplay(STAGES, transient=True) as progress:
        other = load_run(against) if against else None
        report = geometry_report(
            loaded,
            step,
            prompts,
            over_training=training,
            data=data,
            against=other,
            measures=measures,
            crossnobis=noise if crossnobis else None,
            data_options={
                "noise": noise,
                "rdm": rdm,
                "method": compare,
                "seed": seed,
                "bootstrap": bootstrap,
                "permutations": permutations,
            },
            progress=progress,
        )
    if export:
        export_rdms(report, export)
    if figures:
        write_figures(report, run / "geometry")
    if as_json:
        print(strict_json(report))
        return
    names, cka = report["activations"], np.asarray(report["linear_cka"])
    out.print(
        Text(
            f"{report['run']}, step {report['step']}: {len(report['stimuli'])} stimuli, "
            f"{len(names)} activations"
        )
    )
    settled = report["training"]["settled_at"] if training else {}
    table = Table(
        "activation", "CKA with next", "CKA with last", *(f"settles ({m})" for m in settled)
    )
    for k, n in enumerate(names):
        nxt = f"{cka[k, k + 1]:.3f}" if k + 1 < len(names) else "-"
        label = short(n) if len(settled) > 1 else n  # room for the settle columns
        table.add_row(label, nxt, f"{cka[k, -1]:.3f}", *(str(s[n]) for s in settled.values()))
    out.print(table)
    if against:
        tables = report["against"]["measures"]
        out.print(
            Text(f"against {report['against']['run']}: each activation with the same-named one")
        )
        pairs = Table("activation", *tables)
        for n in tables["cka"]["same_name"]:
            pairs.add_row(n, *(f"{t['same_name'][n]:.3f}" for t in tables.values()))
        out.print(pairs)
    if data:
        print_data(report["data"])
    if crossnobis:
        print_crossnobis(report["crossnobis"])


def print_seeds(report: dict):
    measures = report["measures"]
    out.print(
        Text(
            f"{len(report['seeds'])} seeds, {len(report['successful'])} successful "
            f"(rule error < 0.05): mean over pairs of seeds of {', '.join(measures)}"
            + (" (procrustes: an angle, 0 = same shape)" if "procrustes" in measures else "")
        )
    )
    from ..rsa.stimuli import short

    # one column per measure, the successful seeds' mean under the mean over all, so six
    # measures still fit a terminal
    table = Table("activation", *measures)
    for name, a in report["by_activation"].items():
        cells = []
        for m in measures:
            s = a[m]["mean_successful"]
            cells.append(f"{a[m]['mean']:.3f}" + ("" if s is None else f"\n{s:.3f}"))
        table.add_row(short(name), *cells)
    out.print(table)
    out.print(Text("each cell: all seeds, then (below) the successful ones"))


def print_crossnobis(c: dict):
    out.print(
        Text(
            f"crossnobis over {len(c['conditions'])} conditions ({c['condition']}: "
            f"{', '.join(c['conditions'])}), {c['repeats']} windows each, noise {c['noise']}; "
            f"unbiased, so a distance can be negative (no difference beyond the noise)"
        )
    )
    table = Table("activation", "mean", "min", "negative", "channels left out")
    for name, v in c["rdms"].items():
        v = np.asarray(v)
        table.add_row(
            name,
            f"{v.mean():.4g}",
            f"{v.min():.4g}",
            f"{int((v < 0).sum())}/{len(v)}",
            str(c["dropped_channels"][name]),
        )
    out.print(table)


def print_data(d: dict):
    ceiling = d["noise_ceiling"]
    note = (
        f"noise ceiling [{ceiling[0]:.3f}, {ceiling[1]:.3f}]"
        if ceiling
        else f"no noise ceiling ({d['noise_ceiling_reason']})"
    )
    out.print(
        Text(
            f"model vs data {tuple(d['shape'])}: {d['rdm']} RDMs, {d['comparison']} "
            f"correlation; {note}; best: {d['best']}"
        )
    )
    table = Table()
    table.add_column("activation", no_wrap=True)
    for heading in ("corr.", "95% CI (bootstrap)", "p (perm.)"):
        table.add_column(heading, no_wrap=True)
    for name, a in sorted(d["by_activation"].items(), key=lambda na: -na[1]["correlation"]):
        ci = "-" if a["ci"] is None else f"[{a['ci'][0]:.3f}, {a['ci'][1]:.3f}]"
        p = "-" if a["p"] is None else f"{a['p']:.4f}"
        table.add_row(name, f"{a['correlation']:.3f}", ci, p)
    out.print(table)
