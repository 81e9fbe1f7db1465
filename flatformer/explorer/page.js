// The explorer page: the data Python exported, one state object (state.js, mirrored in the
// URL hash), a compute step that runs the model with the knobs, and the panels (panels-*.js)
// that draw what compute returned. The engine (model.js, measures.js, edges.js) has no DOM.
//
// Explorer.mount(app, DATA) builds it inside `app`: the explorer page mounts its own data, and
// the playground mounts its paused weights ({standalone: false}: the URL hash stays the
// playground's, and DATA.flat may carry the weights as a Float64Array).
"use strict";

const Explorer = (() => {
  const {h} = Views;
  // One namespace for the page: the forward pass, the measures and the edge graph.
  const M = {...FlatModel, ...FlatMeasures, ...FlatEdges};

  function mount(app, DATA, {standalone = true} = {}) {
    const bannerEl = h("div", {id: "selfcheck", class: "banner pending", role: "status"}, "Self-check running…");

    // A failure anywhere is shown in red at the top, never hidden.
    function fail(message) {
      bannerEl.className = "banner fail";
      bannerEl.textContent = message;
      if (window.explorer) window.explorer.failed = message;
    }
    if (standalone) window.addEventListener("error", (e) => fail(`Error in the page: ${e.message}`));

    // ---- data ----
    const cfg = DATA.config, vocab = DATA.vocab, V = cfg.d_vocab, L = cfg.n_layers, H = cfg.n_heads;
    // The logits' classes by name (export.py's vocab_out: a compiled program's values, else
    // the first d_vocab_out tokens), and whether they are next tokens the model reads back:
    // a causal model that is no compiled program (DATA.program says what its outputs mean).
    const vocabOut = DATA.vocab_out || vocab.slice(0, M.vocabOut(cfg));
    const nextTokens = M.causalOf(cfg) && !DATA.program;
    // The tensors' names and shapes in Python's order (config.param_shapes), as the weights hold them.
    const NP = DATA.tensors.reduce((n, [, shape]) => n + M.size(shape), 0);
    const steps = DATA.steps;

    // A float32 source's weights travel as float32 (half the page; export.py checked that each
    // round-trips exactly) and are widened here, so every computation stays float64.
    function decode(text, dtype = "float64") {
      const bin = atob(text), bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      if (dtype === "float64") return new Float64Array(bytes.buffer);
      if (dtype === "float32") return Float64Array.from(new Float32Array(bytes.buffer));
      throw new Error(`weights of an unknown dtype ${dtype}`);
    }
    if (new Uint8Array(new Float64Array([1]).buffer)[7] !== 0x3f) {
      throw new Error("this browser is big-endian; the weights are little-endian");
    }
    const flat = DATA.flat || decode(DATA.weights, DATA.weights_dtype);
    if (flat.length !== NP * steps.length) {
      throw new Error(`weights hold ${flat.length} numbers, expected ${NP} x ${steps.length}`);
    }
    const models = new Map();
    function modelAt(step) {
      if (!models.has(step)) {
        const index = steps.indexOf(step);
        models.set(step, {cfg, w: M.unpack(cfg, flat, index * NP, DATA.tensors), step});
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
    const EDGES = M.edgeGraph(cfg);
    const {knobsOf, changedKnobs} = PageState;
    const hashes = PageState.create({DATA, edges: EDGES.edges.length,
      hasPanel: (id) => !!document.querySelector(`section.panel#${id}`)});
    const {toHash, fromHash} = hashes;
    let state = {...hashes.DEFAULT};

    const showView = () => { if (state.view) document.getElementById(state.view).scrollIntoView(); };

    let hashTimer = null;
    function writeHash() {
      if (!standalone) return;
      clearTimeout(hashTimer);
      // Debounced: browsers throttle rapid history updates (the play button changes the step often).
      hashTimer = setTimeout(() => {
        try { history.replaceState(null, "", toHash(state)); } catch (e) { /* about:srcdoc */ }
      }, 120);
    }

    function setState(change) {
      if ("step" in change && !steps.includes(change.step)) throw new Error(`no checkpoint at step ${change.step}`);
      state = {...state, ...change};
      if (state.cell && (state.cell.q >= state.seq.length || state.cell.k >= state.seq.length)) state.cell = null;
      writeHash();
      render();
    }

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

    // ---- what every panel reads ----
    const ctx = {DATA, M, cfg, vocab, V, L, H, vocabOut, nextTokens, steps, EDGES, memo, knobsOf, changedKnobs,
      banner: bannerEl, get state() { return state; }, set: setState};
    Object.assign(ctx, Panels.kit(ctx));
    ctx.geometry = Geometry.create({cfg, vocab, M, word: ctx.word, wordOut: ctx.wordOut, nextTokens, memo, state: () => state, keyPhase: DATA.key_phase || null, shown: DATA.shown || null});
    const circuits = Panels.circuits(ctx);
    ctx.showHeadScores = circuits.showHeadScores;
    const input = Panels.input(ctx), blocks = Panels.blocks(ctx), readout = Panels.readout(ctx);

    // ---- self-check: the JS forward pass against the Python engine's logits (or another
    // implementation's: DATA.reference.source names it) ----
    function selfCheck() {
      const ref = DATA.reference, model = modelAt(ref.step);
      const expected = typeof ref.logits === "string" ? decode(ref.logits) : ref.logits;
      let worst = 0, where = "", offset = 0, positions = 0;
      const tokens = new Set(), places = new Set();
      // The activations by name, in order, as the engine's hook_names lists them (shipped).
      let hooks = null;
      ref.prompts.forEach((prompt, n) => {
        const {logits, cache} = M.forward(model, prompt);
        if (hooks === null) hooks = Object.keys(cache);
        logits.forEach((r, i) => {
          places.add(i);
          tokens.add(prompt[i]);
          positions += 1;
          const compare = (x, v) => {
            const diff = Math.abs(x - expected[offset++]);
            if (!(diff <= worst)) { worst = Number.isNaN(diff) ? Infinity : diff; where = `prompt ${n}, position ${i}, token ${v}`; }
          };
          // every logit, or a large vocabulary's evenly spaced columns (DATA.reference.columns)
          if (ref.columns) ref.columns.forEach((v) => compare(r[v], v)); else r.forEach(compare);
        });
      });
      const hooksOk = JSON.stringify(hooks) === JSON.stringify(DATA.hooks);
      const ok = offset === expected.length && worst < 1e-9 && hooksOk;
      const result = {ok, worst, hooks: hooks.length, prompts: ref.prompts.length, positions, tokens: tokens.size, places: places.size, step: ref.step};
      if (ok) {
        bannerEl.className = "banner ok";
        bannerEl.textContent = `Self-check passed: this page's forward pass reproduces ${ref.source || "the Python engine's"} logits on ${ref.prompts.length} prompts `
          + `(${tokens.size} of ${V} tokens, all ${places.size} positions, ${hooks.length} named activations, step ${ref.step}`
          + `${ref.columns ? `, the logits of ${ref.columns.length} evenly spaced classes` : ""}); worst |difference| ${worst.toExponential(1)} (must be < 1e-9).`;
      } else if (!hooksOk) {
        fail(`SELF-CHECK FAILED: this page names its activations ${hooks.join(", ")}; ${ref.source || "the Python engine's"} are ${DATA.hooks.join(", ")}.`);
      } else {
        fail(`SELF-CHECK FAILED: worst |JS − Python| = ${worst} at ${where || "(length mismatch)"}; must be < 1e-9. Do not trust the numbers on this page.`);
      }
      bannerEl.dataset.worst = String(worst);
      return result;
    }

    // ---- assemble ----
    const panels = [input.headerPanel(), input.sequencePanel(), input.toolbar(), blocks.embedPanel()];
    for (let l = 0; l < L; l++) panels.push(blocks.attendPanel(l), ...(M.attnOnly(cfg) ? [] : [blocks.thinkPanel(l)]));
    panels.push(readout.readoutPanel(), readout.knobsPanel(), circuits.circuitsPanel(), circuits.edgesPanel(),
      ...(DATA.induction ? [circuits.compositionPanel()] : []), circuits.lensPanel());

    const footer = h("footer", {},
      "Every number on this page is computed in your browser from the exported weights (float64, the same arithmetic as the Python engine); nothing is fetched from the network. ",
      "The address bar holds the whole view: copy it to share exactly this state.");
    panels.forEach((p) => app.appendChild(p.el));
    app.appendChild(footer);

    // ---- drawing: a panel (or a part of one, a head card) in view is drawn at once; the rest
    // are queued, each drawn when it nears the viewport or, one per task, when the page is idle,
    // so that a large model's page opens at once and never blocks for long.
    let pending = [];   // [{p, el, draw}] in page order
    const observer = typeof IntersectionObserver === "undefined" ? null : new IntersectionObserver((entries) => {
      for (const e of entries) if (e.isIntersecting) drawUnit(pending.find((u) => u.el === e.target));
    }, {rootMargin: "600px 0px"});
    const unitsOf = (p, c) => (p.parts ? p.parts(c) : [{el: p.el, draw: () => p.update(c)}]);
    function timed(p, draw) {
      const t = performance.now(), id = p.el.id || p.el.tagName.toLowerCase(), timings = window.explorer.timings;
      draw();
      timings[id] = (timings[id] || 0) + performance.now() - t;
    }
    function drawUnit(u) {
      if (!u || !pending.includes(u)) return;
      pending = pending.filter((x) => x !== u);
      if (observer) observer.unobserve(u.el);
      u.el.classList.remove("drawing");
      timed(u.p, u.draw);
    }
    function drawAll() { while (pending.length) drawUnit(pending[0]); done(); }
    let idle = null;
    function drawLater() {
      clearTimeout(idle);
      idle = setTimeout(() => {
        if (pending.length) drawUnit(pending[0]);
        if (pending.length) drawLater(); else done();
      }, 0);
    }
    // Every panel drawn: the page is ready (tests and captures wait for this).
    function done() {
      if (window.explorer.ready) return;
      window.explorer.ready = true;
      window.explorer.readyAt = performance.now();
      showView();
      if (standalone) document.documentElement.dataset.ready = "true";
    }

    function render(lazy = false) {
      const t0 = performance.now();
      const c = compute();
      window.explorer.timings = {compute: performance.now() - t0};
      let below = false;
      const drawn = new Set();
      for (const p of panels) {
        // A panel whose inputs did not change is left as it is (its queued parts stay queued).
        const key = p.key ? p.key(c) : null;
        if (key !== null && key === p.shownKey) continue;
        p.shownKey = key;
        pending = pending.filter((u) => u.p !== p);
        for (const u of unitsOf(p, c)) {
          if (lazy && !below && u.el.getBoundingClientRect().top > window.innerHeight) below = true;
          if (!below) { u.el.classList.remove("drawing"); timed(p, u.draw); drawn.add(p.el.id || p.el.tagName.toLowerCase()); continue; }
          pending.push({p, ...u});
          u.el.classList.add("drawing");
          if (observer) observer.observe(u.el);
        }
      }
      if (lazy) window.explorer.firstViewport = [...drawn];   // the panels drawn to open the page
      window.explorer.lastRender = performance.now() - t0;
      window.explorer.renders += 1;
      if (pending.length) drawLater();
    }

    window.explorer = {
      get state() { return JSON.parse(JSON.stringify(state)); },
      // A script's change is drawn in full before it returns (it may read any panel).
      set(change) { setState(change); drawAll(); },
      drawAll,
      geometry: ctx.geometry.last,
      hash: () => toHash(state),
      model: M, modelAt, data: DATA,
      ready: false, renders: 0, lastRender: 0, failed: null,
    };

    // A link's settings the page cannot use are named (a link may come from anyone).
    const noteProblems = (problems) => panels[1].say(
      problems.length ? `Ignored invalid link settings: ${problems.join(", ")}` : "", problems.length > 0);
    if (standalone) {
      const parsed = fromHash(location.hash || "");
      state = parsed.state;
      if (parsed.problems.length) noteProblems(parsed.problems);
      window.addEventListener("hashchange", () => {
        if (location.hash === toHash(state)) return;
        const next = fromHash(location.hash);
        state = next.state;
        noteProblems(next.problems);
        render();
        showView();
      });
    }
    window.explorer.selfCheck = selfCheck();
    window.explorer.checkedAt = performance.now();  // data decoded and checked, before any panel
    // The first render draws the first viewport only (a linked view is drawn in full, to be
    // scrolled to); the page is open then, and ready once the rest is drawn.
    render(standalone && !state.view);
    window.explorer.openedAt = performance.now();
    if (!pending.length) done();
    return window.explorer;
  }

  return {mount};
})();

// The explorer page's own data (the playground carries other data and mounts on demand).
{
  const island = typeof document !== "undefined" ? document.getElementById("flatformer-data") : null;
  const data = island ? JSON.parse(island.textContent) : null;
  if (data && data.format === "flatformer-explorer-1") Explorer.mount(document.getElementById("app"), data);
}
