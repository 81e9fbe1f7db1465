// The page's forward pass (model.js) on the newer architectures it computes (RMSNorm, rotary
// positions, gated MLPs, SiLU, any eps) against the NumPy reference, on fixtures
// tests/test_page_architectures.py writes: the parameter layout, every activation's name in
// order and value, the logits, the one-vector helpers the panels use and the edge graph
// (edges.js), to 1e-9 in float64.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const fs = require("node:fs");
const path = require("node:path");

const FIXTURE = process.env.ARCH_FIXTURE;
if (!FIXTURE) throw new Error("ARCH_FIXTURE is unset: run tests/test_page_architectures.py, which writes it");
const fixture = JSON.parse(fs.readFileSync(FIXTURE, "utf8"));
globalThis.FlatConstants = fixture.constants;
const dir = path.join(__dirname, "..", "..", "flatformer", "explorer");
const M = {...require(path.join(dir, "model.js")), ...require(path.join(dir, "edges.js"))};
const TOL = 1e-9;

function worst(got, want, where) {
  if (want === null) {
    assert.strictEqual(got, -Infinity, `${where}: ${got}, expected -inf`);
    return 0;
  }
  if (typeof want === "number") return Math.abs(got - want) / Math.max(1, Math.abs(want));
  assert.strictEqual(got.length, want.length, `${where}: length ${got.length}, expected ${want.length}`);
  let w = 0;
  for (let i = 0; i < want.length; i++) w = Math.max(w, worst(got[i], want[i], `${where}[${i}]`));
  return w;
}
const close = (got, want, where) => {
  const w = worst(Array.from(got), want, where);
  assert.ok(w < TOL, `${where}: worst difference ${w}`);
};

for (const c of fixture.configs) {
  const model = {cfg: c.cfg, w: M.unpack(c.cfg, Float64Array.from(c.flat), 0, c.shapes)};

  test(`${c.name}: the parameter layout is config.param_shapes`, () => {
    assert.deepStrictEqual(M.paramShapes(c.cfg), c.shapes);
    assert.strictEqual(M.nParams(c.cfg), c.flat.length);
  });

  test(`${c.name}: every activation and the logits are the engine's`, () => {
    for (const r of c.runs) {
      const {logits, cache} = M.forward(model, r.tokens, r.js);
      assert.deepStrictEqual(Object.keys(cache), c.hooks, "the activations' names, in order");
      close(logits, r.logits, `${r.knobs} logits`);
      for (const hook of c.hooks) close(cache[hook], r.cache[hook], `${r.knobs} ${hook}`);
    }
  });

  test(`${c.name}: the one-vector helpers are the forward pass's`, () => {
    const {cache} = M.forward(model, c.runs[0].tokens);
    const last = c.cfg.n_layers - 1, b = `blocks.${last}.`, t = c.runs[0].tokens.length - 1;
    const mid = c.cfg.parallel_attn_mlp ? cache[b + "hook_resid_pre"] : cache[b + "hook_resid_mid"];
    if (!M.attnOnly(c.cfg)) close(M.mlp(model, last, mid[t]).out, cache[b + "hook_mlp_out"][t], "mlp");
    if (M.preNorm(c.cfg)) close(M.attnInput(model, last, cache[b + "hook_resid_pre"][t]), cache[b + "ln1.hook_normalized"][t], "attnInput");
    for (const h of [0, c.cfg.n_heads - 1]) {   // a head's q and k (turned), v: the cache's
      const a = M.attnInput(model, last, cache[b + "hook_resid_pre"][t]);
      const x = M.shortformer(c.cfg) ? a.map((v, i) => v + cache["hook_pos_embed"][t][i]) : a;
      const g = Math.floor(h / (c.cfg.n_heads / M.kvHeads(c.cfg))), turned = M.rotary(c.cfg) ? "rot_" : "";
      close(M.turn(c.cfg, M.project(model, last, "Q", x, h), t), cache[b + `attn.hook_${turned}q`][t][h], "q");
      close(M.turn(c.cfg, M.project(model, last, "K", x, h), t), cache[b + `attn.hook_${turned}k`][t][g], "k");
      close(M.project(model, last, "V", a, h), cache[b + "attn.hook_v"][t][g], "v");
    }
    close(M.unembed(model, cache[b + "hook_resid_post"][t]), c.runs[0].logits[t], "unembed");
  });

  test(`${c.name}: the edge graph, its mean outputs and an ablation are flatformer.edges'`, () => {
    const e = c.edges;
    assert.deepStrictEqual(M.edgeGraph(c.cfg).edges, e.edges);
    const means = M.meanOutputs(model, e.windows);
    for (const s of Object.keys(e.refs)) close(means[s], e.refs[s], `mean output of ${s}`);
    close(M.edgeForward(model, c.runs[0].tokens, e.refs, e.keep).logits, e.logits, "edge-ablated logits");
  });
}
