// The graph page's recompute (graph-model.js) against the weights Python computed: fixtures
// written by tests/test_graph_view_node.py (GRAPH_FIXTURE), one graph file per configuration.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const fs = require("node:fs");
const path = require("node:path");
const FlatGraph = require(path.join(__dirname, "..", "..", "flatformer", "explorer", "graph-model.js"));

const CASES = JSON.parse(fs.readFileSync(process.env.GRAPH_FIXTURE, "utf-8"));
const TOL = 1e-9;

for (const [name, {doc}] of Object.entries(CASES)) {
  test(`${name}: every link recomputed from the factors is Python's weight, and its paths sum to it`, () => {
    const F = doc.frozen;
    const result = FlatGraph.check(doc);
    assert.strictEqual(result.n, doc.links.length);
    assert.ok(result.worst < TOL, `worst ${result.worst} at ${result.where}`);
    let nonzero = 0;
    for (const l of doc.links) {
      const {path: total, activation, weight} = FlatGraph.link(F, l.source, l.target);
      assert.ok(Math.abs(activation * total - weight) === 0);
      const parts = FlatGraph.linkPaths(F, l.source, l.target);
      const sum = parts.reduce((a, p) => a + p.value, 0);
      assert.ok(Math.abs(sum - total) < TOL, `${l.source} -> ${l.target}: paths ${sum}, link ${total}`);
      if (parts.some((p) => p.hops.length && p.value !== 0)) nonzero += 1;
    }
    // attention carries some of them: the paths through heads are exercised
    assert.ok(nonzero > 0);
  });
}

test("a changed factor is caught: the check is not vacuous", () => {
  const doc = JSON.parse(JSON.stringify(Object.values(CASES)[0].doc));
  const withWrite = Object.values(doc.frozen.nodes).find((n) => n.write && n.kind === "token");
  withWrite.write[0] += 1;
  assert.ok(FlatGraph.check(doc).worst > 1e-6);
});

test("a link with more paths than the limit lists none, and its total is still exact", () => {
  const {doc} = Object.values(CASES).find(({doc: d}) => d.frozen.blocks.length > 1);
  const F = doc.frozen;
  const far = doc.links.find((l) => F.nodes[l.source].layer === -1 && F.nodes[l.target].kind === "logit");
  assert.strictEqual(FlatGraph.linkPaths(F, far.source, far.target, 1), null);
  assert.ok(FlatGraph.linkPaths(F, far.source, far.target).length > 1);
  assert.ok(Math.abs(FlatGraph.link(F, far.source, far.target).weight - far.weight) < TOL);
});
