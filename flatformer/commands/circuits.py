"""`flatformer circuits`: every edge's exact effect, the circuit, and the fast methods scored."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from ..store.limits import strict_json
from ..errors import FlatformerError
from ..store.limits import number, whole
from .app import app, console, out


def _f(x, spec=".3f") -> str:
    return "-" if x is None else format(x, spec)


def render_circuits(report: dict, top: int):
    circuit = report["circuit"]
    out.print(
        Text(
            f"{report['run']}, step {report['step']}: {report['ablation']} ablation, "
            f"metric {report['metric']} over {report['prompts']} held-out prompts"
            + (" at every position" if report["readouts"] > report["prompts"] else "")
            + _scope_note(report.get("scope"))
        )
    )
    out.print(
        Text(
            f"clean {report['clean_metric']:.3f}, every edge ablated {report['ablated_metric']:.3f}"
        )
    )
    edges = sorted(report["edges"], key=lambda e: -abs(e["exact"]))
    shown = edges[:top]
    title = (
        f"Edges by exact effect (metric change, ablated alone): {len(shown)} of "
        f"{len(edges)}, * in the circuit"
    )
    out.print()
    out.print(Text(title, style="bold"))
    table = Table("edge", "exact", "eap", "eap-ig", "")
    for c in table.columns[1:]:
        c.justify = "right"
    for e in shown:
        table.add_row(
            Text(f"{e['src']} -> {e['dst']}"),
            f"{e['exact']:+.4f}",
            _f(e.get("eap"), "+.4f"),
            _f(e.get("eap_ig"), "+.4f"),
            "*" if e["in_circuit"] else "",
        )
    out.print(table)
    out.print()
    out.print(
        Text(
            "Methods against the exact effects (AUC: recovering the circuit's edges)", style="bold"
        )
    )
    table = Table("method", "AUC", "Spearman", "edges", "faithful", "seconds")
    for c in table.columns[1:]:
        c.justify = "right"
    methods = report["methods"]
    table.add_row(
        "exact + greedy",
        "1.000",
        "1.000",
        str(circuit["edges_kept"]),
        _f(circuit["faithfulness"]),
        f"{methods['exact']['seconds']:.3f}",
    )
    for key, label in (("eap", "eap"), ("eap_ig", "eap-ig")):
        if key in methods:
            m = methods[key]
            table.add_row(label, _f(m["auc"]), _f(m["spearman"]), "", "", f"{m['seconds']:.3f}")
    if "acdc" in methods:
        m = methods["acdc"]
        table.add_row(
            f"acdc (tau {m['tau']:.3g})",
            _f(m["auc"]),
            "",
            str(m["edges_kept"]),
            _f(m["faithfulness"]),
            f"{m['seconds']:.3f}",
        )
    out.print(table)
    verdict = "minimal" if circuit["minimal"] else "NOT minimal"
    out.print(
        Text(
            f"Circuit: {circuit['edges_kept']} of {circuit['edges_total']} edges, faithfulness "
            f"{_f(circuit['faithfulness'])} (target {circuit['target']:.2f}); {verdict}: dropping "
            f"any one edge loses at least {_f(min(circuit['drop_losses'], default=None))} "
            f"(tolerance {circuit['tolerance']:g})"
        )
    )
    out.print(Text("  " + ", ".join(f"{s}->{d}" for s, d in circuit["edges"])))
    if "known_circuit" in report:
        render_known(report["known_circuit"])


def _scope_note(scope: dict | None) -> str:
    """What narrowed the default prompts, and the flags that widen them."""
    if not scope:
        return ""
    cut = f" of their first {scope['length']} tokens" if scope["length"] else ""
    if not scope["narrowed"]:
        return cut
    return (
        f"{cut} (narrowed to a search of about {scope['estimated_seconds']:.0f} s; "
        "--prompts N and --length N for more)"
    )


def render_known(known: dict):
    out.print()
    title = f"Methods against the known circuit ({known['edges']} edges, {known['source']})"
    out.print(Text(title, style="bold"))
    table = Table("method", "AUC", "precision", "recall", "selected")
    for c in table.columns[1:]:
        c.justify = "right"
    for key, m in known["methods"].items():
        label = {"exact": "exact + greedy", "eap_ig": "eap-ig"}.get(key, key)
        table.add_row(
            label, _f(m["auc"]), _f(m["precision"]), _f(m["recall"]), Text(m["selected_by"])
        )
    out.print(table)


def _scope(loaded, step, prompts: Optional[str], length: Optional[int], positions: str):
    """The prompts a search on this run measures (edges.budget), read at `positions`: as asked
    when given, else 200 narrowed to about a minute's search; refused in one line when even the
    narrowest default would take several."""
    from ..edges.budget import BUDGET_SECONDS, choose_scope

    model = loaded.model(loaded.resolve_step(step))
    width = loaded.cfg.n_ctx
    if prompts is not None:
        n = whole("--prompts", int(prompts), 1, 1_000_000)
        return choose_scope(model, width, n, length or width, float("inf"), positions)
    scope = choose_scope(model, width, 200, length, positions=positions)
    if scope.seconds > 3 * BUDGET_SECONDS:
        raise FlatformerError(
            f"{loaded.path}: a circuit search would take about {scope.seconds / 60:.0f} minutes "
            f"even on {scope.prompts} prompts of {scope.length or width} tokens; ask for it "
            f"with --prompts {scope.prompts} --length {scope.length or width}, or fewer"
        )
    return scope


def parse_path(text: str) -> list[tuple[str, str]]:
    """ "tok>a0.0.v,a0.0>m0" -> [("tok", "a0.0.v"), ("a0.0", "m0")]."""
    edges = []
    for part in text.split(","):
        src, sep, dst = part.strip().partition(">")
        if not sep or not src.strip() or not dst.strip():
            raise FlatformerError(
                f"--path takes edges SRC>DST separated by commas, such as "
                f"tok>a0.0.v,a0.0>m0; got {text!r}"
            )
        edges.append((src.strip(), dst.strip()))
    return edges


@app.command()
def circuits(
    run: Path = typer.Argument(..., help="A run folder."),
    step: Optional[int] = typer.Option(None, help="Checkpoint step [last]."),
    ablation: str = typer.Option(
        "mean",
        help="What an ablated edge carries: mean (the "
        "sender's mean output over held-out windows), resample (its "
        "output on a corrupted prompt) or zero.",
    ),
    metric: Optional[str] = typer.Option(
        None,
        help="logprob (of the rule's target; default "
        "when the task has one), kl (to the clean output), "
        "logit-diff (clean minus corrupt target) or l2 (squared "
        "distance of the logits from the clean ones).",
    ),
    positions: str = typer.Option(
        "last",
        help="Where each prompt is read: last (its rule's position, or its last) or all "
        "(every position after the first, as compiled programs are read).",
    ),
    methods: str = typer.Option(
        "exact,eap,eap-ig,acdc",
        help="Comma-separated methods; the "
        "exact effects are always computed (they are the ground truth).",
    ),
    prompts: Optional[str] = typer.Option(
        None,
        help="Held-out prompts to measure on [200, fewer for a large model: the search is "
        "estimated first]: a count, or a "
        'JSON-lines prompts FILE of {"prompt", "target", '
        '"corrupt", "corrupt_target"} examples (write a task\'s own '
        "with `flatformer prompts RUN --out FILE`; docs/guide/prompts.md).",
    ),
    target: float = typer.Option(0.95, help="Faithfulness the circuit must reach."),
    tau: Optional[float] = typer.Option(
        None, help="ACDC's threshold in metric units [1% of the clean-vs-ablated gap]."
    ),
    length: Optional[int] = typer.Option(
        None,
        help="Cut each held-out prompt to its first N tokens [whole windows, shorter for a "
        "large model].",
    ),
    ig_steps: int = typer.Option(5, help="EAP-IG's integration steps."),
    top: int = typer.Option(15, help="Edges shown in the table."),
    path: Optional[str] = typer.Option(
        None,
        help="Path patching: edges SRC>DST joined by "
        "commas (tok>a0.0.v,a0.0>m0,m0>logits); the sender's "
        "corrupt output reaches the rest only along this path.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Which edges compute the rule: every edge of the model's graph (tok, pos, heads aL.H with
    receivers q/k/v, MLPs mL, logits) ablated alone, the smallest faithful circuit, and EAP,
    EAP-IG and ACDC scored against the exact effects."""
    from ..edges.report import circuits_report
    from ..store.runs import load_run

    from ..edges.methods import READOUTS

    if positions not in READOUTS:
        raise FlatformerError(f"--positions must be last or all, got {positions!r}")
    loaded = load_run(run)
    examples, scope = None, None
    if prompts is None or prompts.isdigit():
        if length is not None:
            whole("--length", length, 1, loaded.cfg.n_ctx)
        scope = _scope(loaded, step, prompts, length, positions)
        prompts, length = scope.prompts, scope.length
    else:
        from ..tasks.prompts import read_examples

        examples = read_examples(prompts, loaded.task, loaded.cfg.n_ctx, loaded.vocab_out)
        if not loaded.cfg.causal and len(set(examples[1])) > 1:
            raise FlatformerError(
                f"{prompts}: this model attends to every position, so the padding after a "
                "shorter prompt would change what it reads: give prompts of one length"
            )
        prompts = len(examples[0])
    if not 0 < target <= 1:
        raise FlatformerError(f"--target must be in (0, 1], got {target}")
    if top < 1:
        raise FlatformerError(f"--top must be >= 1, got {top}")
    whole("--ig-steps", ig_steps, 1, 1000)
    if tau is not None:
        number("--tau", tau, 0, 1e6)
    wanted = [m.strip() for m in methods.split(",") if m.strip()]
    edges = parse_path(path) if path is not None else None
    with console.status("circuits") as status:
        report = circuits_report(
            loaded,
            step,
            ablation,
            metric,
            wanted,
            prompts,
            target,
            tau,
            ig_steps,
            lambda name: status.update(f"circuits: {name}"),
            edges,
            examples,
            positions,
            length,
        )
    if scope is not None:
        report["scope"] = {"prompts": scope.prompts, "length": scope.length,
                           "estimated_seconds": scope.seconds, "narrowed": scope.narrowed}  # fmt: skip
    if as_json:
        print(strict_json(report))
        return
    render_circuits(report, top)
    if edges:
        out.print(
            Text(
                f"Path patching {', '.join(f'{s}>{d}' for s, d in edges)} (clean vs "
                f"corrupt prompts): the {report['metric']} moves by "
                f"{report['path_patching']['effect']:+.4f}"
            )
        )
