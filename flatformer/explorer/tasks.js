// The playground's tasks in JavaScript, no DOM: each task's vocabulary, a generator that follows
// the rules of its Python class in flatformer/tasks (its own random stream, not NumPy's), and
// the rule (target and source of every position, Task.rule), from which the windows, the loss
// masks (data.Corpus.windows, drop_unseen) and the held-out rule error (evaluate.evaluate) are
// built exactly as data.py builds them. tests/test_playground.py checks rule, windows and rule
// error against Python's on the same sequences.
"use strict";

const FlatTasks = (() => {
  const digits = (n) => Array.from({length: n}, (_, i) => String(i));

  // MarkerTask: numbers 0..n-1 and a marker; the token after a marker is forced by `answer`
  // when it is defined, every other token is the marker with probability 0.3, else a number.
  function markerTask(name, marker, answer, extra = {}) {
    const vocab = digits(10).concat([marker]), M = 10;
    return {
      name, vocab, preset: "paper-2d", minLen: 20, maxLen: 50, ...extra,
      sample(u) {
        const len = this.minLen + Math.floor(u() * (this.maxLen - this.minLen + 1)), seq = [];
        for (let i = 0; i < len; i++) {
          const forced = seq.length && seq[seq.length - 1] === M ? answer(seq)[0] : -1;
          seq.push(forced >= 0 ? forced : (u() < 0.3 ? M : Math.floor(u() * 10)));
        }
        return seq;
      },
      rule(seq) {
        const target = new Array(seq.length).fill(-1), source = new Array(seq.length).fill(-1);
        for (let j = 1; j < seq.length; j++) {
          if (seq[j - 1] === M) [target[j], source[j]] = answer(seq.slice(0, j));
        }
        return {target, source};
      },
    };
  }

  // base.recent_target: after `marker`, the most recent earlier token in `wanted`.
  function recentTarget(seq, marker, wanted) {
    const target = new Array(seq.length).fill(-1), source = new Array(seq.length).fill(-1);
    let last = -1;
    for (let j = 0; j < seq.length - 1; j++) {
      if (seq[j] === marker && last >= 0) { target[j + 1] = seq[last]; source[j + 1] = last; }
      if (wanted(seq[j])) last = j;
    }
    return {target, source};
  }

  const plusLastEven = {
    name: "plus-last-even", vocab: digits(11).concat(["+"]), preset: "paper-2d", minLen: 20, maxLen: 50,
    demo: "4 1 + 4 6 9 5 +",
    sample(u) {
      const len = 20 + Math.floor(u() * 31), seq = [];
      let lastEven = -1;
      for (let i = 0; i < len; i++) {
        let tok;
        if (seq.length && seq[seq.length - 1] === 11 && lastEven >= 0) tok = lastEven;
        else if (u() < 0.3) tok = 11;
        else tok = Math.floor(u() * 11);
        if (tok !== 11 && tok % 2 === 0) lastEven = tok;
        seq.push(tok);
      }
      return seq;
    },
    rule: (seq) => recentTarget(seq, 11, (t) => t < 11 && t % 2 === 0),
  };

  const lastOdd = markerTask("last-odd", "*", (prefix) => {
    for (let p = prefix.length - 2; p >= 0; p--) if (prefix[p] < 10 && prefix[p] % 2 === 1) return [prefix[p], p];
    return [-1, -1];
  }, {demo: "3 8 * 3 5 2 6 *"});

  const successor = markerTask("successor", "+", (prefix) => {
    const n = prefix.length;
    return n >= 2 && prefix[n - 2] < 10 ? [(prefix[n - 2] + 1) % 10, n - 2] : [-1, -1];
  }, {demo: "5 2 8 + 9 1 7 +"});

  const maxSoFar = markerTask("max-so-far", "M", (prefix) => {
    let top = -1, at = -1;
    for (let p = 0; p < prefix.length - 1; p++) {
      if (prefix[p] < 10 && prefix[p] >= top) { top = prefix[p]; at = p; }
    }
    return [top, at];
  }, {minLen: 10, maxLen: 20, demo: "1 4 M 4 2 6 3 M"});

  const copyBack = markerTask("copy-3-back", "=", (prefix) => {
    const n = prefix.length;
    return n >= 4 && prefix[n - 4] < 10 ? [prefix[n - 4], n - 4] : [-1, -1];
  }, {preset: "small-4d-2head", demo: "6 1 7 = 6 3 9 ="});

  const LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN".split("");
  const induction = {
    name: "induction", vocab: LETTERS, preset: "attn-only-2l", minLen: 49, maxLen: 49,
    nSequences: 8000, nHeldOut: 100, demo: "c h a e b d g k m p r t w y B E c h a e b d g k",
    defaults: {steps: 3000, lr: 0.01, candidates: 1, eval_every: 500},
    sample(u) {
      let start, period;
      if (u() < 0.5) { start = 0; period = 2 + Math.floor(u() * 15); } else {
        const prefix = 4 + Math.floor(u() * 35);
        const lo = Math.max(0, prefix - 16);
        start = lo + Math.floor(u() * (prefix - 1 - lo));
        period = prefix - start;
      }
      const perm = LETTERS.map((_, i) => i);
      for (let i = perm.length - 1; i > 0; i--) {
        const j = Math.floor(u() * (i + 1));
        [perm[i], perm[j]] = [perm[j], perm[i]];
      }
      const seq = perm.slice(0, start + period);
      while (seq.length < 49) seq.push(seq[seq.length - period]);
      return seq;
    },
    rule(seq) {
      const prev = [], last = new Map();
      seq.forEach((t, i) => { prev.push(last.has(t) ? last.get(t) : -1); last.set(t, i); });
      const target = new Array(seq.length).fill(-1), source = new Array(seq.length).fill(-1);
      for (let j = 2; j < seq.length; j++) {
        const p = prev[j - 1];
        if (p >= 1 && seq[p - 1] === seq[j - 2]) { target[j] = seq[p + 1]; source[j] = p - 1; }
      }
      return {target, source};
    },
  };

  const TASKS = {};
  for (const t of [plusLastEven, lastOdd, successor, maxSoFar, copyBack, induction]) TASKS[t.name] = t;

  // data.Corpus: sequences end to end with each position's target and (global) source.
  function corpus(task, seqs) {
    const tokens = [], target = [], source = [], starts = [], ends = [];
    for (const s of seqs) {
      const r = task.rule(s), o = tokens.length;
      starts.push(o);
      for (let j = 0; j < s.length; j++) {
        tokens.push(s[j]); target.push(r.target[j]); source.push(r.source[j] >= 0 ? r.source[j] + o : -1);
      }
      ends.push(tokens.length);
    }
    return {tokens, target, source, starts, ends};
  }

  // Corpus.window_starts: every window of n_ctx inputs plus one target inside a sequence.
  function windowStarts(c, nCtx) {
    const out = [];
    c.starts.forEach((s, i) => { for (let p = s; p < c.ends[i] - nCtx; p++) out.push(p); });
    return out;
  }

  // Corpus.windows for one start: inputs, targets, and weights (0 for a forced target whose
  // source lies before the window, with drop_unseen).
  function window(c, start, nCtx, dropUnseen) {
    const inputs = c.tokens.slice(start, start + nCtx), targets = c.tokens.slice(start + 1, start + nCtx + 1);
    const weights = targets.map((_, i) => {
      const p = start + 1 + i;
      return dropUnseen && c.target[p] >= 0 && c.source[p] < start ? 0 : 1;
    });
    return {inputs, targets, weights};
  }

  // data.evenly_spaced: np.linspace(0, n - 1, k).round() (round half to even, as NumPy).
  function evenlySpaced(n, k) {
    if (n <= k) return Array.from({length: n}, (_, i) => i);
    const step = (n - 1) / (k - 1);
    return Array.from({length: k}, (_, i) => {
      const x = i === k - 1 ? n - 1 : i * step, f = Math.floor(x);
      if (x - f !== 0.5) return Math.round(x);
      return f % 2 === 0 ? f : f + 1;
    });
  }

  // TaskData.build's held-out sets: 400 evenly spaced non-overlapping windows for the loss,
  // and every constrained position the context can see for the rule error (rule_windows).
  function heldOut(task, seqs, nCtx) {
    const c = corpus(task, seqs);
    let starts = [];
    c.starts.forEach((s, i) => { for (let p = s; p < c.ends[i] - nCtx; p += nCtx) starts.push(p); });
    starts = evenlySpaced(starts.length, 400).map((i) => starts[i]);
    const val = starts.map((s) => window(c, s, nCtx, false));
    const rule = [];
    let seq = 0;
    for (let pos = 0; pos < c.tokens.length; pos++) {
      while (seq + 1 < c.starts.length && c.starts[seq + 1] <= pos) seq++;
      if (c.target[pos] < 0 || c.source[pos] < 0) continue;
      const start = Math.max(c.starts[seq], pos - nCtx);
      if (c.source[pos] < start) continue;
      const inputs = [];
      for (let i = 0; i < nCtx; i++) inputs.push(c.tokens[Math.min(start + i, pos - 1)]);
      rule.push({inputs, index: pos - 1 - start, target: c.target[pos]});
    }
    return {val, rule};
  }

  // Training and held-out sequences: Task.split's sizes (the last n_held_out held out).
  function split(task, u) {
    const n = task.nSequences || 2000, held = task.nHeldOut || 200, seqs = [];
    for (let i = 0; i < n; i++) seqs.push(task.sample(u));
    return [seqs.slice(0, n - held), seqs.slice(n - held)];
  }

  const encode = (task, text) => text.trim().split(/\s+/).map((w) => task.vocab.indexOf(w));

  return {TASKS, corpus, windowStarts, window, evenlySpaced, heldOut, split, encode};
})();

if (typeof module !== "undefined") module.exports = FlatTasks;
