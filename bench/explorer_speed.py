"""How fast the explorer page is, measured inside Chromium with performance.now().

    python bench/explorer_speed.py [--run DIR] [--loads 5] [--changes 60] [--screenshots docs]

Without --run it trains the paper model (default recipe, about 5 s) into a temporary folder.
Prints two figures for the paper model: time from navigation to a ready page (self-check run,
every panel drawn; budget 1 s), and the time of a full re-render after a knob change (budget
16 ms, one frame), both as the script's own time and with the browser's layout forced.
With --screenshots DIR it also saves one PNG per panel (DIR/explorer_<panel>.png).

Then the page of a model brought from elsewhere at the size issue 26 names: a float32 GPT-2
folder of just under 1M parameters (5 layers, 4 heads, d_model 128), imported as a user would
(`flatformer import`). Its figures: navigation to open (the self-check run and the first
viewport drawn; budget 3 s) and to ready (every panel drawn, the 20 heads' circuits last).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
READY = "() => document.documentElement.dataset.ready === 'true'"

# Each knob change toggles one knob, alternating over heads, MLP, positions and beta, and
# times the synchronous re-render the change event triggers (every panel recomputed).
CHANGES = """(n) => {
  const heads = [...document.querySelectorAll('#toolbar input[id^="head-"]')];
  const boxes = heads.concat([document.getElementById('mlp-0'), document.getElementById('pos')]);
  const script = [], layout = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    if (i % 4 === 3) {
      const beta = document.getElementById('beta');
      beta.value = beta.value === '1' ? '0.5' : '1';
      beta.dispatchEvent(new Event('input'));
    } else {
      boxes[i % boxes.length].click();
    }
    const t1 = performance.now();
    document.body.offsetHeight;                 // force style and layout now
    script.push(t1 - t0);
    layout.push(performance.now() - t0);
  }
  return {script, layout, renders: explorer.renders};
}"""

PANELS = [
    "input",
    "toolbar",
    "embed",
    "attend-0",
    "think-0",
    "readout",
    "knobs",
    "circuits",
    "lens",
]


def median_and_p90(values):
    ordered = sorted(values)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a paper-2d run folder [train one]")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--changes", type=int, default=60)
    parser.add_argument("--screenshots", type=Path, help="save one PNG per panel here")
    parser.add_argument("--big-loads", type=int, default=3, help="loads of the 1M model's page")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from flatformer.explorer import render_html
    from flatformer.store.runs import load_run

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run
        if run_dir is None:
            from flatformer.training.jobs import build_job
            from flatformer.training.trainer import train

            job, run_dir = build_job(
                "plus-last-even", None, "default", 0, None, Path(tmp) / "paper", []
            )
            train(job)
        run = load_run(run_dir)
        n_checkpoints = len(run.steps)  # read now: a temporary run folder is gone by the report
        page_file = Path(tmp) / "explorer.html"
        page_file.write_text(render_html(run), encoding="utf-8")
        size = page_file.stat().st_size
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            ready = []
            for _ in range(args.loads):
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                page.goto(page_file.as_uri())
                page.wait_for_function(READY)
                ready.append(page.evaluate("explorer.readyAt"))
                if not page.evaluate("explorer.selfCheck.ok"):
                    raise SystemExit("the page's self-check failed")
                context.close()
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(page_file.as_uri())
            page.wait_for_function(READY)
            page.evaluate(CHANGES, 8)  # warm the JIT, as a user's first clicks do
            timing = page.evaluate(CHANGES, args.changes)
            big = time_big_model(browser, Path(tmp), args.big_loads)
            if args.screenshots:
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                page.goto(page_file.as_uri())
                page.wait_for_function(READY)
                shoot(page, args.screenshots)
            version = browser.version
            browser.close()

    load = os.getloadavg()[0]
    r_med, r_max = statistics.median(ready), max(ready)
    s_med, s_p90 = median_and_p90(timing["script"])
    l_med, l_p90 = median_and_p90(timing["layout"])
    print(
        f"explorer speed: {run.cfg.n_params}-parameter {run.config.get('preset')} model, "
        f"{n_checkpoints} checkpoints, {size / 1e6:.2f} MB page, Chromium {version}, "
        f"machine load {load:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"  navigation to ready ({args.loads} cold loads): median {r_med:.0f} ms, "
        f"worst {r_max:.0f} ms (budget 1000 ms)"
    )
    print(
        f"  full re-render after a knob change ({args.changes} changes): "
        f"median {s_med:.1f} ms, p90 {s_p90:.1f} ms (budget 16 ms); "
        f"with layout forced: median {l_med:.1f} ms, p90 {l_p90:.1f} ms"
    )

    n_big, size_big, opened, drawn = big
    print(
        f"  imported float32 GPT-2 of {n_big} parameters, {size_big / 1e6:.1f} MB page "
        f"({args.big_loads} cold loads): open median {statistics.median(opened):.2f} s, "
        f"worst {max(opened):.2f} s (budget 3 s); every panel drawn: median "
        f"{statistics.median(drawn):.1f} s"
    )


def write_gpt2_folder(folder: Path) -> None:
    """A Hugging Face GPT-2 folder (config.json, model.safetensors, tokenizer.json) of random
    float32 weights, its LayerNorms and biases moved off 1 and 0 so they matter."""
    import json

    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    chars, d, L, T = "abcdefghi \n", 128, 5, 32
    V = len(chars)

    def normal(*shape, scale=0.02):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    state = {"transformer.wte.weight": normal(V, d), "transformer.wpe.weight": normal(T, d)}
    for i in range(L):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            state[h + ln + ".weight"] = 1 + normal(d, scale=0.3)
            state[h + ln + ".bias"] = normal(d, scale=0.3)
        for name, (n_in, n_out) in {
            "attn.c_attn": (d, 3 * d),
            "attn.c_proj": (d, d),
            "mlp.c_fc": (d, 4 * d),
            "mlp.c_proj": (4 * d, d),
        }.items():
            state[h + name + ".weight"] = normal(n_in, n_out)  # Conv1D: (in, out)
            state[h + name + ".bias"] = normal(n_out, scale=0.3)
    state["transformer.ln_f.weight"] = 1 + normal(d, scale=0.3)
    state["transformer.ln_f.bias"] = normal(d, scale=0.3)
    folder.mkdir(parents=True)
    save_file(state, str(folder / "model.safetensors"))
    config = {"model_type": "gpt2", "n_embd": d, "n_head": 4, "n_layer": L}
    config.update(vocab_size=V, n_positions=T)
    (folder / "config.json").write_text(json.dumps(config))
    vocab = {c: i for i, c in enumerate(chars)}
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))


def time_big_model(browser, tmp: Path, loads: int):
    """Seconds from navigation to open and to ready, for each cold load of the 1M model's page."""
    from flatformer.explorer import render_html
    from flatformer.importers.run import read_source, write_run
    from flatformer.store.runs import load_run

    write_gpt2_folder(tmp / "gpt2")
    run_dir = write_run(*read_source(tmp / "gpt2", None, None), tmp / "imported")
    page_file = tmp / "imported.html"
    page_file.write_text(render_html(run_dir), encoding="utf-8")
    opened, drawn = [], []
    for _ in range(loads):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(page_file.as_uri())
        page.wait_for_function(READY, timeout=300_000)
        if not page.evaluate("explorer.selfCheck.ok"):
            raise SystemExit("the imported model's self-check failed")
        opened.append(page.evaluate("explorer.openedAt") / 1000)
        drawn.append(page.evaluate("explorer.readyAt") / 1000)
        context.close()
    return load_run(run_dir).cfg.n_params, page_file.stat().st_size, opened, drawn


def shoot(page, folder: Path):
    """One PNG per panel, in the page's default view, then the knobs panel with a head off."""
    folder.mkdir(parents=True, exist_ok=True)
    # For pictures: the toolbar stays in place, and every panel is laid out at once.
    page.add_style_tag(content="#toolbar { position: static; }")
    page.screenshot(path=folder / "explorer_page.png")
    for panel in PANELS:
        if panel == "knobs":
            page.uncheck("#head-0-0")
        page.locator(f"#{panel}").screenshot(path=folder / f"explorer_{panel}.png")
        if panel == "knobs":
            page.check("#head-0-0")
    print(f"  screenshots: {folder}/explorer_{{page,{','.join(PANELS)}}}.png")


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "The explorer in Chromium"):
        main()
