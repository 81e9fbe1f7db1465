// The playground page: controls mirrored to the URL hash, training in a Worker, live views
// drawn at most once per animation frame (curves, embedding plane over the output landscape,
// Q/K plane, attention pattern), a step slider over kept checkpoints, head switches with their
// KL (FlatModel's knobs, the explorer's definition), and "Download run" (FlatRunZip). Every
// string shown goes through textContent, never innerHTML.
"use strict";

(() => {
  const DATA = JSON.parse(document.getElementById("flatformer-data").textContent);
  const M = {...FlatModel, ...FlatMeasures}, K = FlatTasks;
  const CHOICES = ["task", "preset", "seed", "steps", "lr", "batch_size", "weight_decay"];
  const state = {task: "plus-last-even", preset: "", seed: 0, steps: 20000, lr: 3e-3, batch_size: 8,
    weight_decay: 1e-2};
  const run = {worker: null, config: null, flat: null, metrics: [], checkpoints: new Map(), step: 0,
    seconds: 0, running: false, done: false, view: null, headsOff: new Set(), resolve: null, dirty: true};

  const el = (tag, attrs = {}, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    for (const k of CHOICES) {
      if (!h.has(k)) continue;
      const v = h.get(k);
      state[k] = ["task", "preset"].includes(k) ? v : Number(v);
    }
    if (!K.TASKS[state.task]) state.task = "plus-last-even";
    const own = taskDefaults();
    for (const k of ["steps", "lr"]) if (!h.has(k)) state[k] = own[k];
  }
  // The default recipe's steps and learning rate, or the task's own (induction: 3,000 at 0.01).
  const taskDefaults = () => ({steps: 20000, lr: 3e-3, ...(K.TASKS[state.task].defaults || {})});
  const writeHash = () => history.replaceState(null, "", "#" + new URLSearchParams(
    CHOICES.filter((k) => state[k] !== "").map((k) => [k, String(state[k])])).toString());

  // --- layout -------------------------------------------------------------------------------
  const app = document.getElementById("app");
  app.appendChild(el("h1", {}, "flatformer playground"));
  const bar = el("div", {class: "bar"});
  app.appendChild(bar);
  const inputs = {};
  function field(key, label, node) {
    const wrap = el("label", {}, label + " ");
    wrap.appendChild(node);
    bar.appendChild(wrap);
    inputs[key] = node;
    node.addEventListener("change", () => {
      state[key] = node.tagName === "SELECT" ? node.value : Number(node.value);
      if (key === "task") {
        state.preset = "";
        const own = taskDefaults();
        state.steps = own.steps; state.lr = own.lr;
      }
      syncInputs(); writeHash();
    });
  }
  const select = (options) => {
    const s = el("select");
    for (const o of options) s.appendChild(el("option", {value: o}, o));
    return s;
  };
  field("task", "task", select(Object.keys(K.TASKS)));
  field("preset", "preset", select(Object.keys(FlatSession.PRESETS)));
  for (const [k, label, step] of [["seed", "seed", 1], ["lr", "learning rate", "any"],
    ["steps", "steps", 100], ["batch_size", "batch", 1], ["weight_decay", "weight decay", "any"]]) {
    field(k, label, el("input", {type: "number", step: String(step), min: "0"}));
  }
  const buttons = {};
  for (const [k, label] of [["train", "Train"], ["pause", "Pause"], ["explore", "Explore these weights"],
    ["download", "Download run"]]) {
    buttons[k] = el("button", {id: `pg-${k}`}, label);
    bar.appendChild(buttons[k]);
  }
  const status = el("p", {id: "pg-status"}, "Choose a task and press Train.");
  app.appendChild(status);
  const sliderWrap = el("div", {class: "bar"});
  const slider = el("input", {type: "range", min: "0", max: "0", value: "0", id: "pg-slider"});
  const sliderLabel = el("span", {}, "");
  sliderWrap.append(el("span", {}, "checkpoint "), slider, sliderLabel);
  app.appendChild(sliderWrap);
  const grid = el("div", {class: "pg-grid"});
  app.appendChild(grid);
  const canvases = {};
  for (const [k, title] of [["curves", "held-out loss (blue) and rule error (red)"],
    ["plane", "embedding plane over the output landscape"], ["qk", "Q/K plane of the current sequence"],
    ["attn", "attention pattern of the current sequence"]]) {
    const box = el("figure", {});
    canvases[k] = el("canvas", {width: "340", height: "300", id: `pg-${k}`});
    box.append(el("figcaption", {}, title), canvases[k]);
    grid.appendChild(box);
  }
  const seqWrap = el("div", {class: "bar"});
  const seqInput = el("input", {type: "text", size: "40", id: "pg-seq"});
  const knobs = el("span", {id: "pg-knobs"});
  const klOut = el("span", {id: "pg-kl"}, "");
  seqWrap.append(el("span", {}, "sequence "), seqInput, knobs, klOut);
  app.appendChild(seqWrap);
  // The explorer's own panels on the weights on show (Explorer.mount, page.js), on demand.
  const explorerBox = el("div", {id: "pg-explorer"});
  app.appendChild(explorerBox);

  function syncInputs() {
    const task = K.TASKS[state.task];
    if (!state.preset || !FlatSession.PRESETS[state.preset]) state.preset = task.preset;
    for (const k of CHOICES) inputs[k].value = String(state[k]);
    if (!seqInput.value || seqInput.dataset.task !== state.task) {
      seqInput.value = task.demo; seqInput.dataset.task = state.task;
    }
  }

  // --- training -----------------------------------------------------------------------------
  function start(choices) {
    if (run.worker) run.worker.terminate();
    const src = DATA.workerSource;
    run.worker = new Worker(URL.createObjectURL(new Blob([src], {type: "text/javascript"})));
    Object.assign(run, {config: null, flat: null, metrics: [], checkpoints: new Map(), step: 0,
      running: true, done: false, view: null, error: null});
    run.worker.onmessage = (e) => receive(e.data);
    run.worker.postMessage({start: choices, held: DATA.held[choices.task], version: DATA.version});
    run.choices = choices;
    buttons.pause.textContent = "Pause";
  }

  function receive(msg) {
    if (msg.error) { run.error = msg.error; run.running = false; status.textContent = "error: " + msg.error; return; }
    if (msg.config) { run.config = msg.config; run.recipe = msg.recipe; return; }
    if (msg.reset) run.checkpoints = new Map();
    for (const [s, ck] of msg.checkpoints) run.checkpoints.set(s, ck);
    Object.assign(run, {flat: msg.flat, metrics: msg.metrics, step: msg.step, seconds: msg.seconds,
      candidates: msg.candidates, dirty: true});
    if (msg.done) {
      run.done = true; run.running = false;
      const last = run.metrics[run.metrics.length - 1];
      if (run.resolve) {
        run.resolve({rule_error: last.rule_error, loss: last.val_loss, steps: run.step, seconds: run.seconds});
        run.resolve = null;
      }
    }
  }

  buttons.train.onclick = () => start({...state});
  buttons.pause.onclick = () => {
    if (!run.worker || run.done) return;
    run.running = !run.running;
    run.worker.postMessage(run.running ? {resume: true} : {pause: true});
    buttons.pause.textContent = run.running ? "Pause" : "Resume";
    if (run.running) run.view = null;
    run.dirty = true;
  };
  // Pause, then mount the explorer on the weights on show: the step the slider picked, or the
  // latest (its hash stays the playground's).
  function explore() {
    if (!run.config || !run.flat) return null;
    if (run.running) buttons.pause.click();
    const s = shown(), task = K.TASKS[run.config.task];
    const data = PlaygroundExplorer.explorerData(run, DATA.explorer, run.choices.preset || task.preset,
      currentTokens(run.config.model), s.step === run.step || run.checkpoints.has(s.step) ? s.step : run.step,
      PlaygroundExplorer.meanWindows(task, DATA.held[run.config.task], run.config.model.n_ctx));
    explorerBox.textContent = "";
    return Explorer.mount(explorerBox, data, {standalone: false});
  }
  buttons.explore.onclick = explore;
  buttons.download.onclick = () => {
    const buf = exportRun();
    if (!buf) return;
    const a = el("a", {href: URL.createObjectURL(new Blob([buf], {type: "application/zip"})),
      download: `${folderName()}.zip`});
    a.click();
  };

  const folderName = () => `${run.config.task}-seed${run.config.seed}`;

  function exportRun() {
    if (!run.config || !run.checkpoints.size) return null;
    const cfg = run.config.model;
    return FlatRunZip.runZip(run.config, run.metrics, run.checkpoints, FlatModel.paramShapes(cfg), folderName());
  }

  // --- the model on show: the latest weights, or the checkpoint the slider picked -------------
  function shown() {
    if (!run.config || !run.flat) return null;
    const steps = [...run.checkpoints.keys()].sort((a, b) => a - b);
    let flat = run.flat, step = run.step;
    if (run.view !== null && run.checkpoints.has(run.view)) { flat = run.checkpoints.get(run.view).flat; step = run.view; }
    return {model: {cfg: run.config.model, w: M.unpack(run.config.model, flat)}, step, steps};
  }

  function currentTokens(cfg) {
    const task = K.TASKS[run.config.task];
    const toks = K.encode(task, seqInput.value).filter((t) => t >= 0);
    return toks.slice(-cfg.n_ctx);
  }

  // KL(original || changed) of the next-token distribution at the last position, with the
  // given heads off: FlatModel's knob, the same as `flatformer analyze`'s "head L.H zero".
  function klOf(model, tokens, headsOff) {
    const a = M.forward(model, tokens).logits, b = M.forward(model, tokens, {headsOff}).logits;
    return M.kl(a[a.length - 1], b[b.length - 1]);
  }

  // --- drawing --------------------------------------------------------------------------------
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"];
  const color = (i) => COLORS[i % COLORS.length];

  function drawCurves() {
    const c = canvases.curves, g = c.getContext("2d"), W = c.width, H = c.height;
    g.clearRect(0, 0, W, H);
    const rows = run.metrics;
    if (!rows.length) return;
    const total = run.recipe ? run.recipe.steps : rows[rows.length - 1].step || 1;
    const top = Math.max(...rows.map((r) => r.val_loss), 1e-9);
    const line = (key, scale, col) => {
      g.strokeStyle = col; g.beginPath();
      rows.forEach((r, i) => {
        const x = 30 + (W - 40) * r.step / total, y = H - 20 - (H - 30) * r[key] / scale;
        i ? g.lineTo(x, y) : g.moveTo(x, y);
      });
      g.stroke();
    };
    g.strokeStyle = "#999"; g.strokeRect(30, 10, W - 40, H - 30);
    line("val_loss", top, "#1f77b4");
    line("rule_error", 1, "#d62728");
    g.fillStyle = "#333"; g.font = "11px sans-serif";
    g.fillText(`loss ≤ ${top.toFixed(2)}`, 34, 22); g.fillText("rule error 0..1", 34, 36);
    g.fillText(`step ${total}`, W - 70, H - 6);
  }

  function plotPoints(c, pts, bounds, bg) {
    const g = c.getContext("2d"), W = c.width, H = c.height;
    g.clearRect(0, 0, W, H);
    if (bg) g.drawImage(bg, 0, 0, W, H);
    const X = (x) => (x - bounds.x0) / (bounds.x1 - bounds.x0) * W;
    const Y = (y) => (bounds.y1 - y) / (bounds.y1 - bounds.y0) * H;
    g.font = "10px sans-serif";
    for (const p of pts) {
      g.fillStyle = p.color; g.beginPath(); g.arc(X(p.x), Y(p.y), p.r || 3, 0, 2 * Math.PI); g.fill();
      if (p.label) { g.fillStyle = "#111"; g.fillText(p.label, X(p.x) + 3, Y(p.y) - 3); }
    }
  }

  function boundsOf(pts) {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const p of pts) { x0 = Math.min(x0, p.x); x1 = Math.max(x1, p.x); y0 = Math.min(y0, p.y); y1 = Math.max(y1, p.y); }
    const px = (x1 - x0) * 0.15 + 1e-6, py = (y1 - y0) * 0.15 + 1e-6;
    return {x0: x0 - px, x1: x1 + px, y0: y0 - py, y1: y1 + py};
  }

  const landscapeCanvas = document.createElement("canvas");
  function landscape(model, plane, bounds) {
    const G = 48, out = M.outputGrid(model, plane, bounds, G);
    landscapeCanvas.width = G; landscapeCanvas.height = G;
    const g = landscapeCanvas.getContext("2d"), img = g.createImageData(G, G);
    for (let i = 0; i < G * G; i++) {
      const hex = color(out.argmax[i]);
      img.data[4 * i] = parseInt(hex.slice(1, 3), 16); img.data[4 * i + 1] = parseInt(hex.slice(3, 5), 16);
      img.data[4 * i + 2] = parseInt(hex.slice(5, 7), 16); img.data[4 * i + 3] = 70;
    }
    g.putImageData(img, 0, 0);
    return landscapeCanvas;
  }

  function drawPlane(model, vocab) {
    const {cfg, w} = model, d = cfg.d_model, T = cfg.n_ctx;
    const pts = [];
    for (let v = 0; v < cfg.d_vocab; v++) {
      for (let t = 0; t < Math.min(T, 8); t++) {
        const e = [];
        for (let c = 0; c < d; c++) e.push(w["embed.W_E"].data[v * d + c] + w["pos_embed.W_pos"].data[t * d + c]);
        pts.push({e, v, t});
      }
    }
    const plane = M.pca2(pts.map((p) => p.e));
    const xy = pts.map((p) => { const [x, y] = M.projectPlane(plane, p.e); return {x, y, color: color(p.v), label: t0(p) ? vocab[p.v] : ""}; });
    function t0(p) { return p.t === 0; }
    const bounds = boundsOf(xy);
    const bg = cfg.n_layers === 1 && !M.attnOnly(cfg) ? landscape(model, plane, bounds) : null;
    plotPoints(canvases.plane, xy, bounds, bg);
  }

  function drawSequence(model) {
    const {cfg} = model, tokens = currentTokens(cfg);
    if (!tokens.length) return;
    const {cache} = M.forward(model, tokens, {headsOff: [...run.headsOff]});
    const q = cache["blocks.0.attn.hook_q"], k = cache["blocks.0.attn.hook_k"];
    const flatQ = q.map((r) => r[0]), flatK = k.map((r) => r[0]);
    const plane = M.pca2(flatQ.concat(flatK));
    const vocab = run.config.vocab;
    const pts = flatQ.map((x, i) => { const [a, b] = M.projectPlane(plane, x); return {x: a, y: b, color: "#1f77b4", label: `q${i}:${vocab[tokens[i]]}`}; })
      .concat(flatK.map((x, i) => { const [a, b] = M.projectPlane(plane, x); return {x: a, y: b, color: "#d62728", label: `k${i}`}; }));
    plotPoints(canvases.qk, pts, boundsOf(pts));
    const pat = cache[`blocks.${cfg.n_layers - 1}.attn.hook_pattern`][0];
    const c = canvases.attn, g = c.getContext("2d"), n = tokens.length, s = Math.min(c.width, c.height) / (n + 1);
    g.clearRect(0, 0, c.width, c.height);
    g.font = "10px sans-serif";
    for (let i = 0; i < n; i++) {
      g.fillStyle = "#111";
      g.fillText(vocab[tokens[i]], (i + 1) * s + 2, s * 0.7); g.fillText(vocab[tokens[i]], 2, (i + 1.7) * s);
      for (let j = 0; j < n; j++) {
        const a = j <= i ? pat[i][j] : 0;
        g.fillStyle = j <= i ? `rgba(31,119,180,${a})` : "#eee";
        g.fillRect((j + 1) * s, (i + 1) * s, s - 1, s - 1);
      }
    }
  }

  function drawKnobs(model) {
    const {cfg} = model;
    if (knobs.childElementCount !== cfg.n_layers * cfg.n_heads) {
      knobs.textContent = "";
      for (let l = 0; l < cfg.n_layers; l++) {
        for (let h = 0; h < cfg.n_heads; h++) {
          const box = el("input", {type: "checkbox", id: `pg-head-${l}-${h}`});
          box.onchange = () => { box.checked ? run.headsOff.add(`${l}.${h}`) : run.headsOff.delete(`${l}.${h}`); run.dirty = true; };
          const lab = el("label", {}, ` head ${l}.${h} off `);
          lab.prepend(box);
          knobs.appendChild(lab);
        }
      }
    }
    const tokens = currentTokens(cfg);
    klOut.textContent = run.headsOff.size && tokens.length
      ? `KL(original || heads off) = ${klOf(model, tokens, [...run.headsOff]).toFixed(6)} nats` : "";
  }

  function draw() {
    requestAnimationFrame(draw);
    if (!run.dirty) return;
    run.dirty = false;
    const s = shown();
    drawCurves();
    if (!s) return;
    const last = run.metrics[run.metrics.length - 1];
    status.textContent = `step ${run.step} of ${run.recipe ? run.recipe.steps : "?"}` +
      (run.candidates > 1 ? ` (trying ${run.candidates} candidate initialisations)` : "") +
      (last ? ` · held-out loss ${last.val_loss.toFixed(4)} · rule error ${(100 * last.rule_error).toFixed(2)}%` : "") +
      ` · ${run.seconds.toFixed(1)} s` + (run.done ? " · done" : run.running ? "" : " · paused");
    slider.max = String(Math.max(0, s.steps.length - 1));
    if (run.view === null) slider.value = slider.max;
    sliderLabel.textContent = ` step ${s.step}`;
    drawPlane(s.model, run.config.vocab);
    drawSequence(s.model);
    drawKnobs(s.model);
    frames += 1;
  }
  let frames = 0;
  slider.oninput = () => {
    const steps = [...run.checkpoints.keys()].sort((a, b) => a - b);
    run.view = steps[Number(slider.value)];
    run.dirty = true;
  };
  seqInput.oninput = () => { run.dirty = true; };

  readHash(); syncInputs(); writeHash();
  requestAnimationFrame(draw);

  // For tests and scripting.
  window.flatformer = {
    train(opts = {}) {
      Object.assign(state, {preset: ""}, opts.task ? {task: opts.task} : {});
      const own = taskDefaults();
      Object.assign(state, {steps: own.steps, lr: own.lr}, opts);
      syncInputs(); writeHash();
      return new Promise((resolve, reject) => {
        run.resolve = resolve;
        start({...state});
        const check = setInterval(() => { if (run.error) { clearInterval(check); reject(new Error(run.error)); } if (run.done) clearInterval(check); }, 100);
      });
    },
    pause() { if (run.running) buttons.pause.click(); },
    explore: () => (explore() ? {selfCheck: window.explorer.selfCheck, step: window.explorer.state.step} : null),
    exportRun: () => Promise.resolve(exportRun()),
    kl(prompt, headsOff) {
      const s = shown(), task = K.TASKS[run.config.task];
      return klOf(s.model, K.encode(task, prompt), headsOff);
    },
    state: () => ({...state, step: run.step, done: run.done, running: run.running, frames,
      checkpoints: run.checkpoints.size}),
  };
})();
