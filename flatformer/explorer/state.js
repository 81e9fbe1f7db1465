// The page's state: one object holding everything a view depends on, mirrored in the URL hash
// so any view can be shared as a link (TensorFlow Playground's state.ts). No DOM: `env` says
// what the run holds ({DATA, edges: the edge count, hasPanel(id)}), and node tests
// (tests/js/state.test.js) parse and write hashes without a browser.
"use strict";

const PageState = (() => {
  // Knobs as FlatModel.forward takes them, and whether any differs from the trained model.
  const knobsOf = (s) => ({headsOff: s.off, mlpOff: s.mlp, posOff: s.pos, beta: s.beta});
  const changedKnobs = (s) => s.off.length > 0 || s.mlp.length > 0 || s.pos || s.beta !== 1;
  const clip = (text) => (text.length > 40 ? text.slice(0, 40) + "…" : text);

  const SAMPLED = 32;

  function create(env) {
    const DATA = env.DATA, steps = DATA.steps, cfg = DATA.config;
    const V = cfg.d_vocab, L = cfg.n_layers, H = cfg.n_heads;
    // Tokens sampled by default: a context's worth, at most SAMPLED (each is a forward pass of
    // the window, and a long context's are the page's slowest work).
    const DEFAULT = {seq: DATA.demo.slice(), step: DATA.step, off: [], mlp: [], pos: false, beta: 1,
                     temp: 1, k: 0, p: 1, seed: 1, n: Math.min(cfg.n_ctx, SAMPLED), cell: null, zoom: false,
                     cut: [], only: false, phase: false, view: ""};

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
      if (s.view) parts.push(`view=${s.view}`);
      return "#" + parts.join("&");
    }

    // A hash as a full state; anything invalid falls back to the default and is named in
    // `problems` (a link may come from anyone).
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
        if (cut.every((e) => Number.isInteger(e) && e >= 0 && e < env.edges)) s.cut = [...new Set(cut)].sort((a, b) => a - b);
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
        // a causal model's query reads no later key; one attending both ways reads every key
        const reads = (cfg.causal === false ? k < s.seq.length : k <= q) && k >= 0;
        if ([l, hd, q, k].every(x => Number.isInteger(x) && x >= 0) && l < L && hd < H && q < s.seq.length && reads) s.cell = {l, h: hd, q, k};
        else problems.push("cell");
      }
      // view=PANEL (a panel's id: embed, attend-0, think-0, readout, edges...) scrolls to it:
      // how the run report links each step of the algorithm to where the page shows it.
      if (params.has("view")) {
        const v = params.get("view");
        if (/^[a-z]+(-\d+)?$/.test(v) && env.hasPanel(v)) s.view = v;
        else problems.push(`view=${clip(v)}`);
      }
      return {state: s, problems};
    }

    return {DEFAULT, toHash, fromHash};
  }

  return {create, knobsOf, changedKnobs};
})();

if (typeof module !== "undefined") module.exports = PageState;
