"""The run report: one HTML page that opens offline and links everything `reproduce` made."""

from __future__ import annotations

import io
import math
import os
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from ..store.runs import Run

# The explorer's colours, type scale and spacing, the same file its page inlines.
TOKENS = (Path(__file__).parent.parent / "explorer" / "tokens.css").read_text(encoding="utf-8")
STYLE = (Path(__file__).parent / "report.css").read_text(encoding="utf-8")

# What each figure shows and what to notice, keyed by file name. `{focus}` is the task's focus
# token; the sentences hold for any task, with the paper's task in mind.
CAPTIONS = {
    "fig02_training_data": "Training sequences as heatmaps. Constrained positions (right after "
    "the rule's trigger) are green; unconstrained ones gray.",
    "fig03_learning_curve": "Loss and held-out rule error over training. Notice the plateau "
    "before the rule is found, then the sudden drop of the rule error.",
    "fig04_generated_sequences": "Sequences the model generates at step 0 and after training; "
    "constrained positions green when right, red when wrong.",
    "fig05_embeddings": "Token, position and combined embeddings. The positions form a ladder; "
    "notice how the token classes the rule needs sit in separate regions of the plane.",
    "fig06_qkv": "The combined embeddings and their images in query, key and value space, each "
    "with its 2 x 2 weight matrix.",
    "fig07_qk_space": "Queries and keys on common axes, and one {focus} query's dot product with "
    "every point of the plane; keys the causal mask hides are grayed.",
    "fig08_trigger_qk_scores": "Pre-softmax scores of {focus} queries against every key token, "
    "by query and key position: later keys of the wanted class score higher (recency).",
    "fig09_output_landscape": "The output network (MLP, residual and unembedding) as a map from "
    "the plane to a probability for each token.",
    "fig10_landscape_summary": "Entropy and argmax of the output landscape, with the combined "
    "embeddings and the value vectors overlaid: each target token owns a zone.",
    "fig11_trace_embeddings": "The demo sequence's embeddings over the gray backdrop of all "
    "token+position points.",
    "fig12_trace_qk": "The demo sequence's queries and keys, as heatmaps and in the plane.",
    "fig13_trace_attention": "Per-query dot-product fields, masked scores and the attention "
    "matrix of the demo sequence: the {focus} rows pick one key.",
    "fig14_trace_values": "Values, attention-weighted values and attention outputs of the demo "
    "sequence.",
    "fig15_trace_nudge": "Each position's embedding e, its attention output and z = e + Attn(e) "
    "over the argmax map: every {focus} is nudged into the zone of its target.",
    "supp_qkv_overview": "Queries, keys and values of all token+position points, side by side.",
    "supp_attention_matrices": "Attention matrices with the LM-head input, logits and "
    "probabilities for three demo sequences.",
    "supp_value_arrows": "Value arrows: original, transformed and residual, with correct and "
    "incorrect predictions marked.",
    "supp_qkv_dimensions": "Each query, key and value dimension as a token x position heatmap.",
    "supp_qk_full": "The full matrix of query-key scores between all token+position points, as a "
    "grid of token blocks.",
    "supp_landscape_embeddings": "Per-token probability maps with all combined embeddings "
    "overlaid.",
    "supp_landscape_values": "Per-token probability maps with all value vectors overlaid.",
    "supp_circuit": "The model's edge graph (embeddings, heads with their query, key and value "
    "inputs, MLPs, logits), each edge as wide as the change of the metric when it alone is "
    "mean-ablated; in colour, the smallest set of edges that keeps 95% of the metric.",
}


@dataclass
class Report:
    """What the page shows; paths are made relative to the report's folder."""

    run: Run
    stages: list[tuple[str, float]] = field(default_factory=list)  # (stage, seconds)
    figures: list[Path] = field(default_factory=list)
    movies: list[Path] = field(default_factory=list)  # .mp4 (a .gif beside it)
    algorithm: list[dict] = field(default_factory=list)  # {step, measure, value, ...}
    explorer: Path | None = None
    notes: list[str] = field(default_factory=list)
    circuit: dict | None = None  # edges.methods.find_circuits of the checkpoint


def _rel(path: Path, folder: Path) -> str:
    return escape(Path(os.path.relpath(path, folder)).as_posix(), quote=True)


def _table(rows: list[dict], columns: list[str]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(_fmt(r.get(c, '')))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def circuit_html(found: dict) -> str:
    """The circuit section: its edges with their exact effects, and the methods' scores."""
    c, m = found["circuit"], found["methods"]
    faith = "-" if c["faithfulness"] is None else f"{c['faithfulness']:.3f}"
    effect = {(e["src"], e["dst"]): e["exact"] for e in found["edges"]}
    rows = [{"edge": f"{s} → {d}", "exact effect": f"{effect[(s, d)]:+.4f}"} for s, d in c["edges"]]

    def num(x):
        return "-" if x is None else f"{x:.3f}"

    methods = [
        {
            "method": name,
            "ROC-AUC": num(m[key].get("auc")),
            "Spearman": num(m[key].get("spearman")),
            "seconds": num(m[key]["seconds"]),
        }
        for key, name in (("eap", "EAP"), ("eap_ig", "EAP-IG"), ("acdc", "ACDC"))
        if key in m
    ]
    return (
        f"<p>{c['edges_kept']} of {c['edges_total']} edges keep "
        f"{escape(faith)} of the {escape(found['metric'])} ({escape(found['ablation'])} "
        f"ablation, {found['prompts']} held-out prompts; "
        f"{'minimal' if c['minimal'] else 'not minimal'}). Exact effect: the change of the "
        f"metric when the edge alone is ablated.</p><div class='cols'>"
        + _table(rows, ["edge", "exact effect"])
        + (_table(methods, ["method", "ROC-AUC", "Spearman", "seconds"]) if methods else "")
        + "</div>"
    )


def _png_size(path: Path) -> tuple[int, int] | None:
    """A PNG's width and height from its header (the page reserves their space before the
    lazily loaded image arrives); None when it is not a PNG."""
    from ..errors import FlatformerError
    from ..store.read import open_regular

    try:
        with open_regular(path, "figure", 1 << 30) as f:  # one we just drew
            head = f.read(24)
    except FlatformerError:
        return None
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def poster_path(movie: Path) -> Path:
    return movie.with_name(movie.stem + ".poster.png")


def write_posters(movies: list[Path]) -> None:
    """Each movie's first frame as a PNG beside it: what the page shows before it plays."""
    import imageio.v2 as imageio
    from PIL import Image

    from ..store.write import atomic_write

    for movie in movies:
        reader = imageio.get_reader(movie)
        try:
            frame = reader.get_data(0)
        finally:
            reader.close()
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="PNG")
        atomic_write(poster_path(movie), buffer.getvalue())


# The movies' own controls sit below each video, not over its bottom (where the loss strip is).
SCRIPT = """
for (const fig of document.querySelectorAll("figure.movie")) {
  const video = fig.querySelector("video"), button = fig.querySelector("button"),
        slider = fig.querySelector("input");
  button.addEventListener("click", () => video.paused ? video.play() : video.pause());
  video.addEventListener("play", () => { button.textContent = "pause"; });
  video.addEventListener("pause", () => { button.textContent = "play"; });
  video.addEventListener("timeupdate", () => {
    if (video.duration) slider.value = String(1000 * video.currentTime / video.duration);
  });
  slider.addEventListener("input", () => {
    if (video.duration) video.currentTime = Number(slider.value) / 1000 * video.duration;
  });
}
"""


# Where the explorer shows each step of the algorithm: a panel id for its `view=` hash key.
STEP_VIEWS = {
    "encode": "embed",
    "detect": "attend",
    "retrieve": "attend",
    "produce": "attend",
    "nudge": "think",
}
PANEL_NAMES = {"embed": "Embed", "attend": "Attend", "think": "Think"}
# The figures the guided read opens with, best first (the first the run drew is used).
PICTURES = {
    "algorithm": ["fig15_trace_nudge", "fig10_landscape_summary", "fig13_trace_attention"],
    "circuit": ["supp_circuit"],
    "curve": ["fig03_learning_curve"],
}


def step_headlines(rows: list[dict]) -> list[dict]:
    """The first measure of each step of the algorithm, in order: the five numbers the report
    opens with and `reproduce`'s summary prints."""
    seen, first = set(), []
    for row in rows:
        if row["step"] not in seen:
            seen.add(row["step"])
            first.append(row)
    return first


def explorer_view(step: str, measure: str, n_layers: int) -> str:
    """The explorer panel that shows `step` ("3 retrieve"): its layer is the head the measure
    names ("head 0.0"), else the last layer; "" when the explorer has no panel for it."""
    view = STEP_VIEWS.get(step.split()[-1] if step else "", "")
    if view in ("attend", "think"):
        found = re.search(r"head (\d+)\.\d+", measure)
        view += f"-{found.group(1) if found and view == 'attend' else n_layers - 1}"
    return view


def _link(report: Report, folder: Path, hash_: str, text: str) -> str:
    if not report.explorer:
        return ""
    return (
        f'<a class="to-explorer" href="{_rel(report.explorer, folder)}#'
        f'{escape(hash_, quote=True)}">{escape(text)} →</a>'
    )


def _figure(path: Path, folder: Path, focus: str, cls: str = "") -> str:
    caption = CAPTIONS.get(path.stem, "").format(focus=focus)
    size = _png_size(path)
    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
    return (
        f'<figure id="{escape(path.stem, quote=True)}"{cls}><img loading="lazy"{dims} '
        f'src="{_rel(path, folder)}" alt="{escape(path.stem, quote=True)}"><figcaption>'
        f"<b>{escape(path.stem)}</b>. {escape(caption)}</figcaption></figure>"
    )


def _split_shown(shown: str) -> tuple[str, str]:
    """A measure's shown text as its headline number and the rest ("0.95; 6 of 7 steps...")."""
    cut = re.search(r"; | \(", shown)
    if not cut:
        return shown, ""
    return shown[: cut.start()], shown[cut.end() :].rstrip(")")


def _steps_html(report: Report, folder: Path) -> str:
    cards = []
    for row in step_headlines(report.algorithm):
        number, rest = _split_shown(str(row["value"]))
        view = explorer_view(row["step"], row["measure"], report.run.cfg.n_layers)
        panel = (
            PANEL_NAMES[view.split("-")[0]]
            + (
                f" · layer {view.split('-')[1]}"
                if "-" in view and report.run.cfg.n_layers > 1
                else ""
            )
            if view
            else ""
        )
        link = (
            _link(report, folder, f"view={view}", f"see it in the explorer's {panel}")
            if view
            else ""
        )
        cards.append(
            f'<li class="step"><span class="step-name">{escape(row["step"])}</span>'
            f'<span class="step-value">{escape(number)}</span><span class="step-'
            f'measure">{escape(row["measure"])}{"; " + escape(rest) if rest else ""}'
            f"</span>{link}</li>"
        )
    return f'<ol class="steps">{"".join(cards)}</ol>' if cards else ""


def _section(key: str, title: str, content: str, folded: bool = False) -> str:
    """A section that folds (open unless `folded`), its heading the anchor the contents link to."""
    return (
        f'<details{"" if folded else " open"} id="{escape(key, quote=True)}"><summary><h2>'
        f"{escape(title)}</h2></summary>{content}</details>"
    )


def _movies_html(movies: list[Path], folder: Path) -> str:
    items = []
    for path in movies:
        gif, poster = path.with_suffix(".gif"), poster_path(path)
        fallback = f' <a href="{_rel(gif, folder)}">GIF</a>' if gif.exists() else ""
        poster_attr = f' poster="{_rel(poster, folder)}"' if poster.exists() else ""
        items.append(
            f'<figure class="movie" id="{escape(path.stem, quote=True)}"><video '
            f'loop muted playsinline preload="metadata"{poster_attr} '
            f'src="{_rel(path, folder)}"></video><div class="controls"><button '
            f'type="button">play</button><input type="range" min="0" max="1000" '
            f'value="0" aria-label="position in {escape(path.stem, quote=True)}">'
            f"{fallback}</div><figcaption><b>{escape(path.stem)}</b>, one frame "
            f"per checkpoint.</figcaption></figure>"
        )
    return "".join(items)


def _number(value, fmt: str) -> str:
    """A metric for the page: '-' when the run has none (never 'nan')."""
    return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def render(report: Report, folder: Path) -> str:
    """The report's HTML, with every path relative to `folder` and every string escaped: a
    guided read (the algorithm's steps, the circuit, the learning curve, each linked into the
    explorer), then every figure and movie, then configuration and timings, folded."""
    run, config = report.run, report.run.config
    focus = getattr(run.task, "focus", "") or "trigger"
    metrics = run.metrics[-1] if run.metrics else {}
    by_stem = {p.stem: p for p in report.figures}
    chosen = {
        key: next((by_stem[n] for n in names if n in by_stem), None)
        for key, names in PICTURES.items()
    }
    shown = {p for p in chosen.values() if p is not None}
    head = [
        f'<header class="top"><h1>What the model learned: {escape(config["task"])}</h1>',
        f'<p class="facts">{escape(str(config.get("preset") or "custom"))} · '
        f"{run.cfg.n_params} parameters · step {escape(str(metrics.get('step', '-')))}: "
        f"held-out rule error <b>{_number(metrics.get('rule_error'), '.2%')}</b>, loss "
        f"{_number(metrics.get('val_loss'), '.4f')} · run folder "
        f"<code>{escape(str(run.path))}</code></p>",
    ]
    if report.explorer:
        head.append(
            f'<p class="explorer"><a id="explorer-link" href="'
            f'{_rel(report.explorer, folder)}">Open the live explorer</a>: every '
            f"number recomputed from the weights, with a slider over checkpoints.</p>"
        )
    for note in report.notes:
        head.append(f'<p class="note">{escape(note)}</p>')
    head.append("</header>")
    sections = []
    steps = _steps_html(report, folder)
    if steps or chosen["algorithm"]:
        picture = _figure(chosen["algorithm"], folder, focus) if chosen["algorithm"] else ""
        sections.append(
            (
                "algorithm",
                "The algorithm, step by step",
                f'<div class="lead-row">{picture}{steps}</div>',
            )
        )
    if report.circuit or chosen["circuit"]:
        text = circuit_html(report.circuit) if report.circuit else ""
        link = _link(report, folder, "view=edges&only=circuit", "run the circuit alone")
        sections.append(
            (
                "circuit",
                "The circuit",
                (_figure(chosen["circuit"], folder, focus) if chosen["circuit"] else "")
                + f"<p>{link}</p>"
                + text,
            )
        )
    if chosen["curve"]:
        link = _link(report, folder, "view=input", "replay training checkpoint by checkpoint")
        sections.append(
            (
                "curve",
                "The learning curve",
                _figure(chosen["curve"], folder, focus) + f"<p>{link}</p>",
            )
        )
    if report.algorithm:
        columns = [
            c
            for c in ("step", "measure", "value", "meaning")
            if any(c in row for row in report.algorithm)
        ]
        sections.append(
            ("measures", "Every measure of the algorithm", _table(report.algorithm, columns), True)
        )
    rest = [p for p in report.figures if p not in shown]
    if rest:
        sections.append(
            ("figures", "All figures", "".join(_figure(p, folder, focus) for p in rest))
        )
    if report.movies:
        sections.append(("movies", "Learning dynamics", _movies_html(report.movies, folder)))
    settings = (
        "<div class='cols'>"
        + "".join(
            _table([{"field": k, "value": v} for k, v in config[part].items()], ["field", "value"])
            for part in ("model", "recipe")
            if part in config
        )
        + "</div>"
    )
    sections.append(("configuration", "Configuration", settings, True))
    if report.stages:
        rows = [{"stage": name, "seconds": f"{seconds:.1f}"} for name, seconds in report.stages]
        rows.append({"stage": "total", "seconds": f"{sum(s for _, s in report.stages):.1f}"})
        sections.append(("time", "Time per stage", _table(rows, ["stage", "seconds"]), True))
    toc = "".join(f'<li><a href="#{s[0]}">{escape(s[1])}</a></li>' for s in sections)
    if report.explorer:
        toc += f'<li><a href="{_rel(report.explorer, folder)}">The live explorer</a></li>'
    body = "\n".join(head + [_section(*s) for s in sections])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>flatformer report: {escape(config["task"])}</title>
<style>
{TOKENS}
{STYLE}
</style></head><body>
<div class="page"><nav class="toc" aria-label="contents"><b>Contents</b><ul>{toc}</ul></nav>
<main>
{body}
</main></div>
<script>{SCRIPT}</script>
</body></html>
"""


def write_report(report: Report, path: Path) -> Path:
    from ..store.write import atomic_write

    path = Path(path)
    write_posters(report.movies)
    atomic_write(path, render(report, path.parent).encode())
    return path
