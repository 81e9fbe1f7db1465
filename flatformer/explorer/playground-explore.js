// The playground's weights as the explorer's page data, so that every explorer panel (attention
// arithmetic, knobs and KL, lens, circuits) works on a paused training. No DOM: the page mounts
// the result with Explorer.mount. What Python knows about a preset or a task (the activation
// names, the measures' settings, the focus token) comes in the playground's data; the
// self-check compares the explorer's view of the weights (every checkpoint in one buffer, the
// step picked from it) with the trainer's own buffer, both through model.js's one forward pass.
"use strict";

const PlaygroundExplorer = (() => {
  // Prompts that together hold every token and reach every position, and one shorter.
  function prompts(V, T) {
    const out = [];
    for (let i = 0; i * T < V + T; i++) out.push(Array.from({length: T}, (_, j) => (i * T + j) % V));
    out.push(out[0].slice(0, Math.max(1, T >> 1)));
    return out;
  }

  // readout.reference_windows of the held-out set the session evaluates on (its own for data
  // seed 0 when Python's is not shipped): its val windows, at most MEAN_WINDOWS evenly spaced.
  // Mean ablation (the knobs' head means, the edge graph) averages over these, as in Python.
  const MEAN_WINDOWS = 512;
  function meanWindows(task, heldSeqs, nCtx) {
    const K = typeof FlatTasks !== "undefined" ? FlatTasks : require("./tasks.js");
    const T = typeof FlatTrain !== "undefined" ? FlatTrain : require("./train.js");
    const val = K.heldOut(task, heldSeqs || K.split(task, T.rng(7, 0))[1], nCtx).val;
    return K.evenlySpaced(val.length, MEAN_WINDOWS).map((i) => val[i].inputs.slice());
  }

  // run: {config, flat, step, metrics, checkpoints: Map(step -> {flat})}; shipped: the
  // playground data's `explorer` block; preset: the preset trained; demo: token ids to open on;
  // windows: the held-out windows mean ablation averages over (meanWindows), or null for none.
  function explorerData(run, shipped, preset, demo, step = run.step, windows = null) {
    const cfg = run.config.model, shapes = FlatModel.paramShapes(cfg), n = FlatModel.nParams(cfg);
    const kept = new Map([...run.checkpoints].map(([s, ck]) => [s, ck.flat]));
    kept.set(run.step, run.flat);   // the paused weights, which may lie between checkpoints
    const steps = [...kept.keys()].sort((a, b) => a - b);
    const flat = new Float64Array(n * steps.length);
    steps.forEach((s, i) => flat.set(kept.get(s), i * n));
    const ask = prompts(cfg.d_vocab, cfg.n_ctx), V = FlatModel.vocabOut(cfg), logits = [];
    for (const p of ask) {
      const f = FlatModel.run(cfg, kept.get(step), p);
      for (let i = 0; i < p.length * V; i++) logits.push(f.logits[i]);
    }
    const rows = run.metrics, col = (k) => rows.map((r) => (Number.isFinite(r[k]) ? r[k] : null));
    const vocab = run.config.vocab, focus = shipped.focus[run.config.task];
    return {
      format: "flatformer-playground-1", title: `${run.config.task}-seed${run.config.seed} (playground)`,
      task: run.config.task, preset, config: cfg, n_params: n, vocab,
      demo: demo.length ? demo : [0], focus: focus && vocab.includes(focus) ? vocab.indexOf(focus) : null,
      tensors: shapes, hooks: shipped.hooks[preset], steps, step, flat,
      metrics: {step: col("step"), train_loss: col("train_loss"), val_loss: col("val_loss"), rule_error: col("rule_error")},
      reference: {step, prompts: ask, logits: Float64Array.from(logits), source: "the trainer's own weights (model.js run on the training buffer)"},
      measures: {...shipped.measures, mean_windows: windows},
    };
  }

  return {explorerData, meanWindows, prompts};
})();

if (typeof module !== "undefined") module.exports = PlaygroundExplorer;
