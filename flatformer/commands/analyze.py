"""`flatformer analyze`: the measured report of a checkpoint; `flatformer generate`: sampling."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import typer
from rich.table import Table
from rich.text import Text

from ..store.limits import strict_json
from ..readout.labels import short
from ..analysis.circuits import TOP_K
from ..errors import FlatformerError
from .app import app, out


def _plain(text) -> Text:
    """A table cell: a token or prompt, cut to the labels' width."""
    return Text(short(text))  # token strings such as "[" must never be read as rich markup


def _line(text: str) -> Text:
    """A sentence, whole: the terminal wraps it (a cut headline hides the numbers)."""
    return Text(text)


def _table(title: str, *columns: str) -> Table:
    """A table under its heading (printed now, on its own line: a rich title would wrap to the
    table's width)."""
    if title:
        out.print()
        out.print(Text(title, style="bold"))
    table = Table()
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    return table


def render_report(report: dict):
    held = report["held_out"]
    out.print(
        _line(
            f"{report['run']}: {report['task']}, {report['preset'] or 'custom'} "
            f"({report['n_params']} parameters), step {report['step']}; held-out loss "
            f"{held['loss']:.4f}, rule error {held['rule_error']:.2%} over "
            f"{held['rule_positions']} positions"
            + (
                f" (of {held['rule_positions_all']:,}, evenly spaced)"
                if held.get("rule_positions_all", 0) > held["rule_positions"]
                else ""
            )
        )
    )
    if report["algorithm"] is not None:
        table = _table("The algorithm, measured (held-out windows)", "step", "measure", "value")
        table.columns[1].justify = "left"
        for row in report["algorithm"]:
            table.add_row(_plain(row["step"]), _plain(row["measure"]), _plain(row["shown"]))
        out.print(table)
    else:
        out.print(_line(f"(the task {report['task']} declares no algorithm checks)"))
    prompts = report["prompts"]
    table = _table(
        f"Knobs: {report['kl']} of the next token, nats, over "
        f"{prompts['count']} {prompts['source']} prompts",
        "knob",
        "min",
        "median",
        "max",
        "prompt with the max",
    )
    table.columns[-1].justify = "left"
    for knob in report["knobs"]:
        table.add_row(
            _plain(knob["name"]),
            f"{knob['min']:.3f}",
            f"{knob['median']:.3f}",
            f"{knob['max']:.3f}",
            _plain(prompts["text"][knob["worst_prompt"]]),
        )
    out.print(table)
    lens = report["lens"]
    table = _table(
        f"Logit lens at the last position ({lens['note']})",
        "after",
        "top token = final",
        "KL(final || lens)",
    )
    for stage in lens["stages"]:
        table.add_row(_plain(stage["stage"]), f"{stage['agrees']:.1%}", f"{stage['kl']:.3f}")
    out.print(table)
    table = _table(
        f"Direct logit attribution: the terms sum to the logits (largest gap "
        f"{lens['decomposition_error']:.1e})",
        "term",
        "push on the top token",
    )
    for term in lens["attribution"]:
        table.add_row(_plain(term["term"]), f"{term['push']:+.3f}")
    out.print(table)
    circuits = report["circuits"]
    k = circuits[0]["k"] if circuits else 3
    table = _table(
        "Circuits: singular values of each head's QK = W_Q W_K^T and OV",
        "head",
        "QK singular values",
        f"QK top {k}",
        "OV singular values",
        f"OV top {k}",
    )
    for c in circuits:
        table.add_row(
            f"{c['layer']}.{c['head']}",
            " ".join(f"{s:.3g}" for s in c["qk_singular"]),
            f"{c['qk_mass']:.1%}",
            " ".join(f"{s:.3g}" for s in c["ov_singular"]),
            f"{c['ov_mass']:.1%}",
        )
    out.print(table)
    if report.get("edge_circuit"):
        render_edge_circuit(report["edge_circuit"], report.get("edge_circuit_scope"))
    elif report.get("edge_circuit_scope"):
        scope = report["edge_circuit_scope"]
        out.print()
        out.print(
            _line(
                f"Circuit: not searched (about {scope['estimated_seconds'] / 60:.0f} minutes "
                f"even on {scope['prompts']} prompts of {scope['length'] or 'all'} tokens); "
                f"flatformer circuits RUN --prompts {scope['prompts']} --length "
                f"{scope['length'] or report['model']['n_ctx']} runs it"
            )
        )
    if report.get("grokking"):
        render_grokking(report["grokking"])
    if report.get("induction"):
        render_induction(report["induction"])
    if report.get("patching"):
        render_patching(report["patching"])


def render_edge_circuit(found: dict, scope: dict | None = None):
    """Three lines: the circuit (flatformer circuits has the full tables), and on which
    prompts when the default was narrowed (`scope`)."""
    narrowed = (
        f", on {scope['prompts']} prompts"
        + (f" of their first {scope['length']} tokens" if scope["length"] else "")
        if scope
        else ""
    )
    c, m = found["circuit"], found["methods"]
    faith = "-" if c["faithfulness"] is None else f"{c['faithfulness']:.3f}"
    out.print()
    out.print(
        Text(
            f"Circuit ({found['ablation']} ablation, {found['metric']}{narrowed}; flatformer "
            f"circuits RUN for more)",
            style="bold",
        )
    )
    out.print(
        _line(
            f"{c['edges_kept']} of {c['edges_total']} edges keep {faith} of the "
            f"metric ({'minimal' if c['minimal'] else 'not minimal'}): "
            + ", ".join(f"{s}->{d}" for s, d in c["edges"])
        )
    )

    def auc(key):
        value = m.get(key, {}).get("auc")
        return "-" if value is None else f"{value:.2f}"

    out.print(
        _line(
            f"AUC against the exact effects: EAP {auc('eap')}, EAP-IG {auc('eap_ig')}, "
            f"ACDC {auc('acdc')} (ACDC keeps {m['acdc']['edges_kept']} edges)"
        )
    )


def render_grokking(g: dict):
    phases = g["phases"]
    algo = g["algorithm"]
    out.print()
    out.print(
        Text(
            f"Grokking (Nanda et al. 2023): key frequencies {g['key_frequencies']} "
            f"(of 1..{g['p'] // 2}; {g['key_share']:.1%} of the embedding's Fourier "
            f"energy); phases end at steps: memorisation {phases['memorisation']}, "
            f"circuit formation {phases['circuit_formation']}, clean-up "
            f"{phases['cleanup']}; below half their peak after memorisation: "
            f"restricted loss at {g['falls']['restricted_loss']}, test loss at "
            f"{g['falls']['test_loss']}. "
            f"Algorithm (Zhong et al. 2023): {algo['name']} (distance irrelevance "
            f"{algo['distance_irrelevance']:.2f}, gradient symmetricity "
            f"{algo['gradient_symmetricity']:.2f})"
        )
    )
    table = _table(
        "Progress measures over checkpoints (restricted loss: all pairs; excluded "
        "loss: training pairs)",
        "step",
        "loss tr",
        "loss te",
        "acc tr",
        "acc te",
        "restr.",
        "excl.",
        "sum w^2",
    )
    rows = range(len(g["steps"]))
    shown = sorted(
        set(np.linspace(0, len(g["steps"]) - 1, min(len(g["steps"]), 21)).round().astype(int))
    )
    for i in rows:
        if i in shown:
            table.add_row(
                str(g["steps"][i]),
                f"{g['train_loss'][i]:.3g}",
                f"{g['test_loss'][i]:.3g}",
                f"{g['train_accuracy'][i]:.1%}",
                f"{g['test_accuracy'][i]:.1%}",
                f"{g['restricted_loss'][i]:.3g}",
                f"{g['excluded_loss'][i]:.3g}",
                f"{g['weight_norm'][i]:.4g}",
            )
    out.print(table)


def render_induction(induction: dict):
    table = _table(
        f"Induction heads (on repeated random tokens; the induction score jumps at "
        f"step {induction['phase_step']})",
        "head",
        "previous-token",
        "prefix-matching",
        "copying",
    )
    for head in induction["heads"]:
        copying = "undefined" if head["copying"] is None else f"{head['copying']:+.3f}"
        table.add_row(
            f"{head['layer']}.{head['head']}",
            f"{head['prev_token']:.3f}",
            f"{head['prefix_matching']:.3f}",
            copying,
        )
    out.print(table)
    names = [f"{h['layer']}.{h['head']}" for h in induction["heads"]]
    comp = induction["composition"]
    table = _table(
        f"Composition of an earlier head into a later one (Frobenius ratio; random "
        f"heads of the same shapes give {comp['baseline']:.3f})",
        "earlier -> later",
        "Q",
        "K",
        "V",
    )
    for a, row in enumerate(comp["k"]):
        for b, value in enumerate(row):
            if value is not None:
                table.add_row(
                    f"{names[a]} -> {names[b]}",
                    f"{comp['q'][a][b]:.3f}",
                    f"{value:.3f}",
                    f"{comp['v'][a][b]:.3f}",
                )
    out.print(table)


def render_patching(patching: dict):
    T = len(patching["restored"][0])
    table = _table(
        f"Activation patching: share of the logit difference restored by patching "
        f"the clean run ({patching['clean']}) into the corrupt one "
        f"({patching['corrupt']}), per position"
        + (" (counted back from the last)" if "positions" in patching else ""),
        "activation",
        *patching.get("positions", [str(t) for t in range(T)]),
    )
    for name, values in zip(patching["names"], patching["restored"]):
        table.add_row(_plain(name), *["-" if v is None else f"{v:.2f}" for v in values])
    out.print(table)


@app.command()
def analyze(
    run: Path = typer.Argument(..., help="A run folder."),
    step: Optional[int] = typer.Option(None, help="Checkpoint step [last]."),
    prompts: Optional[Path] = typer.Option(
        None,
        help="A file of prompts, one per line [the task's demo and held-out windows], or a "
        'JSON-lines file of {"prompt", "target", "corrupt", "corrupt_target"} examples: '
        "their targets are the circuit's metric and their corrupt prompts are patched "
        "(docs/guide/prompts.md).",
    ),
    patch: Optional[Tuple[str, str]] = typer.Option(
        None, help="Two prompts of equal length, CLEAN CORRUPT: patch one into the other."
    ),
    k: int = typer.Option(
        TOP_K,
        help="Top k singular values whose share of the mass is "
        "reported (the explorer page shows the default).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Measure a checkpoint: the task's algorithm, knobs (head/MLP/position ablations, attention
    scaling) with their KL, logit lens and attribution, and each head's QK/OV singular values."""
    from ..analysis.interventions import example_patching, pair_patching
    from ..analysis.report import analyze as run_analysis
    from ..tasks.prompts import is_examples_file, read_examples, read_lines
    from ..store.runs import load_run

    loaded = load_run(run)
    if k < 1:
        raise FlatformerError(f"--k must be >= 1, got {k}")
    given, source, examples = None, None, None
    if prompts is not None and is_examples_file(prompts):
        examples = read_examples(prompts, loaded.task, loaded.cfg.n_ctx, loaded.vocab_out)
        tokens, index = examples[0], examples[1]
        given, source = [row[: i + 1] for row, i in zip(tokens, index)], f"examples from {prompts}"
    elif prompts is not None:
        given, cut = read_lines(prompts, loaded.task, loaded.cfg.n_ctx)
        source = f"from {prompts}" + (
            f", {cut} cut to their last {loaded.cfg.n_ctx} tokens" if cut else ""
        )
    report = run_analysis(loaded, step, given, source, k, examples)
    if examples is not None and examples[3] is not None and not patch:
        report["patching"] = example_patching(loaded.model(report["step"]), loaded.task, examples)
    if patch:
        clean, corrupt = (loaded.task.encode(p) for p in patch)
        report["patching"] = pair_patching(loaded.model(report["step"]), clean, corrupt)
        report["patching"].update(clean=patch[0], corrupt=patch[1])
    if as_json:
        print(strict_json(report))
    else:
        render_report(report)


def _head(text: str) -> tuple[int, int]:
    layer, sep, head = text.partition(".")
    if not sep or not layer.isdigit() or not head.isdigit():
        raise FlatformerError(f"--head-off takes LAYER.HEAD such as 0.1, got {text!r}")
    return int(layer), int(head)


def _outputs(run, tokens, prompt: str, hooks, step, as_json: bool):
    if tokens[0] != 0:  # a compiled program reads BOS (token 0) first
        tokens, prompt = [0, *tokens], f"BOS {prompt}"
    if len(tokens) > run.cfg.n_ctx:
        raise FlatformerError(f"--prompt has {len(tokens)} tokens; the model reads {run.cfg.n_ctx}")
    logits = run.model(step)(np.array([tokens]), hooks=hooks)[0]
    values = [run.vocab_out[c] for c in logits.argmax(-1)[1:]]
    if as_json:
        print(strict_json({"prompt": prompt, "outputs": values}))
        return
    out.print(Text("prompt     ").append(prompt), soft_wrap=True)
    out.print(Text("outputs    ").append(" ".join(values), style="bold"), soft_wrap=True)
    out.print(Text("(a compiled program: its value at each input position, read in one pass)"))


@app.command()
def generate(
    run: Path = typer.Argument(..., help="A run folder."),
    prompt: str = typer.Option(
        ...,
        help='Space-separated tokens, e.g. "4 1 + 4 6"; text for a model with a tokenizer or '
        "characters.",
    ),
    n: int = typer.Option(10, "-n", help="Tokens to generate."),
    temperature: float = typer.Option(1.0, help="Softmax temperature; 0 is greedy."),
    top_k: Optional[int] = typer.Option(None, help="Keep only the k likeliest tokens."),
    top_p: Optional[float] = typer.Option(None, help="Keep the likeliest tokens up to mass p."),
    seed: int = typer.Option(0, min=0, help="Seed of the sampler's random draws."),
    greedy: bool = typer.Option(False, help="Always take the likeliest token."),
    step: Optional[int] = typer.Option(None, help="Checkpoint step [last]."),
    head_off: Optional[List[str]] = typer.Option(
        None, help="Switch head LAYER.HEAD off (repeatable), e.g. 0.1."
    ),
    mlp_off: Optional[List[int]] = typer.Option(None, help="Switch the MLP of a layer off."),
    positions_off: bool = typer.Option(False, help="Switch the position embeddings off."),
    beta: Optional[float] = typer.Option(None, help="Scale every attention score by beta."),
    verbose: bool = typer.Option(
        False,
        help="A table of every step: probability, entropy, "
        "effective choices and the raw random draw.",
    ),
    pieces: bool = typer.Option(
        False,
        "--pieces",
        help="The prompt and the output as the vocabulary's token names, space-separated "
        "(a tokenizer's pieces: Ġthe Ġcat).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Continue a prompt with the trained model (the context slides over the last n_ctx tokens),
    optionally with heads, MLPs or positions switched off or the attention scaled."""
    from ..readout import switches
    from ..rasp.run import is_compiled
    from ..readout import generate as sample
    from ..store.runs import load_run

    loaded = load_run(run)
    task = loaded.task
    tokens = task.encode_pieces(prompt) if pieces else task.encode(prompt)
    if not tokens:
        raise FlatformerError("--prompt is empty")
    decode = task.decode_pieces if pieces else task.decode
    hooks = switches(
        loaded.cfg, [_head(h) for h in head_off or []], mlp_off or [], not positions_off, beta
    )
    if is_compiled(loaded):
        # A compiled program's outputs are its values, not tokens it reads: nothing to feed
        # back, so it is read once, at every position (its value at each input).
        _outputs(loaded, tokens, decode(tokens), hooks, step, as_json)
        return
    steps = sample(loaded.model(step), tokens, n, temperature, top_k, top_p, seed, greedy, hooks)
    new = [s.token for s in steps]
    if as_json:
        print(
            strict_json(
                {
                    "prompt": decode(tokens),
                    "generated": decode(new),
                    "tokens": new,
                    "steps": [s.__dict__ for s in steps],
                }
            )
        )
        return
    # Two labelled lines: a continuation run into its prompt reads as one string.
    out.print(Text("prompt     ").append(decode(tokens)), soft_wrap=True)
    out.print(Text("generated  ").append(decode(new), style="bold"), soft_wrap=True)
    if verbose:
        table = _table("", "#", "token", "p", "entropy (nats)", "effective choices", "draw u")
        for i, s in enumerate(steps):
            table.add_row(
                str(i + 1),
                _plain(task.vocab[s.token]),
                f"{s.probability:.3f}",
                f"{s.entropy:.3f}",
                f"{np.exp(s.entropy):.2f}",
                "greedy" if s.u is None else f"{s.u:.4f}",
            )
        out.print(table)
