// One training run in the page, no DOM: the default recipe of flatformer/train.py (candidates
// tried up to the selection step, then the best by held-out rule error, then loss, goes on),
// held-out evaluation as evaluate.evaluate defines it, metrics rows and kept checkpoints as a
// run folder holds them. Used by the Worker (worker.js) and, for checks, by node tests.
"use strict";

const FlatSession = (() => {
  const M_ = typeof FlatModel !== "undefined" ? FlatModel : require("./model.js");
  const T_ = typeof FlatTrain !== "undefined" ? FlatTrain : require("./train.js");
  const K_ = typeof FlatTasks !== "undefined" ? FlatTasks : require("./tasks.js");

  // config.PRESETS (those the playground offers), shipped by page.py; the vocabulary is the
  // task's.
  const PRESETS = FlatConstants.PRESETS;

  // train.RECIPES["default"] (shipped by page.py), then the task's defaults, then the user's
  // choices, with get_recipe's rule for runs shorter than twice the selection step.
  function recipe(task, choices) {
    const r = {...FlatConstants.RECIPE, ...(task.defaults || {})};
    // the user's numbers, held to train.Recipe's ranges (a bad field keeps the default)
    const ranges = {steps: [1, 1000000, true], batch_size: [1, 4096, true], lr: [1e-9, 1e6],
      weight_decay: [0, 10]};
    for (const [k, [lo, hi, whole]] of Object.entries(ranges)) {
      const v = Number(choices[k]);
      if (choices[k] === undefined || !Number.isFinite(v) || (whole && !Number.isInteger(v))) continue;
      r[k] = Math.min(hi, Math.max(lo, v));
    }
    if (r.candidates > 1 && r.select_step > Math.floor(r.steps / 2)) {
      r.select_step = Math.min(r.select_step, Math.floor(Math.floor(r.steps / 2) / r.checkpoint_every) * r.checkpoint_every);
      if (r.select_step === 0) r.candidates = 1;
    }
    return r;
  }

  // evaluate.evaluate: held-out loss over the val windows, rule error over the rule windows
  // (top prediction, first maximum as argmax takes it, not the forced target).
  function evaluate(cfg, P, held) {
    const V = cfg.d_vocab;
    let loss = 0, n = 0;
    for (const w of held.val) {
      const {logits} = M_.run(cfg, P, w.inputs);
      for (let t = 0; t < w.inputs.length; t++) {
        if (!w.weights[t]) continue;
        let mx = -Infinity, se = 0;
        for (let i = 0; i < V; i++) mx = Math.max(mx, logits[t * V + i]);
        for (let i = 0; i < V; i++) se += Math.exp(logits[t * V + i] - mx);
        loss += (Math.log(se) - (logits[t * V + w.targets[t]] - mx)) * w.weights[t];
        n += w.weights[t];
      }
    }
    let wrong = 0;
    for (const r of held.rule) {
      const {logits} = M_.run(cfg, P, r.inputs.slice(0, r.index + 1));
      const o = r.index * V;
      let top = 0;
      for (let i = 1; i < V; i++) if (logits[o + i] > logits[o + top]) top = i;
      if (top !== r.target) wrong++;
    }
    return {loss: loss / Math.max(n, 1), rule_error: held.rule.length ? wrong / held.rule.length : NaN};
  }

  class Session {
    // choices: {task, preset, seed, steps, lr, batch_size, weight_decay}; heldSeqs: the held-out
    // sequences (Python's, for data seed 0, so that `flatformer eval` reads the same set).
    constructor(choices, heldSeqs) {
      this.task = K_.TASKS[choices.task];
      if (!this.task) throw new Error(`unknown task ${choices.task}`);
      const presetName = choices.preset || this.task.preset;
      if (!PRESETS[presetName]) throw new Error(`unknown preset ${presetName}`);
      this.preset = presetName;
      this.cfg = {...PRESETS[presetName], d_vocab: this.task.vocab.length};
      T_.check(this.cfg);
      this.seed = choices.seed | 0;
      this.recipe = recipe(this.task, choices);
      const [train, generatedHeld] = K_.split(this.task, T_.rng(7, 0));
      this.train = K_.corpus(this.task, train);
      this.starts = K_.windowStarts(this.train, this.cfg.n_ctx);
      this.held = K_.heldOut(this.task, heldSeqs || generatedHeld, this.cfg.n_ctx);
      const r = this.recipe;
      this.members = [];
      for (let c = 0; c < r.candidates; c++) {
        const flat = T_.init(this.cfg, T_.rng(this.seed, c, 1), r.embed_init_scale);
        this.members.push({candidate: c, flat, opt: new T_.AdamW(flat, {betas: r.betas, eps: r.eps, weightDecay: r.weight_decay}),
          batches: T_.rng(this.seed, c, 2), grad: new Float64Array(flat.length), lossSum: 0, lossN: 0,
          metrics: [], checkpoints: new Map()});
      }
      this.step = 0;
      this.seconds = 0;
      this.record();
      this.keep();
    }

    get current() { return this.members[0]; }
    get done() { return this.step >= this.recipe.steps; }

    batch(member) {
      const inputs = [], targets = [], weights = [];
      for (let b = 0; b < this.recipe.batch_size; b++) {
        const s = this.starts[Math.floor(member.batches() * this.starts.length)];
        const w = K_.window(this.train, s, this.cfg.n_ctx, this.recipe.drop_unseen);
        inputs.push(w.inputs); targets.push(w.targets); weights.push(w.weights);
      }
      return {inputs, targets, weights};
    }

    record() {
      const r = this.recipe, lr = T_.lrAt(r, Math.min(this.step, r.steps - 1));
      for (const m of this.members) {
        const e = evaluate(this.cfg, m.flat, this.held);
        m.metrics.push({step: this.step, train_loss: m.lossN ? m.lossSum / m.lossN : e.loss,
          val_loss: e.loss, rule_error: e.rule_error, lr});
        m.lossSum = 0; m.lossN = 0;
      }
    }

    keep() {
      for (const m of this.members) {
        m.checkpoints.set(this.step, {flat: m.flat.slice(), m: m.opt.m.slice(), v: m.opt.v.slice(),
          t: m.opt.t, candidate: m.candidate, loss_sum: m.lossSum, loss_n: m.lossN});
      }
    }

    // At the selection step: the candidate with the lowest rule error, then loss, goes on.
    select() {
      const key = (m) => m.metrics[m.metrics.length - 1];
      let best = this.members[0];
      for (const m of this.members) {
        const a = key(m), b = key(best);
        if (a.rule_error < b.rule_error || (a.rule_error === b.rule_error && a.val_loss < b.val_loss)) best = m;
      }
      this.members = [best];
    }

    // n training steps (fewer at the end), with the recipe's evaluations and checkpoints.
    advance(n) {
      const r = this.recipe, t0 = Date.now();
      for (let i = 0; i < n && !this.done; i++) {
        const lr = T_.lrAt(r, this.step);
        for (const m of this.members) {
          const loss = T_.lossAndGrad(this.cfg, m.flat, this.batch(m), m.grad);
          if (!Number.isFinite(loss)) throw new Error(`loss became NaN at step ${this.step + 1}: lower the learning rate`);
          m.opt.step(m.grad, lr);
          m.lossSum += loss; m.lossN += 1;
        }
        this.step += 1;
        if (this.step % r.eval_every === 0 || this.step === r.steps) this.record();
        if (this.step % r.checkpoint_every === 0 || this.step === r.steps) this.keep();
        if (this.members.length > 1 && this.step === r.select_step) this.select();
      }
      this.seconds += (Date.now() - t0) / 1000;
    }

    last() { return this.current.metrics[this.current.metrics.length - 1]; }

    // The run folder's config.json (train.Job.run_config's fields).
    config() {
      return {flatformer: this.version || "playground", task: this.task.name, seed: this.seed, data_seed: 0,
        vocab: this.task.vocab.slice(), model: {...this.cfg}, recipe: {...this.recipe},
        trained_by: "flatformer playground (JavaScript float64; its own training sequences, "
          + "Python's held-out set of data seed 0)"};
    }
  }

  return {PRESETS, recipe, evaluate, Session};
})();

if (typeof module !== "undefined") module.exports = FlatSession;
