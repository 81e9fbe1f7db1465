// The playground's trainer before and after its forward pass moved into model.js, timed in one
// node process: each case trains one Session (the Worker's loop: batches, loss and gradient,
// AdamW, held-out evaluation, checkpoints) with the page's own scripts from two folders,
// alternating chunks of steps so both meet the same machine load. Prints JSON: per case the
// steps per second of each (wall and process CPU time) and whether the two trained the same numbers (every metrics row
// and the final weights, bit for bit). Driven by bench/page_train_speed.py, which writes the
// constants page.py ships and checks the earlier scripts out of git.
//
//   node bench/page_train_speed.js BEFORE_DIR AFTER_DIR CONSTANTS_JSON CASES_JSON
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const [beforeDir, afterDir, constantsPath, casesPath] = process.argv.slice(2);
globalThis.FlatConstants = JSON.parse(fs.readFileSync(constantsPath, "utf8"));
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
// Each folder's session.js loads its own train.js, model.js and tasks.js beside it.
const sides = {before: require(path.resolve(beforeDir, "session.js")), after: require(path.resolve(afterDir, "session.js"))};

function same(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}

const results = [];
for (const c of cases) {
  const choices = {task: c.task, preset: c.preset, seed: c.seed, steps: c.steps};
  // Warm both up (the JIT compiles the hot loops) on a short run of the same shape.
  for (const S of Object.values(sides)) new S.Session({...choices, steps: c.warmup}).advance(c.warmup);
  const runs = {}, seconds = {before: 0, after: 0}, cpu = {before: 0, after: 0}, chunks = {before: [], after: []};
  for (const [name, S] of Object.entries(sides)) runs[name] = new S.Session(choices);
  const order = ["before", "after"];
  for (let round = 0; !runs.before.done || !runs.after.done; round++) {
    for (const name of round % 2 ? order.slice().reverse() : order) {
      const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
      runs[name].advance(c.chunk);
      const wall = Number(process.hrtime.bigint() - t0) / 1e9;
      seconds[name] += wall;
      chunks[name].push(wall);
      const used = process.cpuUsage(c0);
      cpu[name] += (used.user + used.system) / 1e6;
    }
  }
  // The same chunk of steps (same batches, same evaluations) timed on each side: the median of
  // their ratios is robust to a load spike on one side's turn.
  const ratios = chunks.after.map((t, i) => t / chunks.before[i]).sort((a, b) => a - b);
  const rows = (s) => s.current.metrics.flatMap((r) => [r.step, r.train_loss, r.val_loss, r.rule_error]);
  results.push({
    ...c,
    seconds,
    cpu_seconds: cpu,
    steps_per_s: {before: c.steps / seconds.before, after: c.steps / seconds.after},
    steps_per_cpu_s: {before: c.steps / cpu.before, after: c.steps / cpu.after},
    median_chunk_time_after_over_before: ratios[Math.floor(ratios.length / 2)],
    identical: same(rows(runs.before), rows(runs.after)) && same(runs.before.current.flat, runs.after.current.flat),
    final: runs.after.last(),
  });
}
console.log(JSON.stringify(results));
