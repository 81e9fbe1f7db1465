// The transformer in JavaScript: the forward pass of flatformer/engine/model.py, one sequence
// at a time (no seed or batch axis), in float64, with no DOM. The measures the page shows are
// in measures.js, the edge graph in edges.js; tests/js/engine.test.js holds every activation to
// the NumPy reference's within 1e-9 on fixtures Python writes.
//
// A model is {cfg, w} where w maps TransformerLens parameter names to {data, shape} over one
// Float64Array. `forward` returns the logits and a cache of every named activation (shapes as
// in TransformerLens without the batch axis: hook_q is [T][H][dh], hook_pattern [H][T][T]).
// Knobs are the hooks of flatformer/readout/knobs.py, each applied to the same activation:
//   posOff              hook_pos_embed -> 0
//   headsOff ["L.H"]    blocks.L.attn.hook_z[:, H] -> 0                      (zero ablation)
//   headsMean {"L.H": means[L]}  blocks.L.attn.hook_z[:, H] -> its mean over the reference
//                       windows at each position, means from `headMeans`     (mean ablation)
//   mlpOff [L]          blocks.L.hook_mlp_out -> 0
//   beta                blocks.*.attn.hook_attn_scores -> beta * scores (masked entries stay -inf)
"use strict";

const FlatModel = (() => {
  // LayerNorm's eps and the tanh GELU's sqrt(2 / pi) are flatformer/config.py's LN_EPS and
  // GELU_C, which page.py ships ahead of every script as FlatConstants (a node test sets it
  // from Python too): no implementation keeps its own copy. Read on first use, so that code
  // needing neither (erf, the shapes) loads without them.
  let shipped = null;
  function constants() {
    if (shipped) return shipped;
    if (typeof FlatConstants === "undefined") throw new Error("FlatConstants (LN_EPS, GELU_C) were not shipped with the page");
    return (shipped = FlatConstants);
  }
  // d_mlp = 0: attention-only blocks (no MLP, no ln2, no hook_resid_mid), as in model.py.
  const attnOnly = (cfg) => cfg.d_mlp === 0;
  // The number of logits: d_vocab_out (imported models) or d_vocab, as config.py's vocab_out.
  const vocabOut = (cfg) => cfg.d_vocab_out || cfg.d_vocab;

  // The error function to ~1e-16: below 3 the series 2/sqrt(pi) e^(-x^2) sum 2^n x^(2n+1) /
  // (1 3 ... (2n+1)), whose terms are all positive (no cancellation); from 3 on, 1 - erfc with
  // erfc's continued fraction e^(-x^2)/sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / ...))).
  function erf(x) {
    if (Number.isNaN(x)) return NaN;
    const ax = Math.abs(x), sign = x < 0 ? -1 : 1;
    if (ax < 3) {
      let term = ax, sum = ax;
      for (let n = 1; n < 200 && term > 1e-17 * sum; n++) {
        term *= 2 * ax * ax / (2 * n + 1);
        sum += term;
      }
      return sign * 2 / Math.sqrt(Math.PI) * Math.exp(-ax * ax) * sum;
    }
    if (ax > 6) return sign;                       // erfc(6) < 2.2e-17: erf is 1 in float64
    let f = ax;                                    // the fraction, evaluated from its tail
    for (let n = 120; n >= 1; n--) f = ax + (n / 2) / f;
    return sign * (1 - Math.exp(-ax * ax) / Math.sqrt(Math.PI) / f);
  }

  function paramShapes(cfg) {
    const d = cfg.d_model, h = cfg.n_heads, dh = cfg.d_head, m = cfg.d_mlp, v = cfg.d_vocab;
    const vOut = vocabOut(cfg);
    const shapes = [["embed.W_E", [v, d]], ["pos_embed.W_pos", [cfg.n_ctx, d]]];
    for (let l = 0; l < cfg.n_layers; l++) {
      const b = `blocks.${l}.`;
      if (cfg.normalization === "pre_ln") shapes.push([b + "ln1.w", [d]], [b + "ln1.b", [d]]);
      for (const x of "QKV") shapes.push([b + `attn.W_${x}`, [h, d, dh]]);
      if (cfg.qkv_bias) for (const x of "QKV") shapes.push([b + `attn.b_${x}`, [h, dh]]);
      if (cfg.attn_out) shapes.push([b + "attn.W_O", [h, dh, d]]);
      if (cfg.attn_out_bias) shapes.push([b + "attn.b_O", [d]]);
      if (attnOnly(cfg)) continue;
      if (cfg.normalization === "pre_ln") shapes.push([b + "ln2.w", [d]], [b + "ln2.b", [d]]);
      shapes.push([b + "mlp.W_in", [d, m]], [b + "mlp.b_in", [m]],
                  [b + "mlp.W_out", [m, d]], [b + "mlp.b_out", [d]]);
    }
    if (cfg.ln_final) shapes.push(["ln_final.w", [d]], ["ln_final.b", [d]]);
    shapes.push(["unembed.W_U", [d, vOut]]);
    if (cfg.unembed_bias) shapes.push(["unembed.b_U", [vOut]]);
    return shapes;
  }

  const size = (shape) => shape.reduce((a, b) => a * b, 1);
  const nParams = (cfg) => paramShapes(cfg).reduce((n, [, s]) => n + size(s), 0);

  // Named views into `flat` starting at `offset` (one checkpoint), tensors in the order of
  // `shapes`: [[name, shape]], the explorer's from Python (config.param_shapes), else our own.
  function unpack(cfg, flat, offset = 0, shapes = paramShapes(cfg)) {
    const w = {};
    for (const [name, shape] of shapes) {
      const n = size(shape);
      w[name] = {data: flat.subarray(offset, offset + n), shape};
      offset += n;
    }
    return w;
  }

  // ---- small linear algebra on plain arrays ----
  const zeros = (n) => new Array(n).fill(0);
  const add = (a, b) => a.map((x, i) => x + b[i]);

  // x (length rows) times the [rows, cols] matrix stored at data[off...].
  function vecMat(x, data, off, rows, cols) {
    const out = zeros(cols);
    for (let i = 0; i < rows; i++) {
      const xi = x[i], base = off + i * cols;
      for (let j = 0; j < cols; j++) out[j] += xi * data[base + j];
    }
    return out;
  }

  function layerNorm(x, w, b) {
    const d = x.length;
    let mean = 0;
    for (const v of x) mean += v;
    mean /= d;
    const c = x.map((v) => v - mean);
    let sq = 0;
    for (const v of c) sq += v * v;
    const scale = Math.sqrt(sq / d + constants().LN_EPS);
    const xHat = c.map((v) => v / scale);
    return {scale, out: xHat.map((v, i) => v * w[i] + b[i])};
  }

  function act(cfg, x) {
    if (cfg.act_fn === "relu") return Math.max(x, 0);
    if (cfg.act_fn === "gelu_erf") return 0.5 * x * (1 + erf(x / Math.SQRT2));
    return 0.5 * x * (1 + Math.tanh(constants().GELU_C * (x + 0.044715 * x * x * x)));
  }

  // Softmax that subtracts the maximum first, so tiny temperatures never overflow.
  function softmax(row) {
    let max = -Infinity;
    for (const v of row) if (v > max) max = v;
    const e = row.map((v) => Math.exp(v - max));
    let sum = 0;
    for (const v of e) sum += v;
    return e.map((v) => v / sum);
  }

  function logSoftmax(row) {
    let max = -Infinity;
    for (const v of row) if (v > max) max = v;
    let sum = 0;
    for (const v of row) sum += Math.exp(v - max);
    const lse = max + Math.log(sum);
    return row.map((v) => v - lse);
  }

  // Query, key or value of one residual vector for head h of a layer: x W[h] (+ b[h]).
  function project(model, layer, which, x, h) {
    const {cfg, w} = model, d = cfg.d_model, dh = cfg.d_head;
    const W = w[`blocks.${layer}.attn.W_${which}`].data;
    const out = vecMat(x, W, h * d * dh, d, dh);
    if (cfg.qkv_bias) {
      const b = w[`blocks.${layer}.attn.b_${which}`].data;
      for (let c = 0; c < dh; c++) out[c] += b[h * dh + c];
    }
    return out;
  }

  // The residual as the attention of `layer` reads it (after LN1 when there is one).
  function attnInput(model, layer, resid) {
    if (model.cfg.normalization !== "pre_ln") return resid;
    const w = model.w, b = `blocks.${layer}.`;
    return layerNorm(resid, w[b + "ln1.w"].data, w[b + "ln1.b"].data).out;
  }

  // The MLP of `layer` on one residual vector z: returns {pre, post, out} (out without z).
  function mlp(model, layer, z, cache) {
    const {cfg, w} = model, d = cfg.d_model, m = cfg.d_mlp, b = `blocks.${layer}.`;
    let x = z;
    if (cfg.normalization === "pre_ln") {
      const ln = layerNorm(z, w[b + "ln2.w"].data, w[b + "ln2.b"].data);
      if (cache) { cache.scale.push([ln.scale]); cache.normalized.push(ln.out); }
      x = ln.out;
    }
    const pre = add(vecMat(x, w[b + "mlp.W_in"].data, 0, d, m), w[b + "mlp.b_in"].data);
    const post = pre.map((v) => act(cfg, v));
    const out = add(vecMat(post, w[b + "mlp.W_out"].data, 0, m, d), w[b + "mlp.b_out"].data);
    return {pre, post, out};
  }

  // The stream as the unembedding reads it: after the final LayerNorm when there is one.
  function finalNorm(model, h) {
    const w = model.w;
    return model.cfg.ln_final ? layerNorm(h, w["ln_final.w"].data, w["ln_final.b"].data).out : h;
  }

  function unembed(model, h) {
    const {cfg, w} = model;
    h = finalNorm(model, h);
    const logits = vecMat(h, w["unembed.W_U"].data, 0, cfg.d_model, vocabOut(cfg));
    if (cfg.unembed_bias) {
      const b = w["unembed.b_U"].data;
      for (let v = 0; v < vocabOut(cfg); v++) logits[v] += b[v];
    }
    return logits;
  }

  function checkTokens(cfg, tokens) {
    if (!tokens.length) throw new Error("the sequence is empty");
    if (tokens.length > cfg.n_ctx) throw new Error(`${tokens.length} tokens exceed the context of ${cfg.n_ctx}`);
    for (const t of tokens) {
      if (!Number.isInteger(t) || t < 0 || t >= cfg.d_vocab) throw new Error(`token ${t} is outside the vocabulary`);
    }
  }

  // Logits [T][V] and the cache of named activations. See the header for `knobs`.
  function forward(model, tokens, knobs = {}) {
    const {cfg, w} = model;
    checkTokens(cfg, tokens);
    const T = tokens.length, d = cfg.d_model, H = cfg.n_heads, dh = cfg.d_head;
    const beta = knobs.beta === undefined ? 1 : knobs.beta;
    const coeff = cfg.attn_coeff === undefined ? 1 : cfg.attn_coeff;
    const headsOff = new Set(knobs.headsOff || []), mlpOff = new Set(knobs.mlpOff || []);
    const cache = {};
    const WE = w["embed.W_E"].data, WP = w["pos_embed.W_pos"].data;
    const x = cache["hook_embed"] = tokens.map((t) => Array.from(WE.subarray(t * d, t * d + d)));
    const p = cache["hook_pos_embed"] = tokens.map((_, i) =>
      knobs.posOff ? zeros(d) : Array.from(WP.subarray(i * d, i * d + d)));
    let resid = x.map((xi, i) => add(xi, p[i]));                     // e = x + p
    for (let l = 0; l < cfg.n_layers; l++) {
      const b = `blocks.${l}.`;
      cache[b + "hook_resid_pre"] = resid;
      let attnIn = resid;
      if (cfg.normalization === "pre_ln") {
        const lns = resid.map((r) => layerNorm(r, w[b + "ln1.w"].data, w[b + "ln1.b"].data));
        cache[b + "ln1.hook_scale"] = lns.map((ln) => [ln.scale]);
        attnIn = cache[b + "ln1.hook_normalized"] = lns.map((ln) => ln.out);
      }
      const qkv = {};
      for (const which of "QKV") {
        qkv[which] = attnIn.map((a) => Array.from({length: H}, (_, h) => project(model, l, which, a, h)));
        cache[b + `attn.hook_${which.toLowerCase()}`] = qkv[which];           // [T][H][dh]
      }
      const scores = [], pattern = [];
      const z = Array.from({length: T}, () => Array.from({length: H}, () => zeros(dh)));
      for (let h = 0; h < H; h++) {
        const S = [], A = [];
        for (let i = 0; i < T; i++) {
          const row = [];
          for (let j = 0; j < T; j++) {
            if (j > i) { row.push(-Infinity); continue; }                    // causal mask
            let dot = 0;
            for (let c = 0; c < dh; c++) dot += qkv.Q[i][h][c] * qkv.K[j][h][c];
            let s = dot / Math.sqrt(dh);
            if (beta !== 1) s = beta * s;
            row.push(s);
          }
          S.push(row);
          let a = softmax(row);
          // Zhong et al.'s attention rate: coeff softmax + (1 - coeff) on every key read
          if (coeff !== 1) a = a.map((x, j) => (j <= i ? coeff * x + (1 - coeff) : 0));
          A.push(a);
          if (!headsOff.has(`${l}.${h}`)) {
            for (let j = 0; j <= i; j++) {
              for (let c = 0; c < dh; c++) z[i][h][c] += a[j] * qkv.V[j][h][c];
            }
          }
        }
        scores.push(S);
        pattern.push(A);
      }
      cache[b + "attn.hook_attn_scores"] = scores;                               // [H][T][T]
      cache[b + "attn.hook_pattern"] = pattern;
      for (let h = 0; h < H; h++) {
        const mean = (knobs.headsMean || {})[`${l}.${h}`];
        if (mean) for (let i = 0; i < T; i++) z[i][h] = mean[i][h].slice();
      }
      cache[b + "attn.hook_z"] = z;                                              // [T][H][dh]
      const attnOut = z.map((zi) => {
        const flat = zi.flat();                                                  // head-major
        const out = cfg.attn_out ? vecMat(flat, w[b + "attn.W_O"].data, 0, H * dh, d) : flat;
        return cfg.attn_out_bias ? add(out, w[b + "attn.b_O"].data) : out;
      });
      cache[b + "hook_attn_out"] = attnOut;
      if (attnOnly(cfg)) {
        resid = cache[b + "hook_resid_post"] = resid.map((r, i) => add(r, attnOut[i]));
        continue;
      }
      resid = cache[b + "hook_resid_mid"] = resid.map((r, i) => add(r, attnOut[i]));  // z = e + Attn(e)
      const ln2 = {scale: [], normalized: []};
      const mlps = resid.map((r) => mlp(model, l, r, ln2));
      if (cfg.normalization === "pre_ln") {
        cache[b + "ln2.hook_scale"] = ln2.scale;
        cache[b + "ln2.hook_normalized"] = ln2.normalized;
      }
      cache[b + "mlp.hook_pre"] = mlps.map((o) => o.pre);
      cache[b + "mlp.hook_post"] = mlps.map((o) => o.post);
      const mlpOut = cache[b + "hook_mlp_out"] = mlps.map((o) => (mlpOff.has(l) ? zeros(d) : o.out));
      resid = cache[b + "hook_resid_post"] = resid.map((r, i) => add(r, mlpOut[i]));   // h = z + FFN(z)
    }
    if (cfg.ln_final) {
      const lns = resid.map((r) => layerNorm(r, w["ln_final.w"].data, w["ln_final.b"].data));
      cache["ln_final.hook_scale"] = lns.map((ln) => [ln.scale]);
      cache["ln_final.hook_normalized"] = lns.map((ln) => ln.out);
    }
    return {logits: resid.map((r) => unembed(model, r)), cache};
  }

  // Each layer's hook_z averaged over reference windows (all n_ctx long), per position:
  // {layer: [T][H][dh]}, the means a mean-ablated head writes (readout.knobs.head_means).
  function headMeans(model, windows) {
    const {cfg} = model, sums = {};
    for (const window of windows) {
      const {cache} = forward(model, window);
      for (let l = 0; l < cfg.n_layers; l++) {
        const z = cache[`blocks.${l}.attn.hook_z`];
        if (!sums[l]) sums[l] = z.map((zi) => zi.map((v) => v.slice()));
        else z.forEach((zi, i) => zi.forEach((v, h) => v.forEach((x, c) => { sums[l][i][h][c] += x; })));
      }
    }
    for (const l in sums) sums[l].forEach((zi) => zi.forEach((v) => v.forEach((_, c) => { v[c] /= windows.length; })));
    return sums;
  }


  return {
    constants, attnOnly, vocabOut, erf, paramShapes, size, nParams, unpack, zeros, add, vecMat,
    layerNorm, act, softmax, logSoftmax, project, attnInput, mlp, finalNorm, unembed, checkTokens,
    forward, headMeans,
  };
})();

if (typeof module !== "undefined") module.exports = FlatModel;
