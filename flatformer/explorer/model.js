// The transformer in JavaScript: the forward pass of flatformer/model.py, one sequence at a
// time (no seed or batch axis), in float64, with no DOM; and the measures the page shows, each
// the definition of flatformer/readout (softmax, KL, entropy, the sampler, knobs, planes) or of
// analysis/circuits (singular values and their top-k share), and the edge graph of
// flatformer/edges. Tests hold every number to Python's within 1e-9.
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
  const GELU_C = Math.sqrt(2 / Math.PI);
  const LN_EPS = 1e-5;

  // d_mlp = 0: attention-only blocks (no MLP, no ln2, no hook_resid_mid), as in model.py.
  const attnOnly = (cfg) => cfg.d_mlp === 0;

  function paramShapes(cfg) {
    const d = cfg.d_model, h = cfg.n_heads, dh = cfg.d_head, m = cfg.d_mlp, v = cfg.d_vocab;
    const shapes = [["embed.W_E", [v, d]], ["pos_embed.W_pos", [cfg.n_ctx, d]]];
    for (let l = 0; l < cfg.n_layers; l++) {
      const b = `blocks.${l}.`;
      if (cfg.normalization === "pre_ln") shapes.push([b + "ln1.w", [d]], [b + "ln1.b", [d]]);
      for (const x of "QKV") shapes.push([b + `attn.W_${x}`, [h, d, dh]]);
      if (cfg.qkv_bias) for (const x of "QKV") shapes.push([b + `attn.b_${x}`, [h, dh]]);
      if (cfg.attn_out) shapes.push([b + "attn.W_O", [h, dh, d]]);
      if (attnOnly(cfg)) continue;
      if (cfg.normalization === "pre_ln") shapes.push([b + "ln2.w", [d]], [b + "ln2.b", [d]]);
      shapes.push([b + "mlp.W_in", [d, m]], [b + "mlp.b_in", [m]],
                  [b + "mlp.W_out", [m, d]], [b + "mlp.b_out", [d]]);
    }
    if (cfg.ln_final) shapes.push(["ln_final.w", [d]], ["ln_final.b", [d]]);
    shapes.push(["unembed.W_U", [d, v]]);
    if (cfg.unembed_bias) shapes.push(["unembed.b_U", [v]]);
    return shapes;
  }

  const size = (shape) => shape.reduce((a, b) => a * b, 1);
  const nParams = (cfg) => paramShapes(cfg).reduce((n, [, s]) => n + size(s), 0);

  // Named views into `flat` starting at `offset` (one checkpoint).
  function unpack(cfg, flat, offset = 0) {
    const w = {};
    for (const [name, shape] of paramShapes(cfg)) {
      const n = size(shape);
      w[name] = {data: flat.subarray(offset, offset + n), shape};
      offset += n;
    }
    return w;
  }

  function hookNames(cfg) {
    const names = ["hook_embed", "hook_pos_embed"];
    for (let l = 0; l < cfg.n_layers; l++) {
      const b = `blocks.${l}.`;
      names.push(b + "hook_resid_pre");
      if (cfg.normalization === "pre_ln") names.push(b + "ln1.hook_scale", b + "ln1.hook_normalized");
      for (const n of ["q", "k", "v", "attn_scores", "pattern", "z"]) names.push(b + `attn.hook_${n}`);
      names.push(b + "hook_attn_out");
      if (!attnOnly(cfg)) {
        names.push(b + "hook_resid_mid");
        if (cfg.normalization === "pre_ln") names.push(b + "ln2.hook_scale", b + "ln2.hook_normalized");
        names.push(b + "mlp.hook_pre", b + "mlp.hook_post", b + "hook_mlp_out");
      }
      names.push(b + "hook_resid_post");
    }
    if (cfg.ln_final) names.push("ln_final.hook_scale", "ln_final.hook_normalized");
    return names;
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
    const scale = Math.sqrt(sq / d + LN_EPS);
    const xHat = c.map((v) => v / scale);
    return {scale, out: xHat.map((v, i) => v * w[i] + b[i])};
  }

  function act(cfg, x) {
    if (cfg.act_fn === "relu") return Math.max(x, 0);
    return 0.5 * x * (1 + Math.tanh(GELU_C * (x + 0.044715 * x * x * x)));
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
    const logits = vecMat(h, w["unembed.W_U"].data, 0, cfg.d_model, cfg.d_vocab);
    if (cfg.unembed_bias) {
      const b = w["unembed.b_U"].data;
      for (let v = 0; v < cfg.d_vocab; v++) logits[v] += b[v];
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
          const a = softmax(row);
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
        return cfg.attn_out ? vecMat(flat, w[b + "attn.W_O"].data, 0, H * dh, d) : flat;
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

  // The output network of the last layer as a map from its input z (the residual after its
  // attention) to logits: z + MLP(z), then the unembedding. With one layer and no LayerNorm
  // this is exactly the paper's "output landscape".
  function outputMap(model, z, mlpOn = true) {
    const l = model.cfg.n_layers - 1;
    const h = mlpOn && !attnOnly(model.cfg) ? add(z, mlp(model, l, z).out) : z;
    return unembed(model, h);
  }

  // The output map over a G x G grid of the plane {mean, axes} inside bounds {x0, x1, y0, y1}:
  // argmax token and entropy (nats) per cell, row 0 at the top (y1). Written without
  // allocation in the loop: it runs on every checkpoint change.
  function outputGrid(model, plane, bounds, G, mlpOn = true) {
    if (attnOnly(model.cfg) || model.cfg.ln_final) return outputGridPlain(model, plane, bounds, G, mlpOn);
    const {cfg, w} = model, d = cfg.d_model, m = cfg.d_mlp, V = cfg.d_vocab;
    const l = cfg.n_layers - 1, b = `blocks.${l}.`, ln = cfg.normalization === "pre_ln";
    const Win = w[b + "mlp.W_in"].data, bin = w[b + "mlp.b_in"].data;
    const Wout = w[b + "mlp.W_out"].data, bout = w[b + "mlp.b_out"].data;
    const WU = w["unembed.W_U"].data, bU = cfg.unembed_bias ? w["unembed.b_U"].data : null;
    const lw = ln ? w[b + "ln2.w"].data : null, lb = ln ? w[b + "ln2.b"].data : null;
    const z = new Float64Array(d), x = new Float64Array(d), hid = new Float64Array(m);
    const res = new Float64Array(d), logit = new Float64Array(V);
    const argmax = new Int32Array(G * G), ent = new Float64Array(G * G);
    for (let r = 0; r < G; r++) {
      const py = bounds.y1 - (r + 0.5) / G * (bounds.y1 - bounds.y0);
      for (let c = 0; c < G; c++) {
        const px = bounds.x0 + (c + 0.5) / G * (bounds.x1 - bounds.x0);
        for (let i = 0; i < d; i++) z[i] = plane.mean[i] + px * plane.axes[0][i] + py * plane.axes[1][i];
        for (let i = 0; i < d; i++) res[i] = z[i];
        if (mlpOn) {
          if (ln) {
            let mean = 0, sq = 0;
            for (let i = 0; i < d; i++) mean += z[i];
            mean /= d;
            for (let i = 0; i < d; i++) { x[i] = z[i] - mean; sq += x[i] * x[i]; }
            const scale = Math.sqrt(sq / d + LN_EPS);
            for (let i = 0; i < d; i++) x[i] = x[i] / scale * lw[i] + lb[i];
          } else for (let i = 0; i < d; i++) x[i] = z[i];
          for (let j = 0; j < m; j++) hid[j] = bin[j];
          for (let i = 0; i < d; i++) for (let j = 0; j < m; j++) hid[j] += x[i] * Win[i * m + j];
          for (let j = 0; j < m; j++) hid[j] = act(cfg, hid[j]);
          for (let i = 0; i < d; i++) res[i] += bout[i];
          for (let j = 0; j < m; j++) for (let i = 0; i < d; i++) res[i] += hid[j] * Wout[j * d + i];
        }
        let best = 0;
        for (let v = 0; v < V; v++) logit[v] = bU ? bU[v] : 0;
        for (let i = 0; i < d; i++) for (let v = 0; v < V; v++) logit[v] += res[i] * WU[i * V + v];
        for (let v = 1; v < V; v++) if (logit[v] > logit[best]) best = v;
        let sum = 0, acc = 0;
        for (let v = 0; v < V; v++) { const e = Math.exp(logit[v] - logit[best]); sum += e; acc += e * (logit[v] - logit[best]); }
        argmax[r * G + c] = best;
        ent[r * G + c] = Math.log(sum) - acc / sum;
      }
    }
    return {argmax, entropy: ent, G};
  }

  // outputGrid through `outputMap`, for the models its unrolled loop does not cover (no MLP,
  // or a final LayerNorm).
  function outputGridPlain(model, plane, bounds, G, mlpOn) {
    const argmax = new Int32Array(G * G), ent = new Float64Array(G * G);
    for (let r = 0; r < G; r++) {
      const py = bounds.y1 - (r + 0.5) / G * (bounds.y1 - bounds.y0);
      for (let c = 0; c < G; c++) {
        const px = bounds.x0 + (c + 0.5) / G * (bounds.x1 - bounds.x0);
        const probs = softmax(outputMap(model, liftPlane(plane, px, py), mlpOn));
        let best = 0;
        for (let v = 1; v < probs.length; v++) if (probs[v] > probs[best]) best = v;
        argmax[r * G + c] = best;
        ent[r * G + c] = entropy(probs);
      }
    }
    return {argmax, entropy: ent, G};
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

  // KL(P || Q) in nats between the distributions of two logit vectors. A knob's cost is
  // kl(original, changed): KL(original || changed), as in flatformer/readout/probs.py.
  function kl(logitsP, logitsQ) {
    const lp = logSoftmax(logitsP), lq = logSoftmax(logitsQ);
    let total = 0;
    for (let i = 0; i < lp.length; i++) total += Math.exp(lp[i]) * (lp[i] - lq[i]);
    return Math.max(total, 0);
  }

  function entropy(probs) {
    let h = 0;
    for (const p of probs) if (p > 0) h -= p * Math.log(p);
    return h;
  }

  // The sampling distribution: softmax(logits / temperature), then top-k, then top-p
  // (the smallest set of most likely tokens holding at least p), renormalised.
  // topK = 0 means off. Ties are broken by vocabulary index.
  function sampling(logits, {temperature = 1, topK = 0, topP = 1} = {}) {
    const probs = softmax(logits.map((v) => v / temperature));
    const order = probs.map((_, i) => i).sort((a, b) => probs[b] - probs[a] || a - b);
    const keep = new Set();
    let mass = 0;
    for (const i of order) {
      if (topK > 0 && keep.size >= topK) break;
      if (keep.size > 0 && mass >= topP) break;
      keep.add(i);
      mass += probs[i];
    }
    let total = 0;
    for (const i of keep) total += probs[i];
    const out = probs.map((p, i) => (keep.has(i) ? p / total : 0));
    return {raw: probs, probs: out, kept: keep.size};
  }

  // mulberry32: a tiny seeded generator of uniform numbers in [0, 1) (32-bit state).
  function mulberry32(seed) {
    let a = seed >>> 0;
    return function next() {
      a = (a + 0x6D2B79F5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  // The token whose cumulative interval (vocabulary order) holds the draw u.
  function pick(probs, u) {
    let c = 0, last = 0;
    for (let i = 0; i < probs.length; i++) {
      if (probs[i] <= 0) continue;
      last = i;
      if (u < c + probs[i]) return {token: i, lo: c, hi: c + probs[i]};
      c += probs[i];
    }
    return {token: last, lo: c - probs[last], hi: c};   // u beyond a rounding-short total
  }

  // Sample n tokens after `tokens`, sliding the context window. Each step records its draw.
  function generate(model, tokens, n, {seed = 1, knobs = {}, ...options} = {}) {
    const rng = mulberry32(seed), seq = tokens.slice(), steps = [];
    for (let s = 0; s < n; s++) {
      const window = seq.slice(-model.cfg.n_ctx);
      const {logits} = forward(model, window, knobs);
      const dist = sampling(logits[logits.length - 1], options);
      const u = rng();
      const chosen = pick(dist.probs, u);
      steps.push({u, ...chosen, p: dist.probs[chosen.token], probs: dist.probs});
      seq.push(chosen.token);
    }
    return steps;
  }

  // One-sided Jacobi SVD (Hestenes) of an [m][n] matrix: singular values, descending, and the
  // right singular vectors as columns of V. Accurate for small singular values too.
  function svd(A) {
    const m = A.length, n = A[0].length;
    const U = A.map((r) => r.slice());
    const V = Array.from({length: n}, (_, i) => Array.from({length: n}, (_, j) => (i === j ? 1 : 0)));
    for (let sweep = 0; sweep < 60; sweep++) {
      let rotated = false;
      for (let p = 0; p < n - 1; p++) {
        for (let q = p + 1; q < n; q++) {
          let alpha = 0, beta = 0, gamma = 0;
          for (let i = 0; i < m; i++) {
            alpha += U[i][p] * U[i][p]; beta += U[i][q] * U[i][q]; gamma += U[i][p] * U[i][q];
          }
          if (Math.abs(gamma) <= 1e-15 * Math.sqrt(alpha * beta) || gamma === 0) continue;
          rotated = true;
          const zeta = (beta - alpha) / (2 * gamma);
          const t = Math.sign(zeta || 1) / (Math.abs(zeta) + Math.sqrt(1 + zeta * zeta));
          const c = 1 / Math.sqrt(1 + t * t), s = c * t;
          for (const M of [U, V]) {
            for (const row of M) {
              const a = row[p], b = row[q];
              row[p] = c * a - s * b; row[q] = s * a + c * b;
            }
          }
        }
      }
      if (!rotated) break;
    }
    const norms = Array.from({length: n}, (_, j) => Math.hypot(...U.map((r) => r[j])));
    const order = norms.map((_, j) => j).sort((a, b) => norms[b] - norms[a]);
    return {s: order.map((j) => norms[j]), V: V.map((row) => order.map((j) => row[j]))};
  }

  // A head's circuits: QK = W_Q W_K^T (d x d) and OV = W_V W_O (d x d), or W_V without W_O.
  function circuits(model, layer, h, k = 3) {
    const {cfg, w} = model, d = cfg.d_model, dh = cfg.d_head, b = `blocks.${layer}.attn.`;
    const mat = (name) => Array.from({length: d}, (_, i) =>
      Array.from(w[b + name].data.subarray((h * d + i) * dh, (h * d + i + 1) * dh)));
    const WQ = mat("W_Q"), WK = mat("W_K"), WV = mat("W_V");
    const QK = WQ.map((qi) => WK.map((kj) => qi.reduce((s, v, c) => s + v * kj[c], 0)));
    let OV = WV;
    if (cfg.attn_out) {
      const WO = w[b + "W_O"].data;
      OV = WV.map((vi) => vecMat(vi, WO, h * dh * d, dh, d));
    }
    const describe = (M) => {
      const s = svd(M).s;
      const sq = s.map((x) => x * x), total = sq.reduce((a, x) => a + x, 0);
      const kk = Math.min(k, dh);  // at most the rank: "top 3" of a rank-2 matrix misleads
      const top = sq.slice(0, kk).reduce((a, x) => a + x, 0);   // analysis.circuits.top_k_mass
      return {matrix: M, s, k: kk, topK: total > 0 ? top / total : 1};
    };
    return {QK: describe(QK), OV: describe(OV)};
  }

  // The plane to draw points in (readout.plane.fit_plane): the identity for d <= 2, else the
  // first two principal axes, {mean, axes: [u1, u2], exact}. Signs are fixed (largest entry
  // positive) so the picture does not flip between checkpoints.
  function pca2(points) {
    const d = points[0].length, n = points.length;
    const mean = zeros(d);
    for (const p of points) for (let i = 0; i < d; i++) mean[i] += p[i] / n;
    if (d <= 2) {
      return {mean: zeros(d), axes: [[1, 0], [0, 1]].slice(0, 2).map((u) => u.slice(0, d).concat(zeros(Math.max(0, d - 2)))), exact: true};
    }
    const {V} = svd(points.map((p) => p.map((v, i) => v - mean[i])));
    const axes = [0, 1].map((k) => {
      const u = V.map((row) => row[k]);
      let big = 0;
      for (const v of u) if (Math.abs(v) > Math.abs(big)) big = v;
      return big < 0 ? u.map((v) => -v) : u;
    });
    return {mean, axes, exact: false};
  }

  function projectPlane(plane, x) {
    return plane.axes.map((u) => u.reduce((s, v, i) => s + v * (x[i] - plane.mean[i]), 0));
  }

  function liftPlane(plane, a, b) {
    return plane.mean.map((m, i) => m + a * plane.axes[0][i] + b * plane.axes[1][i]);
  }

  // ---- the edge graph of flatformer/edges/graph.py, in the same order ----
  // Nodes tok, pos, aL.H (receivers aL.H.q/k/v), mL, logits; an edge [sender, receiver].
  function edgeGraph(cfg) {
    let senders = ["tok", "pos"];
    const receivers = [], edges = [];
    for (let l = 0; l < cfg.n_layers; l++) {
      const heads = Array.from({length: cfg.n_heads}, (_, h) => `a${l}.${h}`);
      for (const head of heads) {
        for (const kind of "qkv") {
          receivers.push(`${head}.${kind}`);
          for (const s of senders) edges.push([s, `${head}.${kind}`]);
        }
      }
      senders = senders.concat(heads);
      if (attnOnly(cfg)) continue;
      receivers.push(`m${l}`);
      for (const s of senders) edges.push([s, `m${l}`]);
      senders = senders.concat([`m${l}`]);
    }
    receivers.push("logits");
    for (const s of senders) edges.push([s, "logits"]);
    const into = {};
    for (const r of receivers) into[r] = [];
    edges.forEach(([s, r], e) => into[r].push([e, s]));
    return {senders, receivers, edges, into, nodes: senders.concat(["logits"])};
  }

  // Logits [T][V] (through the final LayerNorm if any) and every sender's output [T][d] with
  // edges ablated: receiver r reads the sum over its edges e = (s, r) of
  // ref_s + keep[e] (out_s - ref_s), where out_s is the sender's output in this run and
  // refs[s] [T][d] its ablated value (keep 1 = edge kept, 0 = ablated).
  function edgeForward(model, tokens, refs, keep) {
    const {cfg, w} = model;
    checkTokens(cfg, tokens);
    const g = edgeGraph(cfg), T = tokens.length, d = cfg.d_model, dh = cfg.d_head;
    const WE = w["embed.W_E"].data, WP = w["pos_embed.W_pos"].data;
    const outs = {
      tok: tokens.map((t) => Array.from(WE.subarray(t * d, t * d + d))),
      pos: tokens.map((_, i) => Array.from(WP.subarray(i * d, i * d + d))),
    };
    const read = (r) => {
      const x = Array.from({length: T}, () => zeros(d));
      for (const [e, s] of g.into[r]) {
        const out = outs[s], ref = refs[s];
        for (let i = 0; i < T; i++) {
          for (let c = 0; c < d; c++) x[i][c] += ref[i][c] + keep[e] * (out[i][c] - ref[i][c]);
        }
      }
      return x;
    };
    for (let l = 0; l < cfg.n_layers; l++) {
      for (let h = 0; h < cfg.n_heads; h++) {
        const head = `a${l}.${h}`, qkv = {};
        for (const which of "QKV") {
          qkv[which] = read(`${head}.${which.toLowerCase()}`)
            .map((x) => project(model, l, which, attnInput(model, l, x), h));
        }
        const z = [];
        for (let i = 0; i < T; i++) {
          const row = [];
          for (let j = 0; j <= i; j++) {
            let dot = 0;
            for (let c = 0; c < dh; c++) dot += qkv.Q[i][c] * qkv.K[j][c];
            row.push(dot / Math.sqrt(dh));
          }
          const a = softmax(row), zi = zeros(dh);
          for (let j = 0; j <= i; j++) for (let c = 0; c < dh; c++) zi[c] += a[j] * qkv.V[j][c];
          z.push(zi);
        }
        outs[head] = z.map((zi) => {
          if (cfg.attn_out) return vecMat(zi, w[`blocks.${l}.attn.W_O`].data, h * dh * d, dh, d);
          const out = zeros(d);
          for (let c = 0; c < dh; c++) out[h * dh + c] = zi[c];
          return out;
        });
      }
      if (!attnOnly(cfg)) outs[`m${l}`] = read(`m${l}`).map((x) => mlp(model, l, x).out);
    }
    return {logits: read("logits").map((x) => unembed(model, x)), outs};
  }

  // Every sender's output averaged over `windows` (equal-length token lists), per position:
  // the mean-ablation values of flatformer/edges/methods.py.
  function meanOutputs(model, windows) {
    const g = edgeGraph(model.cfg), ones = g.edges.map(() => 1);
    const zero = {};
    const T = windows[0].length, d = model.cfg.d_model;
    for (const s of g.senders) zero[s] = Array.from({length: T}, () => zeros(d));
    const sum = {};
    for (const s of g.senders) sum[s] = Array.from({length: T}, () => zeros(d));
    for (const win of windows) {
      const {outs} = edgeForward(model, win, zero, ones);
      for (const s of g.senders) {
        for (let i = 0; i < T; i++) for (let c = 0; c < d; c++) sum[s][i][c] += outs[s][i][c];
      }
    }
    for (const s of g.senders) sum[s] = sum[s].map((r) => r.map((v) => v / windows.length));
    return sum;
  }

  return {
    edgeGraph, edgeForward, meanOutputs,
    attnOnly, paramShapes, nParams, unpack, hookNames, forward, headMeans, outputMap, outputGrid, project, attnInput, mlp,
    unembed, softmax, logSoftmax, kl, entropy, sampling, mulberry32, pick, generate, svd,
    circuits, pca2, projectPlane, liftPlane, layerNorm,
  };
})();

if (typeof module !== "undefined") module.exports = FlatModel;
