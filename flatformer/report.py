"""The run report: one HTML page that opens offline and links everything `reproduce` made."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from .runs import Run

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
    stages: list[tuple[str, float]] = field(default_factory=list)   # (stage, seconds)
    figures: list[Path] = field(default_factory=list)
    movies: list[Path] = field(default_factory=list)                 # .mp4 (a .gif beside it)
    algorithm: list[dict] = field(default_factory=list)              # {step, measure, value, ...}
    explorer: Path | None = None
    notes: list[str] = field(default_factory=list)
    circuit: dict | None = None       # edges.methods.find_circuits of the checkpoint


def _rel(path: Path, folder: Path) -> str:
    return escape(Path(os.path.relpath(path, folder)).as_posix(), quote=True)


def _table(rows: list[dict], columns: list[str]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(_fmt(r.get(c, '')))}</td>" for c in columns)
                   + "</tr>" for r in rows)
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
    rows = [{"edge": f"{s} → {d}", "exact effect": f"{effect[(s, d)]:+.4f}"}
            for s, d in c["edges"]]
    def num(x):
        return "-" if x is None else f"{x:.3f}"
    methods = [{"method": name, "ROC-AUC": num(m[key].get("auc")),
                "Spearman": num(m[key].get("spearman")), "seconds": num(m[key]["seconds"])}
               for key, name in (("eap", "EAP"), ("eap_ig", "EAP-IG"), ("acdc", "ACDC"))
               if key in m]
    return (f"<p>{c['edges_kept']} of {c['edges_total']} edges keep "
            f"{escape(faith)} of the {escape(found['metric'])} ({escape(found['ablation'])} "
            f"ablation, {found['prompts']} held-out prompts; "
            f"{'minimal' if c['minimal'] else 'not minimal'}). Exact effect: the change of the "
            f"metric when the edge alone is ablated.</p><div class='cols'>"
            + _table(rows, ["edge", "exact effect"])
            + (_table(methods, ["method", "ROC-AUC", "Spearman", "seconds"]) if methods else "")
            + "</div>")


def _png_size(path: Path) -> tuple[int, int] | None:
    """A PNG's width and height from its header (the page reserves their space before the
    lazily loaded image arrives); None when it is not a PNG."""
    try:
        head = Path(path).read_bytes()[:24]
    except OSError:
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

    from .runs import atomic_write
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


def _section(key: str, title: str, content: str) -> str:
    """A section that folds (open at first), its heading the anchor the contents link to."""
    return (f'<details open id="{escape(key, quote=True)}"><summary><h2>{escape(title)}</h2>'
            f"</summary>{content}</details>")


def render(report: Report, folder: Path) -> str:
    """The report's HTML, with every path relative to `folder` and every string escaped."""
    run, config = report.run, report.run.config
    focus = getattr(run.task, "focus", "") or "trigger"
    metrics = run.metrics[-1] if run.metrics else {}
    head = [f"<h1>flatformer report: {escape(config['task'])}</h1>",
            f"<p>Run folder <code>{escape(str(run.path))}</code>; "
            f"{run.cfg.n_params} parameters; final held-out rule error "
            f"<b>{metrics.get('rule_error', float('nan')):.2%}</b>, loss "
            f"{metrics.get('val_loss', float('nan')):.4f} at step {metrics.get('step', '?')}.</p>"]
    if report.explorer:
        head.append(f'<p class="explorer"><a id="explorer-link" href="'
                    f'{_rel(report.explorer, folder)}">Open the live explorer</a>: every '
                    f'number recomputed from the weights, with a slider over checkpoints.</p>')
    for note in report.notes:
        head.append(f'<p class="note">{escape(note)}</p>')
    sections = [("configuration", "Configuration", "<div class='cols'>" + _table(
        [{"field": k, "value": v} for k, v in config["model"].items()], ["field", "value"])
        + _table([{"field": k, "value": v} for k, v in config["recipe"].items()],
                 ["field", "value"]) + "</div>")]
    if report.algorithm:
        columns = [c for c in ("step", "measure", "value", "meaning") if
                   any(c in row for row in report.algorithm)]
        sections.append(("algorithm", "The algorithm, measured",
                         _table(report.algorithm, columns)))
    if report.circuit:
        sections.append(("circuit", "The circuit", circuit_html(report.circuit)))
    if report.figures:
        items = []
        for path in report.figures:
            caption = CAPTIONS.get(path.stem, "").format(focus=focus)
            size = _png_size(path)
            dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
            items.append(f'<figure id="{escape(path.stem, quote=True)}"><img loading="lazy"'
                         f'{dims} src="{_rel(path, folder)}" alt="{escape(path.stem, quote=True)}">'
                         f"<figcaption><b>{escape(path.stem)}</b>. {escape(caption)}"
                         f"</figcaption></figure>")
        sections.append(("figures", "Figures", "".join(items)))
    if report.movies:
        items = []
        for path in report.movies:
            gif, poster = path.with_suffix(".gif"), poster_path(path)
            fallback = f' <a href="{_rel(gif, folder)}">GIF</a>' if gif.exists() else ""
            poster_attr = f' poster="{_rel(poster, folder)}"' if poster.exists() else ""
            items.append(f'<figure class="movie" id="{escape(path.stem, quote=True)}"><video '
                         f'loop muted playsinline preload="metadata"{poster_attr} '
                         f'src="{_rel(path, folder)}"></video><div class="controls"><button '
                         f'type="button">play</button><input type="range" min="0" max="1000" '
                         f'value="0" aria-label="position in {escape(path.stem, quote=True)}">'
                         f"{fallback}</div><figcaption><b>{escape(path.stem)}</b>, one frame "
                         f"per checkpoint.</figcaption></figure>")
        sections.append(("movies", "Learning dynamics", "".join(items)))
    if report.stages:
        rows = [{"stage": name, "seconds": f"{seconds:.1f}"} for name, seconds in report.stages]
        rows.append({"stage": "total", "seconds": f"{sum(s for _, s in report.stages):.1f}"})
        sections.append(("time", "Time per stage", _table(rows, ["stage", "seconds"])))
    toc = "".join(f'<li><a href="#{key}">{escape(title)}</a></li>' for key, title, _ in sections)
    if report.explorer:
        toc += f'<li><a href="{_rel(report.explorer, folder)}">The live explorer</a></li>'
    body = "\n".join(head + [_section(*s) for s in sections])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>flatformer report: {escape(config['task'])}</title>
<style>
body {{ font: 15px/1.5 system-ui, sans-serif; margin: 0; color: #222; }}
.page {{ display: grid; grid-template-columns: 13em minmax(0, 1100px); gap: 2em;
         padding: 0 1em; }}
nav.toc {{ position: sticky; top: 0; align-self: start; padding: 1.5em 0; font-size: 14px; }}
nav.toc ul {{ list-style: none; padding: 0; margin: .5em 0; }} nav.toc li {{ margin: .3em 0; }}
nav.toc a {{ color: #1f4e99; text-decoration: none; }}
@media (max-width: 800px) {{
  .page {{ display: block; }}
  nav.toc {{ background: #fff; border-bottom: 1px solid #ddd; padding: .4em 0; z-index: 1; }}
  nav.toc ul {{ display: flex; flex-wrap: wrap; gap: 0 1em; margin: 0; }}
}}
main {{ padding-bottom: 3em; }}
h1 {{ font-size: 1.6em; }} summary {{ cursor: pointer; }}
summary h2 {{ display: inline-block; margin: 1.2em 0 .4em; }}
details {{ border-bottom: 1px solid #ddd; scroll-margin-top: 1em; }}
table {{ border-collapse: collapse; margin: .5em 1em .5em 0; font-size: 13px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 8px; text-align: left; }}
th {{ background: #f4f4f4; }}
.cols {{ display: flex; flex-wrap: wrap; align-items: flex-start; }}
figure {{ margin: 1.5em 0; scroll-margin-top: 1em; }}
figure img, video {{ max-width: 100%; height: auto; border: 1px solid #eee; display: block; }}
.controls {{ display: flex; align-items: center; gap: .8em; margin: .3em 0; }}
.controls input {{ flex: 1; max-width: 30em; }}
figcaption {{ color: #444; font-size: 14px; }}
.explorer a {{ font-weight: bold; }} .note {{ color: #8a5a00; }}
</style></head><body>
<div class="page"><nav class="toc" aria-label="contents"><b>Contents</b><ul>{toc}</ul></nav>
<main>
{body}
</main></div>
<script>{SCRIPT}</script>
</body></html>
"""


def write_report(report: Report, path: Path) -> Path:
    from .runs import atomic_write
    path = Path(path)
    write_posters(report.movies)
    atomic_write(path, render(report, path.parent).encode())
    return path
