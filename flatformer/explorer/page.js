// The explorer page: one state object (mirrored in the URL hash), a compute step that runs the
// model with the knobs, and one view per panel that draws what compute returned.
"use strict";

(() => {
  const {h, clear, fmt, Heatmap, Plane, tokenCss} = Views;
  const M = FlatModel;
  const app = document.getElementById("app");
  const bannerEl = h("div", {id: "selfcheck", class: "banner pending", role: "status"}, "Self-check running…");

  // A failure anywhere is shown in red at the top, never hidden.
  function fail(message) {
    bannerEl.className = "banner fail";
    bannerEl.textContent = message;
    if (window.explorer) window.explorer.failed = message;
  }
  window.addEventListener("error", (e) => fail(`Error in the page: ${e.message}`));

  // ---- data ----
  const DATA = JSON.parse(document.getElementById("flatformer-data").textContent);
  const cfg = DATA.config, vocab = DATA.vocab, V = cfg.d_vocab, L = cfg.n_layers, H = cfg.n_heads;
  const NP = M.nParams(cfg);
  const steps = DATA.steps;

  function decode(text) {
    const bin = atob(text), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new Float64Array(bytes.buffer);
  }
  if (new Uint8Array(new Float64Array([1]).buffer)[7] !== 0x3f) {
    throw new Error("this browser is big-endian; the weights are little-endian float64");
  }
  const flat = decode(DATA.weights);
  if (flat.length !== NP * steps.length) {
    throw new Error(`weights hold ${flat.length} numbers, expected ${NP} x ${steps.length}`);
  }
  const models = new Map();
  function modelAt(step) {
    if (!models.has(step)) {
      const index = steps.indexOf(step);
      models.set(step, {cfg, w: M.unpack(cfg, flat, index * NP), step});
    }
    return models.get(step);
  }
  const cached = new Map();
  function memo(key, fn) {
    if (!cached.has(key)) {
      if (cached.size > 400) cached.clear();
      cached.set(key, fn());
    }
    return cached.get(key);
  }

  // ---- state: everything a view depends on, mirrored in the URL hash ----
  const DEFAULT = {seq: DATA.demo.slice(), step: DATA.step, off: [], mlp: [], pos: false, beta: 1,
                   temp: 1, k: 0, p: 1, seed: 1, n: cfg.n_ctx, cell: null, zoom: false,
                   cut: [], only: false, phase: false};
  const EDGES = M.edgeGraph(cfg);
  let state = {...DEFAULT};

  function toHash(s) {
    const parts = [`seq=${s.seq.join(".")}`, `step=${s.step}`];
    if (s.off.length) parts.push(`off=${s.off.join(",")}`);
    if (s.mlp.length) parts.push(`mlp=${s.mlp.join(",")}`);
    if (s.pos) parts.push("pos=off");
    if (s.zoom) parts.push("zoom=seq");
    if (s.cut.length) parts.push(`cut=${s.cut.join(",")}`);
    if (s.only) parts.push("only=circuit");
    if (s.phase) parts.push("colour=phase");
    for (const key of ["beta", "temp", "k", "p", "seed", "n"]) {
      if (s[key] !== DEFAULT[key]) parts.push(`${key}=${s[key]}`);
    }
    if (s.cell) parts.push(`cell=${[s.cell.l, s.cell.h, s.cell.q, s.cell.k].join(".")}`);
    return "#" + parts.join("&");
  }

  // Parse a hash into a full state; anything invalid falls back to the default, with a note.
  const clip = (text) => (text.length > 40 ? text.slice(0, 40) + "…" : text);
  function fromHash(hash) {
    const s = {...DEFAULT}, problems = [];
    const params = new URLSearchParams(hash.replace(/^#/, ""));
    const num = (key, ok) => {
      if (!params.has(key)) return;
      const v = Number(params.get(key));
      if (params.get(key) !== "" && Number.isFinite(v) && ok(v)) s[key] = v;
      else problems.push(`${key}=${clip(params.get(key))}`);
    };
    if (params.has("seq")) {
      const t = params.get("seq").split(".").map(Number);
      if (t.length >= 1 && t.length <= cfg.n_ctx && t.every((x) => Number.isInteger(x) && x >= 0 && x < V)) s.seq = t;
      else problems.push("seq");
    }
    num("step", (v) => steps.includes(v));
    if (params.has("off")) {
      const off = params.get("off").split(",").filter(Boolean);
      if (off.every((x) => /^\d+\.\d+$/.test(x) && +x.split(".")[0] < L && +x.split(".")[1] < H)) s.off = [...new Set(off)].sort();
      else problems.push("off");
    }
    if (params.has("mlp")) {
      const mlp = params.get("mlp").split(",").filter(Boolean).map(Number);
      if (mlp.every((x) => Number.isInteger(x) && x >= 0 && x < L)) s.mlp = [...new Set(mlp)].sort();
      else problems.push("mlp");
    }
    if (params.has("cut")) {
      const cut = params.get("cut").split(",").filter(Boolean).map(Number);
      if (cut.every((e) => Number.isInteger(e) && e >= 0 && e < EDGES.edges.length)) s.cut = [...new Set(cut)].sort((a, b) => a - b);
      else problems.push("cut");
    }
    s.only = params.get("only") === "circuit" && !!DATA.circuit;
    s.pos = params.get("pos") === "off";
    s.zoom = params.get("zoom") === "seq";
    s.phase = params.get("colour") === "phase" && Boolean(DATA.key_phase);
    num("beta", (v) => v >= 0 && v <= 10);
    num("temp", (v) => v >= 0.01 && v <= 10);
    num("k", (v) => Number.isInteger(v) && v >= 0 && v <= V);
    num("p", (v) => v > 0 && v <= 1);
    num("seed", (v) => Number.isInteger(v) && v >= 0 && v < 2 ** 32);
    num("n", (v) => Number.isInteger(v) && v >= 1 && v <= 64);
    if (params.has("cell")) {
      const [l, hd, q, k] = params.get("cell").split(".").map(Number);
      if ([l, hd, q, k].every(x => Number.isInteger(x) && x >= 0) && l < L && hd < H && q < s.seq.length && k <= q && k >= 0) s.cell = {l, h: hd, q, k};
      else problems.push("cell");
    }
    return {state: s, problems};
  }

  let hashTimer = null;
  function writeHash() {
    clearTimeout(hashTimer);
    // Debounced: browsers throttle rapid history updates (the play button changes the step often).
    hashTimer = setTimeout(() => {
      try { history.replaceState(null, "", toHash(state)); } catch (e) { /* about:srcdoc */ }
    }, 120);
  }

  function setState(change) {
    if ("step" in change && !steps.includes(change.step)) throw new Error(`no checkpoint at step ${change.step}`);
    state = {...state, ...change};
    if (state.cell && (state.cell.q >= state.seq.length)) state.cell = null;
    writeHash();
    render();
  }

  const knobsOf = (s) => ({headsOff: s.off, mlpOff: s.mlp, posOff: s.pos, beta: s.beta});
  const changedKnobs = (s) => s.off.length > 0 || s.mlp.length > 0 || s.pos || s.beta !== 1;

  // ---- compute: the model with the knobs, and the original for comparison ----
  function compute() {
    const model = modelAt(state.step), seq = state.seq, T = seq.length;
    const run = M.forward(model, seq, knobsOf(state));
    const base = changedKnobs(state) ? M.forward(model, seq) : run;
    const kl = run.logits.map((lg, i) => M.kl(base.logits[i], lg));      // KL(original || changed)
    let cell = state.cell;
    if (!cell) {
      // By default: the task's focus token (e.g. "+") where it last occurs, else the last
      // position, and the key it attends to most.
      const focus = DATA.focus === null ? -1 : seq.lastIndexOf(DATA.focus);
      const q = focus >= 0 ? focus : T - 1;
      const A = run.cache["blocks.0.attn.hook_pattern"][0][q];
      cell = {l: 0, h: 0, q, k: A.indexOf(Math.max(...A))};
    }
    return {model, seq, T, run, base, kl, cell};
  }

  // ---- labels and shapes ----
  const word = (t) => vocab[t];
  const posLabels = (seq) => seq.map((t, i) => ({text: word(t), pos: i}));
  const dims = (n) => Array.from({length: n}, (_, i) => String(i));
  const SHAPES = {
    resid: (T) => [[1, T, cfg.d_model], "batch, pos, d_model"],
    head: (T) => [[1, T, H, cfg.d_head], "batch, pos, head_index, d_head"],
    pattern: (T) => [[1, H, T, T], "batch, head_index, query_pos, key_pos"],
    mlp: (T) => [[1, T, cfg.d_mlp], "batch, pos, d_mlp"],
    logits: (T) => [[1, T, V], "batch, pos, d_vocab"],
  };
  function cellOpts(cols) {
    if (cols <= 12) return {cell: 30, values: true};
    if (cols <= 20) return {cell: 18};
    return {cell: 14};
  }
  function heat(title, hook, cols, opts = {}) {
    return new Heatmap({title, hook, ...cellOpts(cols), ...opts});
  }
  function show(map, M2, rows, cols, kind, extra = {}) {
    const [shape, axes] = SHAPES[kind] ? SHAPES[kind](rows.length) : [null, null];
    map.update(M2, rows, cols, {shape: extra.shape || shape, axes: extra.axes || axes, ...extra});
  }
  const section = (id, title, lead) => h("section", {id, class: "panel"},
    h("h2", {}, title), lead ? h("p", {class: "lead"}, lead) : null);
  const row = (...children) => h("div", {class: "row"}, ...children);
  const geometry = Geometry.create({cfg, vocab, memo, state: () => state, keyPhase: DATA.key_phase || null});

  // ---- header: title, self-check, sequence editor, training curve ----
  function headerPanel() {
    const title = DATA.task ? `${DATA.task}` : DATA.title;
    const facts = [`${DATA.preset || "custom"} · ${DATA.n_params.toLocaleString("en")} parameters`,
      `d_model ${cfg.d_model} · ${L} layer${L > 1 ? "s" : ""} · ${H} head${H > 1 ? "s" : ""}, d_head ${cfg.d_head}`,
      `${M.attnOnly(cfg) ? "attention-only (no MLP)" : `d_mlp ${cfg.d_mlp} (${cfg.act_fn === "gelu" ? "GELU tanh" : "ReLU"})`} · ${cfg.normalization === "pre_ln" ? "pre-LayerNorm" : "no LayerNorm"}${cfg.ln_final ? " · final LayerNorm" : ""}`,
      `${cfg.attn_out ? "with W_O" : "no W_O (heads concatenated)"} · context ${cfg.n_ctx} · vocabulary ${V}`];
    const el = h("header", {class: "top"},
      h("div", {class: "title-row"},
        h("h1", {}, "flatformer explorer ", h("span", {class: "muted"}, "· "), title),
        h("span", {class: "run-name", title: "run folder"}, DATA.title)),
      h("p", {class: "facts"}, facts.join("  ·  ")),
      bannerEl);
    return {el, update() {}};
  }

  function sequencePanel() {
    const chips = h("div", {class: "chips", "aria-label": "the input sequence"});
    const input = h("input", {type: "text", id: "seq-text", spellcheck: false, autocomplete: "off",
                              "aria-label": "type the sequence, tokens separated by spaces"});
    const msg = h("div", {class: "msg", id: "seq-msg", role: "status"});
    const say = (text, bad = true) => { msg.textContent = text; msg.classList.toggle("bad", bad); };
    const byLength = vocab.map((_, i) => i).sort((a, b) => vocab[b].length - vocab[a].length || a - b);
    function parse(text) {
      const out = [];
      let i = 0;
      while (i < text.length) {
        if (/\s/.test(text[i])) { i++; continue; }
        const hit = byLength.find((v) => text.startsWith(vocab[v], i)
          && (i + vocab[v].length === text.length || /\s/.test(text[i + vocab[v].length])));
        if (hit === undefined) {
          const bad = text.slice(i).split(/\s/)[0];
          return {error: `“${bad.length > 40 ? bad.slice(0, 40) + "…" : bad}” is not in the vocabulary; click a token below or type one of them.`};
        }
        out.push(hit);
        i += vocab[hit].length;
      }
      if (!out.length) return {error: "the sequence needs at least one token"};
      if (out.length > cfg.n_ctx) return {error: `${out.length} tokens: the context holds ${cfg.n_ctx}`};
      return {tokens: out};
    }
    function submit(e) {
      e.preventDefault();
      const r = parse(input.value);
      if (r.error) { say(r.error); input.classList.add("bad"); return; }
      input.classList.remove("bad");
      say("", false);
      setState({seq: r.tokens, cell: null});
    }
    const palette = h("div", {class: "palette", "aria-label": "vocabulary"},
      vocab.map((text, v) => h("button", {type: "button", class: "tok", title: `token ${v}: ${text}`,
        dataset: {token: v}, style: {borderLeftColor: Views.css(Views.tokenColour(v))},
        onclick: () => {
          if (state.seq.length >= cfg.n_ctx) return say(`the context holds ${cfg.n_ctx} tokens: remove one first`);
          say("", false);
          setState({seq: [...state.seq, v], cell: null});
        }}, text)));
    const el = h("section", {id: "input", class: "panel input"},
      h("div", {class: "input-main"},
        h("h2", {}, "Input"),
        chips,
        h("form", {class: "seq-form", onsubmit: submit}, input,
          h("button", {type: "submit"}, "Set"),
          h("button", {type: "button", onclick: () => { say("", false); setState({seq: DATA.demo.slice(), cell: null}); }}, "Demo")),
        msg,
        h("div", {class: "sub"}, "Vocabulary: click to append"),
        palette),
      h("div", {class: "input-side"},
        h("div", {class: "sub"}, "Training: held-out loss and rule error"),
        h("canvas", {class: "curve", id: "curve"}),
        h("div", {class: "fig-note", id: "curve-note"})));
    let shown = "";
    return {el, say, key: () => `${state.seq.join(".")}:${state.step}`, update(c) {
      const key = state.seq.join(".");
      if (key !== shown) {
        shown = key;
        clear(chips);
        state.seq.forEach((t, i) => chips.appendChild(h("span", {class: "chip", style: {borderColor: Views.css(Views.tokenColour(t))}},
          h("span", {class: "chip-pos"}, String(i)), h("span", {class: "chip-text"}, word(t)),
          state.seq.length > 1 ? h("button", {type: "button", class: "chip-x", title: "remove this token", "aria-label": `remove token ${i}`,
            onclick: () => setState({seq: state.seq.filter((_, j) => j !== i), cell: null})}, "×") : null)));
        if (document.activeElement !== input) input.value = state.seq.map(word).join(" ");
      }
      const m = DATA.metrics;
      if (m.step.length) {
        Views.lineChart(document.getElementById("curve"), m.step, [
          {values: m.val_loss, colour: "#225ea8", label: "held-out loss"},
          {values: m.rule_error, colour: "#d6604d", label: "rule error (0–1)", max: 1}], state.step);
        const i = m.step.findIndex((s) => s >= state.step);
        const at = i >= 0 && m.step[i] === state.step ? i : -1;
        document.getElementById("curve-note").textContent = at >= 0
          ? `step ${state.step}: loss ${fmt(m.val_loss[at], 4)}, rule error ${m.rule_error[at] === null ? "–" : (100 * m.rule_error[at]).toFixed(1) + "%"}`
          : `step ${state.step}`;
      }
    }};
  }

  // ---- toolbar: checkpoint slider and knobs, always in view ----
  function toolbar() {
    const slider = h("input", {type: "range", id: "step", min: 0, max: steps.length - 1, step: 1,
      "aria-label": "checkpoint", oninput: () => setState({step: steps[+slider.value]})});
    const stepLabel = h("output", {id: "step-label"});
    let playing = null;
    const play = h("button", {type: "button", id: "play", title: "replay training", onclick: () => {
      if (playing) { clearInterval(playing); playing = null; play.textContent = "▶"; return; }
      let i = steps.indexOf(state.step);
      if (i >= steps.length - 1) i = -1;
      play.textContent = "❚❚";
      playing = setInterval(() => {
        i += 1;
        if (i >= steps.length) { clearInterval(playing); playing = null; play.textContent = "▶"; return; }
        setState({step: steps[i]});
      }, 80);
    }}, "▶");
    const heads = [];
    for (let l = 0; l < L; l++) for (let hd = 0; hd < H; hd++) heads.push(`${l}.${hd}`);
    const toggle = (id, label, title, checked, onchange) => h("label", {class: "knob", title},
      h("input", {type: "checkbox", id, checked, onchange}), label);
    const headBoxes = heads.map((key) => toggle(`head-${key.replace(".", "-")}`, `L${key.replace(".", "H")}`,
      `head ${key}: untick to zero its output (hook_z)`, true, (e) => {
        const off = new Set(state.off);
        if (e.target.checked) off.delete(key); else off.add(key);
        setState({off: [...off].sort()});
      }));
    const mlpBoxes = Array.from({length: M.attnOnly(cfg) ? 0 : L}, (_, l) => toggle(`mlp-${l}`, L > 1 ? `MLP${l}` : "MLP",
      `MLP of layer ${l}: untick to zero its output (hook_mlp_out)`, true, (e) => {
        const mlp = new Set(state.mlp);
        if (e.target.checked) mlp.delete(l); else mlp.add(l);
        setState({mlp: [...mlp].sort()});
      }));
    const posBox = toggle("pos", "positions", "untick to zero the position embeddings (hook_pos_embed)", true,
      (e) => setState({pos: !e.target.checked}));
    const beta = h("input", {type: "range", id: "beta", min: 0, max: 4, step: 0.05, "aria-label": "beta",
      oninput: () => setState({beta: +beta.value})});
    const betaOut = h("output", {id: "beta-label"});
    const reset = h("button", {type: "button", id: "reset-knobs", onclick: () => setState({off: [], mlp: [], pos: false, beta: 1})}, "reset");
    const kl = h("output", {id: "kl", class: "kl"});
    const next = h("output", {id: "next", class: "next"});
    const el = h("nav", {id: "toolbar", class: "toolbar"},
      h("div", {class: "tool"}, h("span", {class: "tool-label"}, "checkpoint"), play, slider, stepLabel),
      h("div", {class: "tool"}, h("span", {class: "tool-label"}, "knobs"), headBoxes, mlpBoxes, posBox,
        h("label", {class: "knob", title: "multiply every attention score by beta (before the softmax)"}, "β", beta, betaOut), reset),
      h("div", {class: "tool readout"}, next, kl));
    return {el, update(c) {
      slider.value = steps.indexOf(state.step);
      stepLabel.textContent = `step ${state.step}`;
      heads.forEach((key, i) => { headBoxes[i].firstChild.checked = !state.off.includes(key); });
      mlpBoxes.forEach((b, l) => { b.firstChild.checked = !state.mlp.includes(l); });
      posBox.firstChild.checked = !state.pos;
      beta.value = state.beta;
      betaOut.textContent = state.beta.toFixed(2);
      const last = c.T - 1, p = M.softmax(c.run.logits[last]);
      const top = p.indexOf(Math.max(...p));
      next.textContent = `next: ${word(top)} (${(100 * p[top]).toFixed(1)}%)`;
      kl.dataset.value = String(c.kl[last]);
      kl.textContent = changedKnobs(state)
        ? `KL(original ‖ changed) = ${fmt(c.kl[last], 4)} nats`
        : "KL(original ‖ changed) = 0 (no knob changed)";
      kl.title = `exact: ${String(c.kl[last])} nats, next-token distribution at position ${last}`;
      el.classList.toggle("changed", changedKnobs(state));
    }};
  }

  // ---- Embed ----
  function embedPanel() {
    const el = section("embed", "Embed",
      "Each token looks up its row of W_E, each position its row of W_pos; their sum e = x + p enters the residual stream.");
    const WE = heat("token vectors W_E", "embed.W_E", cfg.d_model);
    const WP = heat("position vectors W_pos", "pos_embed.W_pos", cfg.d_model);
    const X = heat("x: this sequence's tokens", "hook_embed", cfg.d_model);
    const P = heat("p: its positions", "hook_pos_embed", cfg.d_model);
    const E = heat("e = x + p", "blocks.0.hook_resid_pre", cfg.d_model);
    const planes = {
      tokens: new Plane({title: "tokens (rows of W_E)", size: 240}),
      positions: new Plane({title: "positions: the ladder", size: 240}),
      sums: new Plane({title: "every token at every position: e = x + p", size: 420}),
    };
    // modular-addition: colour each number by its phase on the key-frequency circle.
    const kp = DATA.key_phase;
    const phaseBox = kp ? h("label", {class: "knob", title: "hue = the number's angle in the plane of the key frequency (last checkpoint)"},
      h("input", {type: "checkbox", id: "phase", onchange: (e) => setState({phase: e.target.checked})}),
      `colour numbers by their phase at key frequency ${kp.frequency}`) : null;
    el.append(row(WE.el, WP.el, X.el, P.el, E.el),
      h("h3", {}, "Geometry"), phaseBox, row(planes.sums.el, planes.tokens.el, planes.positions.el));
    return {el, planes, key: () => `${state.step}:${state.seq.join(".")}:${state.pos}:${state.phase}`, update(c) {
      if (phaseBox) phaseBox.firstChild.checked = state.phase;
      const w = c.model.w, d = cfg.d_model, seq = c.seq, rows = posLabels(seq);
      const mat = (data, n) => Array.from({length: n}, (_, i) => Array.from(data.subarray(i * d, i * d + d)));
      WE.update(mat(w["embed.W_E"].data, V), vocab, dims(d), {shape: [V, d], axes: "d_vocab, d_model"});
      WP.update(mat(w["pos_embed.W_pos"].data, cfg.n_ctx), dims(cfg.n_ctx), dims(d), {shape: [cfg.n_ctx, d], axes: "n_ctx, d_model"});
      show(X, c.run.cache["hook_embed"], rows, dims(d), "resid");
      show(P, c.run.cache["hook_pos_embed"], rows, dims(d), "resid", {dim: state.pos});
      show(E, c.run.cache["blocks.0.hook_resid_pre"], rows, dims(d), "resid");
      geometry.embedPlanes(c, planes);
    }};
  }

  // ---- Attend ----
  function attendPanel(l) {
    const el = section(`attend-${l}`, L > 1 ? `Attend · layer ${l}` : "Attend",
      "Each position's query is compared with the keys of itself and every earlier position: score = q·k / √d_head; a softmax over the row turns scores into weights, and the head's output z is the weighted sum of the values. Click any cell to open its arithmetic.");
    const b = `blocks.${l}.`;
    const ln = cfg.normalization === "pre_ln" ? heat("LayerNorm 1 output", b + "ln1.hook_normalized", cfg.d_model) : null;
    const heads = Array.from({length: H}, (_, hd) => {
      const pick = (i, j) => setState({cell: {l, h: hd, q: i, k: j}});
      const describe = (kind) => (i, j, v) => [`head ${l}.${hd}: query ${i} (${word(state.seq[i])}) → key ${j} (${word(state.seq[j])})`,
        v === -Infinity ? "masked: a position cannot see later ones" : `${kind} ${String(v)}`, "click for the arithmetic"];
      const card = {
        q: heat("q", b + "attn.hook_q", cfg.d_head), k: heat("k", b + "attn.hook_k", cfg.d_head),
        v: heat("v", b + "attn.hook_v", cfg.d_head),
        scores: heat("scores", b + "attn.hook_attn_scores", 8, {cell: 30, values: true, onClick: pick, describe: describe("score")}),
        pattern: heat("weights", b + "attn.hook_pattern", 8, {cell: 30, values: true, kind: "sequential", unit: true, causal: true, onClick: pick, describe: describe("weight")}),
        z: heat("z = Σ weight · v", b + "attn.hook_z", cfg.d_head),
      };
      card.badge = h("span", {class: "badge off"}, "switched off");
      card.headScores = h("span", {class: "head-scores"});
      card.el = h("div", {class: "head-card", dataset: {head: `${l}.${hd}`}},
        h("h3", {}, `Head ${l}.${hd}`, card.badge, card.headScores),
        row(card.q.el, card.k.el, card.v.el), row(card.scores.el, card.pattern.el, card.z.el));
      return card;
    });
    const arith = h("div", {class: "arith", id: `arith-${l}`, "aria-live": "polite"});
    const out = heat(cfg.attn_out ? "attention output (z W_O)" : "attention output (heads concatenated)", b + "hook_attn_out", cfg.d_model);
    // Attention-only blocks have no resid_mid: the stream after attention is the block's output.
    const midHook = M.attnOnly(cfg) ? b + "hook_resid_post" : b + "hook_resid_mid";
    const mid = heat("residual after attention", midHook, cfg.d_model);
    const qk = new Plane({title: "query–key plane", size: 330});
    el.append(ln ? row(ln.el) : "", h("div", {class: "heads"}, heads.map((c) => c.el), arith),
      h("h3", {}, "Output and geometry"),
      row(out.el, mid.el, qk.el, h("div", {class: "fig-note qk-note", id: `qk-note-${l}`})));
    return {el, update(c) {
      const rows = posLabels(c.seq), T = c.T, cache = c.run.cache;
      if (ln) show(ln, cache[b + "ln1.hook_normalized"], rows, dims(cfg.d_model), "resid");
      const sel = c.cell.l === l ? c.cell : null;
      heads.forEach((card, hd) => {
        const off = state.off.includes(`${l}.${hd}`);
        const slice = (name) => cache[b + name].map((r) => r[hd]);
        const hs = SHAPES.head(T);
        for (const n of ["q", "k", "v"]) card[n].update(slice(`attn.hook_${n}`), rows, dims(cfg.d_head), {shape: hs[0], axes: hs[1] + ` (head ${hd} shown)`});
        const ps = SHAPES.pattern(T), mark = sel && sel.h === hd ? [sel.q, sel.k] : null;
        card.scores.update(cache[b + "attn.hook_attn_scores"][hd], rows, rows, {shape: ps[0], axes: ps[1] + ` (head ${hd} shown)`, selected: mark});
        card.pattern.update(cache[b + "attn.hook_pattern"][hd], rows, rows, {shape: ps[0], axes: ps[1] + ` (head ${hd} shown)`, selected: mark, limit: 1});
        card.z.update(slice("attn.hook_z"), rows, dims(cfg.d_head), {shape: hs[0], axes: hs[1] + ` (head ${hd} shown)`});
        card.badge.style.display = off ? "" : "none";
        card.el.classList.toggle("off", off);
        showHeadScores(card.headScores, l, hd);
      });
      show(out, cache[b + "hook_attn_out"], rows, dims(cfg.d_model), "resid");
      show(mid, cache[midHook], rows, dims(cfg.d_model), "resid");
      arith.style.display = sel ? "" : "none";
      if (sel) drawArithmetic(arith, c, sel);
      geometry.qkPlane(qk, c, l, sel ? sel.h : 0, sel ? sel.q : T - 1);
    }};
  }

  function num(key, value, digits = 4) {
    return h("span", {class: "num", dataset: {key, value: String(value)}, title: String(value)}, fmt(value, digits));
  }

  function drawArithmetic(box, c, {l, h: hd, q, k}) {
    const b = `blocks.${l}.attn.`, cache = c.run.cache, dh = cfg.d_head;
    const qv = cache[b + "hook_q"][q][hd], kv = cache[b + "hook_k"][k][hd];
    const scores = cache[b + "hook_attn_scores"][hd][q], weights = cache[b + "hook_pattern"][hd][q];
    const key = JSON.stringify([l, hd, q, k, c.seq, qv, kv, scores, state.beta]);
    if (box.dataset.shown === key) return;     // unchanged by this knob: keep the box as it is
    box.dataset.shown = key;
    const prods = qv.map((x, i) => x * kv[i]);
    let dot = 0;
    for (const p of prods) dot += p;
    const max = Math.max(...scores.filter(Number.isFinite));
    const exps = scores.map((s) => (s === -Infinity ? 0 : Math.exp(s - max)));
    const sum = exps.reduce((a, x) => a + x, 0);
    clear(box);
    box.append(
      h("h3", {}, `Arithmetic of head ${l}.${hd}: query ${q} (“${word(c.seq[q])}”) → key ${k} (“${word(c.seq[k])}”)`),
      h("div", {class: "arith-grid"},
        h("div", {},
          h("div", {class: "step-title"}, `1 · the dot product: ${dh} products`),
          h("table", {class: "products"},
            h("thead", {}, h("tr", {}, h("th", {}, "i"), h("th", {}, `q${q}[i]`), h("th", {}, `k${k}[i]`), h("th", {}, "product"))),
            h("tbody", {}, qv.map((x, i) => h("tr", {}, h("td", {}, String(i)), h("td", {}, num(`q.${i}`, x)),
              h("td", {}, num(`k.${i}`, kv[i])), h("td", {}, num(`prod.${i}`, prods[i]))))),
            h("tfoot", {}, h("tr", {}, h("td", {colSpan: 3}, "sum = q·k"), h("td", {}, num("dot", dot)))))),
        h("div", {},
          h("div", {class: "step-title"}, "2 · scale"),
          h("p", {class: "eq"}, "score = q·k / √", String(dh), " = ", num("dot2", dot), " / ", num("sqrt", Math.sqrt(dh)),
            state.beta !== 1 ? [" × β ", num("beta", state.beta, 3)] : "", " = ", num("score", scores[k])),
          h("div", {class: "step-title"}, `3 · softmax over row ${q}`),
          h("p", {class: "eq small"}, "weight_j = exp(score_j − max) / Σ exp(score_i − max), max = ", num("max", max), ", Σ = ", num("sum", sum)),
          h("table", {class: "softmax"},
            h("thead", {}, h("tr", {}, h("th", {}, "key"), h("th", {}, "score"), h("th", {}, "exp(score − max)"), h("th", {}, "weight"))),
            h("tbody", {}, scores.map((s, j) => h("tr", {class: j === k ? "hl" : ""},
              h("td", {}, `${j} ${word(c.seq[j])}`),
              h("td", {}, s === -Infinity ? h("span", {class: "muted"}, "masked (−∞)") : num(`row.${j}.score`, s)),
              h("td", {}, num(`row.${j}.exp`, exps[j])),
              h("td", {}, num(`row.${j}.weight`, weights[j]))))))))
    );
  }

  // ---- Think (MLP) ----
  function thinkPanel(l) {
    const last = l === L - 1;
    const el = section(`think-${l}`, L > 1 ? `Think · layer ${l}` : "Think",
      `The MLP reads each position's residual on its own: ${cfg.d_mlp} hidden units (${cfg.act_fn === "gelu" ? "GELU" : "ReLU"}), written back into the residual stream.`);
    const b = `blocks.${l}.`;
    const ln = cfg.normalization === "pre_ln" ? heat("LayerNorm 2 output", b + "ln2.hook_normalized", cfg.d_model) : null;
    const pre = heat("pre-activation", b + "mlp.hook_pre", cfg.d_mlp);
    const post = heat("activation", b + "mlp.hook_post", cfg.d_mlp);
    const out = heat("MLP output", b + "hook_mlp_out", cfg.d_model);
    const resid = heat("residual after the MLP", b + "hook_resid_post", cfg.d_model);
    const planes = last ? {argmax: new Plane({title: "output landscape: most likely next token", size: 330}),
                           entropy: new Plane({title: "entropy of the next-token distribution", size: 330})} : null;
    el.append(ln ? row(ln.el) : "", row(pre.el), row(post.el), row(out.el, resid.el));
    const zoom = h("label", {class: "knob", title: "frame the landscape around this sequence's arrows only"},
      h("input", {type: "checkbox", id: "zoom", onchange: (e) => setState({zoom: e.target.checked})}), "zoom to this sequence");
    if (last) el.append(h("h3", {}, "Geometry ", zoom), row(planes.argmax.el, planes.entropy.el), h("p", {class: "fig-note wide", id: "landscape-note"}));
    return {el, update(c) {
      const rows = posLabels(c.seq), cache = c.run.cache;
      if (ln) show(ln, cache[b + "ln2.hook_normalized"], rows, dims(cfg.d_model), "resid");
      show(pre, cache[b + "mlp.hook_pre"], rows, dims(cfg.d_mlp), "mlp");
      show(post, cache[b + "mlp.hook_post"], rows, dims(cfg.d_mlp), "mlp");
      const off = state.mlp.includes(l);
      show(out, cache[b + "hook_mlp_out"], rows, dims(cfg.d_model), "resid", {dim: off});
      show(resid, cache[b + "hook_resid_post"], rows, dims(cfg.d_model), "resid");
      if (last) {
        zoom.firstChild.checked = state.zoom;
        geometry.landscape(planes, c);
      }
    }};
  }

  // ---- Read out ----
  function readoutPanel() {
    const el = section("readout", "Read out",
      "The last residual is multiplied by the unembedding W_U (plus its bias): one logit per vocabulary token. The next token's distribution then goes through temperature, top-k and top-p before the sampler draws.");
    const lnFinal = cfg.ln_final ? heat("final LayerNorm", "ln_final.hook_normalized", cfg.d_model) : null;
    const logits = heat("logits", cfg.ln_final ? "unembed (ln_final(resid_post) · W_U + b_U)" : "unembed (resid_post · W_U + b_U)", V);
    const probs = heat("probabilities", "softmax(logits)", V, {kind: "sequential", unit: true});
    const temp = h("input", {type: "range", id: "temp", min: -2, max: 0.7, step: 0.01, "aria-label": "temperature (log scale)",
      oninput: () => setState({temp: +Math.pow(10, +temp.value).toPrecision(3)})});
    const tempOut = h("output", {id: "temp-label"});
    const topk = h("input", {type: "number", id: "topk", min: 0, max: V, step: 1, "aria-label": "top-k",
      onchange: () => { const k = Math.round(+topk.value); if (k >= 0 && k <= V) setState({k}); }});
    const topp = h("input", {type: "range", id: "topp", min: 0.01, max: 1, step: 0.01, "aria-label": "top-p",
      oninput: () => setState({p: +topp.value})});
    const toppOut = h("output", {id: "topp-label"});
    const bars = h("div", {class: "bars", id: "bars"});
    const stats = h("div", {class: "stats", id: "stats"});
    const seed = h("input", {type: "number", id: "seed", min: 0, step: 1, "aria-label": "sampler seed",
      onchange: () => { const s = Math.round(+seed.value); if (s >= 0 && s < 2 ** 32) setState({seed: s}); }});
    const count = h("input", {type: "number", id: "gen-n", min: 1, max: 64, step: 1, "aria-label": "tokens to generate",
      onchange: () => { const n = Math.round(+count.value); if (n >= 1 && n <= 64) setState({n}); }});
    const gen = h("div", {class: "gen", id: "generated"});
    const table = h("table", {class: "draws", id: "draws"});
    el.append(lnFinal ? row(lnFinal.el) : "", row(logits.el, probs.el),
      h("h3", {}, "Next token"),
      h("div", {class: "controls"},
        h("label", {}, "temperature ", temp, tempOut),
        h("label", {}, "top-k ", topk, h("span", {class: "muted"}, " (0 = off)")),
        h("label", {}, "top-p ", topp, toppOut)),
      stats, bars,
      h("h3", {}, "Seeded sampler"),
      h("div", {class: "controls"},
        h("label", {}, "seed ", seed), h("button", {type: "button", onclick: () => setState({seed: (state.seed + 1) % 2 ** 32})}, "next seed"),
        h("label", {}, "tokens ", count),
        h("span", {class: "muted"}, "mulberry32(seed) draws u in [0, 1); the token whose slice of the cumulative distribution holds u is picked. The window slides when the context is full; the knobs apply.")),
      gen, table);
    return {el, update(c) {
      const rows = posLabels(c.seq);
      if (lnFinal) show(lnFinal, c.run.cache["ln_final.hook_normalized"], rows, dims(cfg.d_model), "resid");
      show(logits, c.run.logits, rows, vocab, "logits");
      show(probs, c.run.logits.map((r) => M.softmax(r)), rows, vocab, "logits", {limit: 1});
      temp.value = Math.log10(state.temp); tempOut.textContent = `${state.temp}`;
      topk.value = state.k; topp.value = state.p; toppOut.textContent = state.p.toFixed(2);
      seed.value = state.seed; count.value = state.n;
      const options = {temperature: state.temp, topK: state.k, topP: state.p};
      const lastLogits = c.run.logits[c.T - 1], dist = M.sampling(lastLogits, options);
      const Hraw = M.entropy(M.softmax(lastLogits)), Hs = M.entropy(dist.probs);
      clear(stats).append(
        h("span", {class: "stat"}, "entropy ", h("b", {dataset: {value: String(Hs)}, id: "entropy"}, `${fmt(Hs, 3)} nats`)),
        h("span", {class: "stat"}, "effective choices exp(H) ", h("b", {dataset: {value: String(Math.exp(Hs))}, id: "effective"}, fmt(Math.exp(Hs), 3)), ` of ${V}`),
        h("span", {class: "stat muted"}, `before temperature/top-k/top-p: H = ${fmt(Hraw, 3)} nats, exp(H) = ${fmt(Math.exp(Hraw), 3)}`),
        h("span", {class: "stat muted"}, `${dist.kept} token${dist.kept > 1 ? "s" : ""} kept`));
      drawBars(bars, dist, M.softmax(lastLogits));
      const draws = M.generate(c.model, c.seq, state.n, {seed: state.seed, knobs: knobsOf(state), ...options});
      drawGeneration(gen, table, c, draws);
    }};
  }

  function drawBars(box, dist, raw) {
    if (!box.firstChild) {
      vocab.forEach((text, v) => box.appendChild(h("div", {class: "bar-row"},
        h("span", {class: "bar-label"}, text),
        h("span", {class: "bar-track"}, h("span", {class: "bar raw"}), h("span", {class: "bar", style: {background: tokenCss(v)}})),
        h("span", {class: "bar-value"}))));
    }
    const max = Math.max(...dist.probs, ...raw, 1e-9);
    vocab.forEach((text, v) => {
      const rowEl = box.children[v], [rawBar, bar] = rowEl.children[1].children;
      rowEl.title = `${text}: sampled p = ${String(dist.probs[v])}; model p (T = 1) = ${String(raw[v])}`;
      rawBar.style.width = `${100 * raw[v] / max}%`;
      bar.style.width = `${100 * dist.probs[v] / max}%`;
      rowEl.children[2].textContent = dist.probs[v] > 0 ? `${(100 * dist.probs[v]).toFixed(1)}%` : "–";
    });
  }

  // The whole cumulative distribution of one draw, token slices in vocabulary order.
  function strip(d) {
    let lo = 0;
    const parts = d.probs.map((p, v) => {
      const left = lo;
      lo += p;
      return p > 0 ? h("span", {class: "slice" + (v === d.token ? " chosen" : ""), title: `${word(v)}: [${left.toFixed(4)}, ${lo.toFixed(4)})`,
        style: {left: `${100 * left}%`, width: `${100 * p}%`, background: tokenCss(v, v === d.token ? 0.95 : 0.28)}}) : null;
    });
    return h("div", {class: "strip"}, parts, h("span", {class: "u-mark", style: {left: `${100 * d.u}%`}}));
  }

  function drawGeneration(gen, table, c, draws) {
    clear(gen);
    gen.dataset.tokens = draws.map((d) => d.token).join(",");
    Views.append(gen, [h("span", {class: "muted"}, "prompt "),
      c.seq.map((t) => h("span", {class: "chip small"}, word(t))),
      h("span", {class: "muted"}, " → "),
      draws.map((d) => h("span", {class: "chip small gen-tok", style: {borderColor: tokenCss(d.token)}}, word(d.token)))]);
    clear(table);
    table.append(h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "draw u"), h("th", {}, "cumulative distribution (u marked)"), h("th", {}, "slice"), h("th", {}, "token"), h("th", {}, "p"))));
    const body = h("tbody");
    draws.forEach((d, i) => body.appendChild(h("tr", {dataset: {u: String(d.u), token: d.token}},
      h("td", {}, String(i + 1)), h("td", {}, num(`u.${i}`, d.u, 6)),
      h("td", {}, strip(d)),
      h("td", {class: "muted"}, `[${d.lo.toFixed(3)}, ${d.hi.toFixed(3)})`),
      h("td", {}, h("b", {}, word(d.token))), h("td", {}, `${(100 * d.p).toFixed(1)}%`))));
    table.appendChild(body);
  }

  // ---- Knobs: what each single change costs on this prompt ----
  function knobsPanel() {
    const el = section("knobs", "Knobs",
      "Each knob is a hook on one named activation; the page reruns the model and reports the KL divergence of the changed next-token distribution p′ from the original p, KL(original ‖ changed) = Σ p log(p/p′), in nats: the same knobs and the same measure as `flatformer analyze`. Generation above uses the changed model.");
    const perPos = heat("KL per position (current knobs)", null, 8, {kind: "sequential", cell: 40, values: true,
      describe: (i, j, v) => [`position ${j}`, `KL ${String(v)} nats`]});
    const table = h("table", {class: "ablations", id: "ablations"});
    el.append(row(perPos.el), h("h3", {}, "One change at a time, on this prompt"), table);
    let shown = "";
    return {el, update(c) {
      perPos.update([c.kl], ["KL"], posLabels(c.seq), {shape: [c.T], axes: "pos"});
      const key = `${state.step}:${c.seq.join(".")}`;
      if (key === shown) return;   // the table does not depend on the current knobs
      shown = key;
      const model = c.model, seq = c.seq, base = c.base.logits[c.T - 1];
      // The knobs of readout.knobs.standard_knobs, in its order and under its names.
      const options = [], windows = DATA.measures.mean_windows;
      const means = windows ? memo(`head-means:${state.step}`, () => M.headMeans(model, windows)) : null;
      for (let l = 0; l < L; l++) for (let hd = 0; hd < H; hd++) {
        options.push([`head ${l}.${hd} zero`, `blocks.${l}.attn.hook_z[:, :, ${hd}] = 0`, {off: [`${l}.${hd}`]}]);
        if (means) options.push([`head ${l}.${hd} mean`, `blocks.${l}.attn.hook_z[:, :, ${hd}] = its mean over ${windows.length} held-out windows`, null, {headsMean: {[`${l}.${hd}`]: means[l]}}]);
      }
      if (!M.attnOnly(cfg)) for (let l = 0; l < L; l++) options.push([`mlp ${l} off`, `blocks.${l}.hook_mlp_out = 0`, {mlp: [l]}]);
      options.push(["positions off", "hook_pos_embed = 0", {pos: true}]);
      for (const beta of DATA.measures.betas) options.push([`beta ${beta}`, `hook_attn_scores × ${beta}${beta === 0 ? " (uniform attention)" : ""}`, {beta}]);
      const p0 = M.softmax(base), top0 = p0.indexOf(Math.max(...p0));
      clear(table);
      table.append(h("thead", {}, h("tr", {}, h("th", {}, "change"), h("th", {}, "hook"), h("th", {}, "KL (nats)"), h("th", {}, "next token"), h("th", {}))));
      const body = h("tbody");
      for (const [label, hook, change, extra] of options) {
        const s = {off: [], mlp: [], pos: false, beta: 1, ...change};
        const logits = M.forward(model, seq, extra || knobsOf(s)).logits[c.T - 1];
        const p = M.softmax(logits), top = p.indexOf(Math.max(...p)), kl = M.kl(base, logits);
        body.appendChild(h("tr", {dataset: {knob: label, kl: String(kl)}},
          h("td", {}, label), h("td", {}, h("code", {}, hook)), h("td", {}, num("ablation", kl, 3)),
          h("td", {}, `${word(top)} (${(100 * p[top]).toFixed(0)}%)`, top !== top0 ? h("span", {class: "badge"}, "changed") : ""),
          h("td", {}, change ? h("button", {type: "button", onclick: () => setState(s)}, "apply") : "")));
      }
      table.appendChild(body);
      table.appendChild(h("caption", {}, `original next token: ${word(top0)} (${(100 * p0[top0]).toFixed(1)}%)`));
    }};
  }

  // ---- Circuits ----
  function circuitsPanel() {
    const el = section("circuits", "Circuits",
      "Each head as two matrices in the residual basis: QK = W_Q W_Kᵀ (which residual directions attend to which) and OV = W_V W_O (what is copied when attended; W_V alone without W_O). Their singular values show how many directions they really use.");
    const cards = [], k = DATA.measures.top_k;
    for (let l = 0; l < L; l++) for (let hd = 0; hd < H; hd++) {
      const qkMap = heat("QK = W_Q W_Kᵀ", `blocks.${l}.attn.W_Q · W_Kᵀ`, cfg.d_model);
      const ovMap = heat(cfg.attn_out ? "OV = W_V W_O" : "OV = W_V", `blocks.${l}.attn.W_V${cfg.attn_out ? " · W_O" : ""}`, cfg.attn_out ? cfg.d_model : cfg.d_head);
      const sv = {QK: h("div", {class: "sv", dataset: {kind: "QK"}}), OV: h("div", {class: "sv", dataset: {kind: "OV"}})};
      const card = h("div", {class: "head-card", dataset: {head: `${l}.${hd}`}}, h("h3", {}, `Head ${l}.${hd}`),
        row(qkMap.el, h("div", {class: "fig"}, h("figcaption", {}, h("span", {class: "fig-title"}, "singular values of QK")), sv.QK),
            ovMap.el, h("div", {class: "fig"}, h("figcaption", {}, h("span", {class: "fig-title"}, "singular values of OV")), sv.OV)));
      cards.push({l, hd, qkMap, ovMap, sv, card});
      el.appendChild(card);
    }
    return {el, key: () => String(state.step), update(c) {
      for (const card of cards) {
        const circ = memo(`circ:${state.step}:${card.l}:${card.hd}`, () => M.circuits(c.model, card.l, card.hd, k));
        const d = cfg.d_model;
        card.qkMap.update(circ.QK.matrix, dims(d), dims(d), {shape: [d, d], axes: "d_model (query side), d_model (key side)"});
        const ovCols = circ.OV.matrix[0].length;
        card.ovMap.update(circ.OV.matrix, dims(d), dims(ovCols), {shape: [d, ovCols], axes: cfg.attn_out ? "d_model (read), d_model (written)" : "d_model (read), d_head (written)"});
        for (const key of ["QK", "OV"]) {
          const {s, k, topK} = circ[key], box = card.sv[key];
          clear(box);
          box.dataset.values = s.map(String).join(",");
          box.dataset.topK = String(topK);
          const max = s[0] || 1;
          s.forEach((x, i) => box.appendChild(h("div", {class: "sv-row", title: `σ${i + 1} = ${String(x)}`},
            h("span", {class: "bar-label"}, `σ${i + 1}`),
            h("span", {class: "bar-track"}, h("span", {class: "bar", style: {width: `${100 * x / max}%`, background: i < k ? "#225ea8" : "#8c959f"}})),
            h("span", {class: "bar-value"}, fmt(x, 3)))));
          box.appendChild(h("div", {class: "fig-note"}, `top ${k} hold ${(100 * topK).toFixed(1)}% of the squared mass`));
        }
      }
    }};
  }

  // ---- Circuit: the edge graph of flatformer/edges, every edge ablatable ----
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs = {}) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  }

  function edgesPanel() {
    const C = DATA.circuit;
    const el = section("edges", "Circuit",
      "The model as a graph: embeddings, each head (reading the stream three times: q, k, v), each MLP, the logits. An edge is one node's output as a later one reads it. Click an edge to ablate it (it then carries its mean output over the held-out windows, mean ablation); its width is the KL of the last next-token distribution when it alone is ablated, on this prompt.");
    if (!C) {
      el.appendChild(h("p", {class: "fig-note"}, "This run's task is unknown to this version: no circuit."));
      return {el, key: () => "none", update() {}};
    }
    const inCircuit = new Set(C.edges.map(([s, r]) => `${s}>${r}`));
    const only = h("input", {type: "checkbox", id: "circuit-only", onchange: (e) => setState({only: e.target.checked})});
    const reset = h("button", {type: "button", onclick: () => setState({cut: [], only: false})}, "restore every edge");
    const note = h("p", {class: "fig-note", id: "circuit-note"});
    const box = h("div", {class: "edge-graph", id: "edge-graph"});
    const out = h("table", {class: "ablations", id: "edge-output"});
    el.append(row(h("label", {}, only, ` circuit only (the ${C.edges.length} of ${C.edges_total} edges flatformer circuits kept at step ${C.step}, faithfulness ${C.faithfulness === null ? "-" : C.faithfulness.toFixed(3)} of the ${C.metric})`), reset), note, box, out);
    const cols = {}, colOf = (n) => (n === "tok" || n === "pos" ? 0 : n === "logits" ? 1 + 2 * L
      : 1 + 2 * Number(n.slice(1).split(".")[0]) + (n[0] === "m" ? 1 : 0));
    for (const n of EDGES.nodes) (cols[colOf(n)] = cols[colOf(n)] || []).push(n);
    const rows = Math.max(...Object.values(cols).map((c) => c.length));
    const W = 140 * (2 + 2 * L), Hh = 70 * rows + 20, bw = 64, bh = 34;
    const at = {};
    for (const [x, members] of Object.entries(cols)) {
      members.forEach((n, i) => { at[n] = [50 + 140 * x, Hh / 2 + 70 * (i - (members.length - 1) / 2)]; });
    }
    const port = {q: -10, k: 0, v: 10};
    const color = {q: "#0072B2", k: "#D55E00", v: "#009E73"};
    return {el, key: () => `${state.step}:${state.seq.join(".")}:${state.cut.join(",")}:${state.only}`, update(c) {
      const T = c.T, model = c.model;
      const means = memo(`means:${state.step}`, () => M.meanOutputs(model, DATA.measures.mean_windows));
      const refs = {};
      for (const s of EDGES.senders) refs[s] = means[s].slice(0, T);
      const cut = new Set(state.cut);
      const keep = EDGES.edges.map(([s, r], e) => (cut.has(e) || (state.only && !inCircuit.has(`${s}>${r}`)) ? 0 : 1));
      const ones = EDGES.edges.map(() => 1);
      const clean = M.edgeForward(model, c.seq, refs, ones).logits[T - 1];
      const now = M.edgeForward(model, c.seq, refs, keep).logits[T - 1];
      const effect = memo(`edge-effects:${state.step}:${c.seq.join(".")}`, () => EDGES.edges.map((_, e) => {
        const alone = ones.slice();
        alone[e] = 0;
        return M.kl(clean, M.edgeForward(model, c.seq, refs, alone).logits[T - 1]);
      }));
      const largest = Math.max(...effect, 1e-12);
      clear(box);
      const pic = svg("svg", {width: W, height: Hh, viewBox: `0 0 ${W} ${Hh}`, role: "img"});
      EDGES.edges.forEach(([s, r], e) => {
        const kind = /\.[qkv]$/.test(r) ? r.slice(-1) : null, node = kind ? r.slice(0, -2) : r;
        const [x0, y0] = at[s], [x1, y1] = at[node];
        const sx = x0 + bw / 2, ex = x1 - bw / 2, ey = y1 + (kind ? port[kind] : 0), mx = (sx + ex) / 2;
        const d = `M ${sx} ${y0} C ${mx} ${y0}, ${mx} ${ey}, ${ex} ${ey}`;
        const kept = keep[e] === 1, member = inCircuit.has(`${s}>${r}`);
        const stroke = !kept ? "#d1242f" : member ? (color[kind] || "#CC79A7") : "#b8b8b8";
        const g = svg("g", {class: "edge", "data-edge": e, "data-src": s, "data-dst": r, "data-kept": kept ? 1 : 0});
        const title = svg("title");
        title.textContent = `${s} → ${r}: KL ${String(effect[e])} nats when ablated alone${kept ? "" : " (ablated)"}`;
        g.append(title, svg("path", {d, fill: "none", stroke, "stroke-width": 0.8 + 6 * effect[e] / largest, "stroke-dasharray": kept ? "" : "4 3"}),
          svg("path", {d, fill: "none", stroke: "transparent", "stroke-width": 10, style: "cursor:pointer"}));
        g.addEventListener("click", () => {
          const next = new Set(state.cut);
          if (next.has(e)) next.delete(e); else next.add(e);
          setState({cut: [...next].sort((a, b) => a - b)});
        });
        pic.appendChild(g);
      });
      for (const n of EDGES.nodes) {
        const [x, y] = at[n];
        pic.appendChild(svg("rect", {x: x - bw / 2, y: y - bh / 2, width: bw, height: bh, rx: 5, fill: "white", stroke: "#333"}));
        const label = svg("text", {x, y: y + 4, "text-anchor": "middle", "font-size": 12});
        label.textContent = n;
        pic.appendChild(label);
      }
      box.appendChild(pic);
      only.checked = state.only;
      const ablated = keep.filter((k) => k === 0).length;
      note.textContent = `${ablated} of ${keep.length} edges ablated; KL(original ‖ this) at the last position = ${String(M.kl(clean, now))} nats`;
      const p = M.softmax(now), p0 = M.softmax(clean);
      const order = p.map((_, v) => v).sort((a, b) => p[b] - p[a] || a - b).slice(0, 5);
      clear(out);
      out.append(h("thead", {}, h("tr", {}, h("th", {}, "next token"), h("th", {}, "p, these edges"), h("th", {}, "p, every edge"))));
      const body = h("tbody");
      for (const v of order) body.appendChild(h("tr", {}, h("td", {}, h("b", {}, word(v))), h("td", {}, `${(100 * p[v]).toFixed(1)}%`), h("td", {}, `${(100 * p0[v]).toFixed(1)}%`)));
      out.appendChild(body);
      window.explorer.edges = {keep, logits: now, clean, effect, refs};
    }};
  }

  // ---- Heads: induction scores and composition (numbers exported from Python) ----
  // The scores need the copying score's eigenvalues, so Python computes them at every exported
  // checkpoint (flatformer/analysis/induction.py) and the page shows them as they are.
  const INDUCTION = DATA.induction || null;
  const scoresAt = (step) => (INDUCTION ? INDUCTION.steps[String(step)] : null);

  function showHeadScores(box, l, hd) {
    const at = scoresAt(state.step);
    box.style.display = at ? "" : "none";
    if (!at) return;
    const s = at.heads.find((x) => x.layer === l && x.head === hd);
    box.dataset.prev = String(s.prev_token);
    box.dataset.prefix = String(s.prefix_matching);
    box.dataset.copying = String(s.copying);
    box.textContent = ` previous-token ${fmt(s.prev_token, 3)} · prefix-matching ${fmt(s.prefix_matching, 3)} · copying ${s.copying === null ? "undefined" : fmt(s.copying, 3)}`;
  }

  function compositionPanel() {
    const el = section("composition", "Composition",
      `Heads as nodes, layer by layer; an arrow from an earlier head A to a later head B, as thick as their composition score ‖M_A M_B‖_F / (‖M_A‖_F ‖M_B‖_F) with M_A = W_V W_O of A and, for B, W_Q W_Kᵀ (Q), its transpose (K) or W_V W_O (V) (Elhage et al. 2021). Random heads of the same shapes score ${fmt(INDUCTION.baseline, 3)} on average; arrows below that are faint. Node labels: previous-token and prefix-matching scores on repeated random tokens (Olsson et al. 2022). The induction score jumps at step ${INDUCTION.phase_step}: move the checkpoint slider across it.`);
    let mode = "k";
    const buttons = ["q", "k", "v"].map((m) => h("button", {type: "button", class: "mode", dataset: {mode: m},
      onclick: () => { mode = m; draw(); }}, `${m.toUpperCase()}-composition`));
    const width = 160 + 200 * (L - 1), height = 40 + 90 * H;
    const graph = svg("svg", {viewBox: `0 0 ${width} ${height}`, width, height, id: "composition-graph"});
    const table = h("table", {class: "composition", id: "composition-table"});
    el.append(h("div", {class: "controls"}, buttons), graph, table);
    const node = (l, hd) => ({x: 80 + 200 * l, y: 45 + 90 * hd});
    function add(tag, attrs, text) {
      const e = svg(tag, attrs);
      if (text !== undefined) e.textContent = text;
      graph.appendChild(e);
      return e;
    }
    function draw() {
      const at = scoresAt(state.step);
      while (graph.firstChild) graph.removeChild(graph.firstChild);
      buttons.forEach((b) => b.classList.toggle("on", b.dataset.mode === mode));
      const comp = at.composition[mode], n = L * H;
      for (let a = 0; a < n; a++) for (let b = 0; b < n; b++) {
        const v = comp[a][b];
        if (v === null) continue;
        const p = node(Math.floor(a / H), a % H), q = node(Math.floor(b / H), b % H);
        add("line", {x1: p.x + 22, y1: p.y, x2: q.x - 22, y2: q.y, stroke: v > INDUCTION.baseline ? "#b2182b" : "#bbbbbb",
          "stroke-width": (1 + 14 * v).toFixed(2), "stroke-opacity": v > INDUCTION.baseline ? 0.85 : 0.4,
          "data-pair": `${Math.floor(a / H)}.${a % H}>${Math.floor(b / H)}.${b % H}`, "data-value": String(v)});
        add("text", {x: (p.x + q.x) / 2, y: (p.y + q.y) / 2 - 4, "text-anchor": "middle", "font-size": 11}, fmt(v, 2));
      }
      for (const s of at.heads) {
        const p = node(s.layer, s.head);
        add("circle", {cx: p.x, cy: p.y, r: 20, fill: "#ffffff", stroke: "#333333", "stroke-width": 1.2});
        add("text", {x: p.x, y: p.y + 4, "text-anchor": "middle", "font-size": 12, "font-weight": "bold"}, `${s.layer}.${s.head}`);
        add("text", {x: p.x, y: p.y + 34, "text-anchor": "middle", "font-size": 10}, `prev ${fmt(s.prev_token, 2)} · prefix ${fmt(s.prefix_matching, 2)}`);
      }
      clear(table);
      table.append(h("thead", {}, h("tr", {}, h("th", {}, "earlier → later"), h("th", {}, "Q"), h("th", {}, "K"), h("th", {}, "V"))));
      const body = h("tbody");
      const names = at.heads.map((s) => `${s.layer}.${s.head}`);
      for (let a = 0; a < n; a++) for (let b = 0; b < n; b++) {
        if (at.composition.k[a][b] === null) continue;
        body.appendChild(h("tr", {dataset: {pair: `${names[a]}>${names[b]}`}}, h("td", {}, `${names[a]} → ${names[b]}`),
          ...["q", "k", "v"].map((m) => h("td", {dataset: {mode: m, value: String(at.composition[m][a][b])}}, fmt(at.composition[m][a][b], 3)))));
      }
      table.appendChild(body);
    }
    return {el, key: () => String(state.step), update() { draw(); }};
  }

  // ---- Logit lens ----
  function lensPanel() {
    const el = section("lens", "Logit lens",
      "The unembedding read off the residual stream after the embedding, after each attention" + (M.attnOnly(cfg) ? "" : " and after each MLP") +
      ": what the model would predict if it stopped there. " + (cfg.ln_final
        ? "The final LayerNorm is applied to each row's stream (its scale recomputed), so the last row is the model's own output."
        : "Exact here: there is no final LayerNorm, so the last row is the model's own output."));
    const grid = h("div", {class: "lens", id: "lens-grid"});
    el.appendChild(grid);
    const stages = [["after embedding", "blocks.0.hook_resid_pre"]];
    for (let l = 0; l < L; l++) {
      if (M.attnOnly(cfg)) stages.push([`after attention ${l}`, `blocks.${l}.hook_resid_post`]);
      else stages.push([`after attention ${l}`, `blocks.${l}.hook_resid_mid`], [`after MLP ${l}`, `blocks.${l}.hook_resid_post`]);
    }
    let cells = [], shown = "", tips = [];
    grid.addEventListener("mousemove", (e) => {
      const cell = e.target.closest(".lens-cell");
      if (cell) Views.showTip(e, tips[+cell.dataset.s][+cell.dataset.i]); else Views.hideTip();
    });
    grid.addEventListener("mouseleave", Views.hideTip);
    function build(seq) {
      clear(grid);
      grid.style.gridTemplateColumns = `auto repeat(${seq.length}, minmax(52px, 1fr))`;
      grid.appendChild(h("div", {class: "corner"}));
      seq.forEach((t, i) => grid.appendChild(h("div", {class: "col-label"}, h("span", {class: "lab-pos"}, String(i)), h("span", {class: "lab-text"}, word(t)))));
      cells = stages.map(([label, hook], s) => {
        grid.appendChild(h("div", {class: "row-label lens-label"}, label, h("code", {class: "hook"}, hook)));
        return seq.map((_, i) => {
          const tok = h("span", {class: "lens-tok"}), p = h("span", {class: "lens-p"});
          grid.appendChild(h("div", {class: "lens-cell", dataset: {s, i}}, tok, p));
          return {cell: grid.lastChild, tok, p};
        });
      });
    }
    return {el, update(c) {
      const key = c.seq.join(".");
      if (key !== shown) { build(c.seq); shown = key; }
      tips = stages.map(([label, hook], s) => c.run.cache[hook].map((r, i) => {
        const p = M.softmax(M.unembed(c.model, r));
        const order = p.map((_, v) => v).sort((a, b) => p[b] - p[a] || a - b);
        const top = order[0], rgb = Views.sequential(p[top], 1), view = cells[s][i];
        view.cell.style.background = Views.css(rgb);
        view.cell.style.color = Views.inkOn(rgb);
        view.cell.dataset.top = top;
        view.tok.textContent = word(top);
        view.p.textContent = `${(100 * p[top]).toFixed(0)}%`;
        return [`${label}, position ${i}`, ...order.slice(0, 3).map((v) => `${word(v)}: ${String(p[v])}`)];
      }));
    }};
  }

  // ---- self-check: the JS forward pass against the Python engine's logits ----
  function selfCheck() {
    const ref = DATA.reference, expected = decode(ref.logits), model = modelAt(ref.step);
    let worst = 0, where = "", offset = 0, positions = 0;
    const tokens = new Set(), places = new Set();
    ref.prompts.forEach((prompt, n) => {
      const {logits} = M.forward(model, prompt);
      logits.forEach((r, i) => {
        places.add(i);
        tokens.add(prompt[i]);
        positions += 1;
        r.forEach((x, v) => {
          const diff = Math.abs(x - expected[offset++]);
          if (!(diff <= worst)) { worst = Number.isNaN(diff) ? Infinity : diff; where = `prompt ${n}, position ${i}, token ${v}`; }
        });
      });
    });
    const ok = offset === expected.length && worst < 1e-9;
    const result = {ok, worst, prompts: ref.prompts.length, positions, tokens: tokens.size, places: places.size, step: ref.step};
    if (ok) {
      bannerEl.className = "banner ok";
      bannerEl.textContent = `Self-check passed: this page's forward pass reproduces the Python engine's logits on ${ref.prompts.length} prompts `
        + `(${tokens.size} of ${V} tokens, all ${places.size} positions, step ${ref.step}); worst |difference| ${worst.toExponential(1)} (must be < 1e-9).`;
    } else {
      fail(`SELF-CHECK FAILED: worst |JS − Python| = ${worst} at ${where || "(length mismatch)"}; must be < 1e-9. Do not trust the numbers on this page.`);
    }
    bannerEl.dataset.worst = String(worst);
    return result;
  }

  // ---- assemble ----
  const panels = [headerPanel(), sequencePanel(), toolbar(), embedPanel()];
  for (let l = 0; l < L; l++) panels.push(attendPanel(l), ...(M.attnOnly(cfg) ? [] : [thinkPanel(l)]));
  panels.push(readoutPanel(), knobsPanel(), circuitsPanel(), edgesPanel(),
    ...(INDUCTION ? [compositionPanel()] : []), lensPanel());
  const footer = h("footer", {},
    "Every number on this page is computed in your browser from the exported weights (float64, the same arithmetic as the Python engine); nothing is fetched from the network. ",
    "The address bar holds the whole view: copy it to share exactly this state.");
  panels.forEach((p) => app.appendChild(p.el));
  app.appendChild(footer);

  function render() {
    const t0 = performance.now();
    const c = compute();
    const timings = {compute: performance.now() - t0};
    for (const p of panels) {
      const t = performance.now();
      // A panel whose inputs did not change is left as it is.
      const key = p.key ? p.key(c) : null;
      if (key !== null && key === p.shownKey) continue;
      p.shownKey = key;
      p.update(c);
      timings[p.el.id || p.el.tagName.toLowerCase()] = performance.now() - t;
    }
    window.explorer.timings = timings;
    window.explorer.lastRender = performance.now() - t0;
    window.explorer.renders += 1;
  }

  window.explorer = {
    get state() { return JSON.parse(JSON.stringify(state)); },
    set(change) { setState(change); },
    geometry: geometry.last,
    hash: () => toHash(state),
    model: M, modelAt, data: DATA,
    ready: false, renders: 0, lastRender: 0, failed: null,
  };

  // A link's settings the page cannot use are named (a link may come from anyone).
  const noteProblems = (problems) => panels[1].say(
    problems.length ? `Ignored invalid link settings: ${problems.join(", ")}` : "", problems.length > 0);
  const parsed = fromHash(location.hash || "");
  state = parsed.state;
  if (parsed.problems.length) noteProblems(parsed.problems);
  window.addEventListener("hashchange", () => {
    if (location.hash === toHash(state)) return;
    const next = fromHash(location.hash);
    state = next.state;
    noteProblems(next.problems);
    render();
  });
  window.explorer.selfCheck = selfCheck();
  render();
  window.explorer.ready = true;
  window.explorer.readyAt = performance.now();
  document.documentElement.dataset.ready = "true";
})();
