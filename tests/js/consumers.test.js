// Who runs model.js's forward pass: each consumer the page's scripts hold, exercised under node
// with FlatModel's `run` and `forward` counted, so that a consumer which computed the model
// some other way would fail here. tests/test_page_forward.py runs this file with the constants
// page.py ships, and names the browser-only consumers (the panels) from the scripts' text.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const fs = require("node:fs");
const path = require("node:path");

const FIXTURE = process.env.CONSTANTS_FIXTURE;
if (!FIXTURE) throw new Error("CONSTANTS_FIXTURE is unset: run tests/test_page_forward.py, which writes it");
globalThis.FlatConstants = JSON.parse(fs.readFileSync(FIXTURE, "utf8"));
const dir = path.join(__dirname, "..", "..", "flatformer", "explorer");
const real = require(path.join(dir, "model.js"));

// The page's scripts find FlatModel as a global, as they do in the page, here with counters.
const calls = {run: [], forward: 0};
globalThis.FlatModel = {
  ...real,
  run(...args) {
    const ws = real.run(...args);
    calls.run.push(ws);
    return ws;
  },
  forward(...args) {
    calls.forward += 1;
    return real.forward(...args);
  },
};
const FlatTrain = globalThis.FlatTrain = require(path.join(dir, "train.js"));
const FlatTasks = globalThis.FlatTasks = require(path.join(dir, "tasks.js"));
const FlatSession = require(path.join(dir, "session.js"));
const FlatMeasures = require(path.join(dir, "measures.js"));
const PlaygroundExplorer = require(path.join(dir, "playground-explore.js"));

const reset = () => { calls.run = []; calls.forward = 0; };
const task = FlatTasks.TASKS["plus-last-even"];
const cfg = {...FlatConstants.PRESETS["simulator-16d"], d_vocab: task.vocab.length};
const P = FlatTrain.init(cfg, FlatTrain.rng(1), 0.3);

test("train.js keeps the backward pass and the optimizer, and no forward pass of its own", () => {
  assert.strictEqual(FlatTrain.forward, undefined);
  assert.deepStrictEqual(Object.keys(FlatTrain).sort(), ["AdamW", "backward", "check", "init", "lossAndGrad", "lrAt", "rng"]);
});

test("train.js: the loss and its gradient run model.js's forward once per sequence", () => {
  reset();
  const u = FlatTrain.rng(2), seq = () => Array.from({length: cfg.n_ctx}, () => Math.floor(u() * cfg.d_vocab));
  const batch = {inputs: [seq(), seq(), seq()], targets: [seq(), seq(), seq()], weights: [1, 1, 1].map(() => Array(cfg.n_ctx).fill(1))};
  const G = new Float64Array(P.length);
  const loss = FlatTrain.lossAndGrad(cfg, P, batch, G);
  assert.strictEqual(calls.run.length, 3);
  assert.ok(Number.isFinite(loss) && G.some((g) => g !== 0));
  // The backward pass on a workspace of the same pass gives the same gradient.
  const again = new Float64Array(P.length);
  for (let s = 0; s < 3; s++) {
    const ws = globalThis.FlatModel.run(cfg, P, batch.inputs[s]), V = cfg.d_vocab, dl = new Float64Array(cfg.n_ctx * V);
    let total = 3 * cfg.n_ctx;
    for (let t = 0; t < cfg.n_ctx; t++) {
      const row = Array.from(ws.logits.subarray(t * V, (t + 1) * V)), p = real.softmax(row);
      for (let i = 0; i < V; i++) dl[t * V + i] = p[i] / total;
      dl[t * V + batch.targets[s][t]] -= 1 / total;
    }
    FlatTrain.backward(cfg, P, ws, dl, again);
  }
  let worst = 0;
  for (let i = 0; i < G.length; i++) worst = Math.max(worst, Math.abs(G[i] - again[i]));
  assert.ok(worst < 1e-12, `worst difference ${worst}`);
});

test("session.js: the held-out evaluation runs model.js's forward once per window", () => {
  const held = FlatTasks.heldOut(task, FlatTasks.split(task, FlatTrain.rng(7, 0))[1].slice(0, 6), cfg.n_ctx);
  reset();
  const e = FlatSession.evaluate(cfg, P, held);
  assert.strictEqual(calls.run.length, held.val.length + held.rule.length);
  assert.ok(Number.isFinite(e.loss));
});

test("measures.js: the sampler generates through model.js's forward, one call a token", () => {
  const model = {cfg, w: real.unpack(cfg, P)};
  reset();
  const steps = FlatMeasures.generate(model, [0, 1, 2], 4);
  assert.strictEqual(steps.length, 4);
  assert.strictEqual(calls.forward, 4);
});

test("playground-explore.js: the self-check's reference logits come from model.js's forward", () => {
  const run = {config: {model: cfg, vocab: task.vocab, task: task.name, seed: 0}, flat: P, step: 10,
    metrics: [], checkpoints: new Map([[0, {flat: P}]])};
  const shipped = {focus: {}, hooks: {"simulator-16d": []}, measures: {}};
  reset();
  const data = PlaygroundExplorer.explorerData(run, shipped, "simulator-16d", [0]);
  assert.strictEqual(calls.run.length, data.reference.prompts.length);
  assert.strictEqual(data.reference.logits.length, data.reference.prompts.reduce((n, p) => n + p.length * cfg.d_vocab, 0));
});
