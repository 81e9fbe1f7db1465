// The playground's engine against Python's, on fixtures tests/test_playground.py writes:
// gradients on the same weights and batch, AdamW after many steps on the same batches, and the
// held-out windows and rule error of the same sequences.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const fs = require("node:fs");
const path = require("node:path");
const dir = path.join(__dirname, "..", "..", "flatformer", "explorer");
const fixture = JSON.parse(fs.readFileSync(process.env.PLAYGROUND_FIXTURE, "utf8"));
globalThis.FlatConstants = fixture.constants;  // as page.py ships them ahead of every script
const FlatTrain = require(path.join(dir, "train.js"));
const FlatTasks = require(path.join(dir, "tasks.js"));
const FlatSession = require(path.join(dir, "session.js"));

const worst = (a, b) => {
  assert.strictEqual(a.length, b.length);
  let w = 0;
  for (let i = 0; i < a.length; i++) w = Math.max(w, Math.abs(a[i] - b[i]) / Math.max(1, Math.abs(b[i])));
  return w;
};

for (const g of fixture.gradients) {
  test(`gradients of ${g.name} equal model.backward's`, () => {
    const P = Float64Array.from(g.params), G = new Float64Array(P.length);
    const loss = FlatTrain.lossAndGrad(g.cfg, P, g.batch, G);
    assert.ok(Math.abs(loss - g.loss) < 1e-9, `loss ${loss} vs ${g.loss}`);
    const w = worst(G, g.grad);
    assert.ok(w < 1e-9, `worst gradient difference ${w}`);
  });
}

test("AdamW after many steps on the same batches equals optim.AdamW's, and so does the loss at every step", () => {
  const a = fixture.adam;
  const P = Float64Array.from(a.params), G = new Float64Array(P.length);
  const opt = new FlatTrain.AdamW(P, {betas: a.betas, eps: a.eps, weightDecay: a.weight_decay});
  const losses = a.batches.map((batch, step) => {
    const loss = FlatTrain.lossAndGrad(a.cfg, P, batch, G);
    opt.step(G, FlatTrain.lrAt(a.recipe, step));
    return loss;
  });
  const w = worst(P, a.final);
  assert.ok(w < 1e-9, `worst parameter difference after ${a.batches.length} steps: ${w}`);
  assert.ok(worst(opt.v, a.v) < 1e-9);
  assert.ok(a.losses.length === a.batches.length && a.losses[0] > a.losses[a.losses.length - 1], "a falling curve");
  assert.ok(worst(losses, a.losses) < 1e-9, `worst loss difference over ${a.losses.length} steps: ${worst(losses, a.losses)}`);
});

for (const h of fixture.held) {
  test(`held-out windows and rule error of ${h.task} equal data.py's and evaluate's`, () => {
    const task = FlatTasks.TASKS[h.task];
    h.seqs.forEach((s) => {
      const r = task.rule(s);
      assert.deepStrictEqual(r.target, h.rules[h.seqs.indexOf(s)][0]);
      assert.deepStrictEqual(r.source, h.rules[h.seqs.indexOf(s)][1]);
    });
    const held = FlatTasks.heldOut(task, h.seqs, h.cfg.n_ctx);
    assert.deepStrictEqual(held.val.map((w) => w.inputs), h.val_inputs);
    assert.deepStrictEqual(held.rule.map((w) => w.inputs), h.rule_inputs);
    assert.deepStrictEqual(held.rule.map((w) => w.index), h.rule_index);
    const e = FlatSession.evaluate(h.cfg, Float64Array.from(h.params), held);
    assert.ok(Math.abs(e.rule_error - h.rule_error) < 1e-12, `${e.rule_error} vs ${h.rule_error}`);
    assert.ok(Math.abs(e.loss - h.loss) < 1e-9, `${e.loss} vs ${h.loss}`);
  });
}
