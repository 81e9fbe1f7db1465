// The page's engine (model.js, measures.js, edges.js) against the NumPy reference and the
// readout, on fixtures tests/test_explorer_node.py writes: every configuration's layout and
// activation names, every activation with and without knobs, and each measure the page shows.
// Python writes a masked attention score (-inf) as null.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const fs = require("node:fs");
const path = require("node:path");

const FIXTURE = process.env.ENGINE_FIXTURE;
if (!FIXTURE) throw new Error("ENGINE_FIXTURE is unset: run tests/test_explorer_node.py, which writes it");
const fixture = JSON.parse(fs.readFileSync(FIXTURE, "utf8"));
globalThis.FlatConstants = fixture.constants;  // as page.py ships them ahead of every script
const dir = path.join(__dirname, "..", "..", "flatformer", "explorer");
const FlatModel = require(path.join(dir, "model.js"));
const FlatMeasures = require(path.join(dir, "measures.js"));
const FlatEdges = require(path.join(dir, "edges.js"));
const M = {...FlatModel, ...FlatMeasures, ...FlatEdges};
const TOL = 1e-9;

// The worst difference between two nested arrays of numbers, relative above 1; shapes must
// agree, and -inf (null in the fixture) must meet -inf.
function worst(got, want, where = "") {
  if (want === null) {
    assert.strictEqual(got, -Infinity, `${where}: ${got}, expected -inf`);
    return 0;
  }
  if (typeof want === "number") {
    assert.strictEqual(typeof got, "number", `${where}: ${got} is not a number`);
    return Math.abs(got - want) / Math.max(1, Math.abs(want));
  }
  assert.strictEqual(got.length, want.length, `${where}: length ${got.length}, expected ${want.length}`);
  let w = 0;
  for (let i = 0; i < want.length; i++) w = Math.max(w, worst(got[i], want[i], `${where}[${i}]`));
  return w;
}
const close = (got, want, where) => {
  const w = worst(Array.isArray(got) || ArrayBuffer.isView(got) ? Array.from(got) : got, want, where);
  assert.ok(w < TOL, `${where}: worst difference ${w}`);
};

const modelOf = (c) => ({cfg: c.cfg, w: M.unpack(c.cfg, Float64Array.from(c.flat), 0, c.shapes)});

for (const c of fixture.configs) {
  const model = modelOf(c);

  test(`${c.name}: the parameter layout is config.param_shapes`, () => {
    assert.deepStrictEqual(M.paramShapes(c.cfg), c.shapes);
    assert.strictEqual(M.nParams(c.cfg), c.n_params);
    assert.strictEqual(c.flat.length, c.n_params);
  });

  test(`${c.name}: every activation, with and without knobs, is the engine's`, () => {
    for (const r of c.runs) {
      const {logits, cache} = M.forward(model, r.tokens, r.js);
      assert.deepStrictEqual(Object.keys(cache), c.hooks, "the activations' names, in order");
      close(logits, r.logits, `${r.knobs} logits`);
      for (const hook of c.hooks) close(cache[hook], r.cache[hook], `${r.knobs} ${hook}`);
    }
  });

  test(`${c.name}: the flat pass the trainer runs writes the engine's activations, with and without knobs`, () => {
    // FlatModel.run on the flat weights, its workspace read as it is (no nesting): every named
    // array, in hook_names order, and the logits; and the explorer's forward is a view of it.
    const P = Float64Array.from(c.flat);
    for (const r of c.runs) {
      const ws = M.run(c.cfg, P, r.tokens, r.js);
      assert.deepStrictEqual(ws.hooks.map(([name]) => name), c.hooks, "the activations' names, in order");
      close(ws.logits, r.logits.flat(), `${r.knobs} logits`);
      for (const [name, data, dims] of ws.hooks) {
        assert.strictEqual(data.length, dims.reduce((a, b) => a * b, 1), name);
        close(data, r.cache[name].flat(Infinity), `${r.knobs} ${name} (flat)`);
      }
    }
    const again = M.run(c.cfg, P, c.runs[0].tokens);
    assert.strictEqual(again, M.run(c.cfg, P, c.runs[0].tokens), "one workspace per config and length, reused");
  });

  test(`${c.name}: a knob's KL(original || changed) at every position is readout.probs's`, () => {
    for (const r of c.runs) {
      const base = M.forward(model, r.tokens).logits, now = M.forward(model, r.tokens, r.js).logits;
      close(now.map((lg, i) => M.kl(base[i], lg)), r.kl, `${r.knobs} kl`);
    }
  });

  test(`${c.name}: the logit lens at every stage is analysis.lens's`, () => {
    const {cache} = M.forward(model, c.runs[0].tokens);
    for (const [label, hook] of c.lens.stages) {
      close(cache[hook].map((r) => M.softmax(M.unembed(model, r))), c.lens.probs[label], `lens ${label}`);
    }
  });

  test(`${c.name}: the sampler's distribution and entropy are readout.sampling's`, () => {
    const {logits} = M.forward(model, c.runs[0].tokens), last = logits[logits.length - 1];
    close(M.entropy(M.softmax(last)), c.entropy, "entropy");
    for (const s of c.samplers) {
      const [temperature, topK, topP] = s.settings;
      const dist = M.sampling(last, {temperature, topK, topP});
      close(dist.probs, s.probs, `sampling ${s.settings}`);
      assert.strictEqual(dist.kept, s.probs.filter((p) => p > 0).length);
    }
  });

  test(`${c.name}: QK and OV, their singular values and top-k share are analysis.circuits's`, () => {
    for (const h of c.circuits) {
      const got = M.circuits(model, h.layer, h.head, c.top_k);
      close(got.QK.matrix, h.QK, `QK ${h.layer}.${h.head}`);
      close(got.OV.matrix, h.OV, `OV ${h.layer}.${h.head}`);
      // singular values to 1e-9 of the largest: the zero ones are only zero to rounding
      const scale = (s) => s.map((x) => x / Math.max(1, s[0]));
      close(scale(got.QK.s), scale(h.qk), `QK singular values ${h.layer}.${h.head}`);
      close(scale(got.OV.s), scale(h.ov), `OV singular values ${h.layer}.${h.head}`);
      close(got.QK.topK, h.qk_mass, "QK top-k share");
      close(got.OV.topK, h.ov_mass, "OV top-k share");
    }
  });

  test(`${c.name}: head means over the windows are readout.knobs.head_means's`, () => {
    const means = M.headMeans(model, c.windows);
    for (const layer of Object.keys(c.head_means)) close(means[layer], c.head_means[layer], `means ${layer}`);
  });

  test(`${c.name}: the edge graph, its mean outputs and a forward pass with edges ablated are flatformer.edges's`, () => {
    const g = M.edgeGraph(c.cfg);
    assert.deepStrictEqual(g.edges, c.edges.edges);
    const means = M.meanOutputs(model, c.windows);
    for (const s of g.senders) close(means[s], c.edges.refs[s], `mean output of ${s}`);
    const {logits} = M.edgeForward(model, c.runs[0].tokens, c.edges.refs, c.edges.keep);
    close(logits, c.edges.logits, "logits with edges ablated");
  });

  test(`${c.name}: the output map and its landscape grid are readout.landscape's`, () => {
    c.output_map.points.forEach((z, i) => close(M.outputMap(model, z), c.output_map.logits[i], `output map ${i}`));
    const {plane, bounds, G} = c.grid;
    const grid = M.outputGrid(model, plane, bounds, G);
    assert.deepStrictEqual(Array.from(grid.argmax), c.grid.argmax);
    close(grid.entropy, c.grid.entropy, "landscape entropy");
  });
}

test("the plane of a point cloud is readout.plane.fit_plane's, in 1 to 5 dimensions", () => {
  for (const p of fixture.planes) {
    const got = FlatMeasures.pca2(p.points);
    assert.strictEqual(got.exact, p.exact);
    close(got.mean, p.mean, "plane mean");
    close(got.axes, p.axes, "plane axes");
  }
});

test("the forward pass refuses what the engine refuses", () => {
  const c = fixture.configs[0], model = modelOf(c);
  assert.throws(() => M.forward(model, []), /empty/);
  assert.throws(() => M.forward(model, [c.cfg.d_vocab]), /outside the vocabulary/);
  assert.throws(() => M.forward(model, Array(c.cfg.n_ctx + 1).fill(0)), /exceed the context/);
});
