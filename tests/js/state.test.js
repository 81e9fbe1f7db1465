// The page's state (state.js) without a browser: a link holds the whole view, and anything a
// link gets wrong falls back to the default with its name in `problems`.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const path = require("node:path");
const PageState = require(path.join(__dirname, "..", "..", "flatformer", "explorer", "state.js"));

// A two-layer, two-head model with an MLP over 12 tokens, checkpoints at 0, 100 and 200.
const DATA = {config: {d_vocab: 12, n_layers: 2, n_heads: 2, n_ctx: 8, d_mlp: 32},
  demo: [1, 2, 3], step: 200, steps: [0, 100, 200], circuit: {edges: []}, key_phase: null};
const panels = new Set(["embed", "attend-0", "attend-1", "readout"]);
const env = {DATA, edges: 30, hasPanel: (id) => panels.has(id)};
const {DEFAULT, toHash, fromHash} = PageState.create(env);

test("the default state is the demo at the opening step, and its hash says only that", () => {
  assert.deepStrictEqual(DEFAULT.seq, [1, 2, 3]);
  assert.strictEqual(DEFAULT.step, 200);
  assert.strictEqual(DEFAULT.n, 8);
  assert.strictEqual(toHash(DEFAULT), "#seq=1.2.3&step=200");
  assert.deepStrictEqual(fromHash(""), {state: DEFAULT, problems: []});
});

test("every setting survives the round trip through the hash", () => {
  const s = {...DEFAULT, seq: [0, 11, 4, 4], step: 100, off: ["0.1", "1.0"], mlp: [1], pos: true,
    beta: 2.5, temp: 0.3, k: 4, p: 0.9, seed: 7, n: 12, cell: {l: 1, h: 1, q: 3, k: 2}, zoom: true,
    cut: [3, 17], only: true, view: "attend-1"};
  const hash = toHash(s);
  const back = fromHash(hash);
  assert.deepStrictEqual(back.problems, []);
  assert.deepStrictEqual(back.state, s);
  assert.strictEqual(toHash(back.state), hash);
});

test("invalid settings fall back one by one, each named", () => {
  const {state, problems} = fromHash(
    "#seq=1.99&step=50&off=0.2,x&mlp=2&cut=30&beta=11&temp=0&k=13&p=0&seed=-1&n=65&cell=0.0.1.2&view=lens");
  assert.deepStrictEqual(state, DEFAULT);
  assert.deepStrictEqual(problems, ["seq", "step=50", "off", "mlp", "cut", "beta=11", "temp=0", "k=13",
    "p=0", "seed=-1", "n=65", "cell", "view=lens"]);
});

test("a cell must lie under the causal mask of the sequence the link gives", () => {
  assert.deepStrictEqual(fromHash("#seq=1.2.3&cell=1.0.2.2").state.cell, {l: 1, h: 0, q: 2, k: 2});
  assert.deepStrictEqual(fromHash("#seq=1.2.3&cell=1.0.3.0").problems, ["cell"]);   // q past the end
  assert.deepStrictEqual(fromHash("#seq=1.2.3&cell=0.0.1.2").problems, ["cell"]);   // k after q
  assert.deepStrictEqual(fromHash("#seq=1.2.3&cell=0.2.1.0").problems, ["cell"]);   // no head 2
});

test("a long bad value is cut in the notice; duplicates are dropped and lists sorted", () => {
  const {state, problems} = fromHash(`#beta=${"9".repeat(60)}&off=1.1,0.0,1.1&mlp=1,0,1`);
  assert.deepStrictEqual(problems, [`beta=${"9".repeat(40)}…`]);
  assert.deepStrictEqual(state.off, ["0.0", "1.1"]);
  assert.deepStrictEqual(state.mlp, [0, 1]);
});

test("only=circuit needs a circuit and colour=phase a key phase", () => {
  assert.strictEqual(fromHash("#only=circuit").state.only, true);
  assert.strictEqual(fromHash("#colour=phase").state.phase, false);
  const bare = PageState.create({...env, DATA: {...DATA, circuit: undefined}});
  assert.strictEqual(bare.fromHash("#only=circuit").state.only, false);
});

test("the knobs as the forward pass takes them, and whether any changed", () => {
  assert.strictEqual(PageState.changedKnobs(DEFAULT), false);
  const s = {...DEFAULT, off: ["1.0"], beta: 0.5};
  assert.strictEqual(PageState.changedKnobs(s), true);
  assert.deepStrictEqual(PageState.knobsOf(s), {headsOff: ["1.0"], mlpOff: [], posOff: false, beta: 0.5});
  assert.strictEqual(PageState.changedKnobs({...DEFAULT, pos: true}), true);
});
