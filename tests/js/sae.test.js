// The dashboards page's encoder (flatformer/explorer/sae.js) against Python's, on fixtures
// tests/test_dashboards.py writes: each kind's latents on random activations, to 1e-9.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const fs = require("node:fs");
const path = require("node:path");

const FIXTURE = process.env.SAE_FIXTURE;
if (!FIXTURE) throw new Error("SAE_FIXTURE is unset: run tests/test_dashboards.py, which writes it");
const fixture = JSON.parse(fs.readFileSync(FIXTURE, "utf8"));
const FlatSAE = require(path.join(__dirname, "..", "..", "flatformer", "explorer", "sae.js"));

for (const c of fixture.cases) {
  test(`${c.name}: every latent of every input is Python's`, () => {
    let worst = 0, active = 0;
    c.x.forEach((x, n) => {
      const f = FlatSAE.encode(c.encoder, x);
      assert.strictEqual(f.length, c.f[n].length);
      f.forEach((v, j) => {
        worst = Math.max(worst, Math.abs(v - c.f[n][j]));
        if (v !== 0) active += 1;
        assert.strictEqual(v !== 0, c.f[n][j] !== 0, `${c.name}: input ${n}, latent ${j} fires in one only`);
      });
    });
    assert.ok(worst < 1e-9, `${c.name}: worst difference ${worst}`);
    assert.strictEqual(active, c.active);
  });
}

test("an encoder of an unknown kind is refused", () => {
  assert.throws(() => FlatSAE.encode({kind: "gated", W_enc: [[1]], b_enc: [0], b_dec: null}, [1]), /kind gated/);
});
