// The measures the page shows, computed from FlatModel's forward pass with no DOM, each the
// definition of its Python home: the output landscape (readout.landscape), KL and entropy
// (readout.probs), the sampler's distribution (readout.sampling), singular values and their
// top-k share (analysis.circuits), the plane (readout.plane.fit_plane). tests/js/ holds each to
// Python's within 1e-9.
"use strict";

const FlatMeasures = (() => {
  const FM = typeof FlatModel !== "undefined" ? FlatModel : require("./model.js");
  const {attnOnly, vocabOut, add, zeros, vecMat, lnRow, linearRow, activate, mlp, unembed, softmax, logSoftmax, forward} = FM;

  // The output network of the last layer as a map from its input z (the residual after its
  // attention) to logits: z + MLP(z), then the unembedding. With one layer and no LayerNorm
  // this is exactly the paper's "output landscape".
  function outputMap(model, z, mlpOn = true) {
    const l = model.cfg.n_layers - 1;
    const h = mlpOn && !attnOnly(model.cfg) ? add(z, mlp(model, l, z).out) : z;
    return unembed(model, h);
  }

  // The output map over a G x G grid of the plane {mean, axes} inside bounds {x0, x1, y0, y1}:
  // argmax token and entropy (nats) per cell, row 0 at the top (y1). model.js's pieces on
  // arrays allocated once: it runs on every checkpoint change.
  function outputGrid(model, plane, bounds, G, mlpOn = true) {
    const cfg0 = model.cfg;
    if (attnOnly(cfg0) || cfg0.ln_final || FM.rms(cfg0) || FM.gated(cfg0) || FM.solu(cfg0)) return outputGridPlain(model, plane, bounds, G, mlpOn);
    const {cfg, w} = model, d = cfg.d_model, m = cfg.d_mlp, V = vocabOut(cfg);
    const l = cfg.n_layers - 1, b = `blocks.${l}.`, ln = cfg.normalization === "pre_ln";
    const Win = w[b + "mlp.W_in"].data, bin = w[b + "mlp.b_in"].data;
    const Wout = w[b + "mlp.W_out"].data, bout = w[b + "mlp.b_out"].data;
    const WU = w["unembed.W_U"].data, bU = cfg.unembed_bias ? w["unembed.b_U"].data : null;
    const lw = ln ? w[b + "ln2.w"].data : null, lb = ln ? w[b + "ln2.b"].data : null;
    const z = new Float64Array(d), xhat = new Float64Array(d), x = new Float64Array(d);
    const pre = new Float64Array(m), hid = new Float64Array(m), out = new Float64Array(d);
    const res = new Float64Array(d), logit = new Float64Array(V);
    const argmax = new Int32Array(G * G), ent = new Float64Array(G * G);
    for (let r = 0; r < G; r++) {
      const py = bounds.y1 - (r + 0.5) / G * (bounds.y1 - bounds.y0);
      for (let c = 0; c < G; c++) {
        const px = bounds.x0 + (c + 0.5) / G * (bounds.x1 - bounds.x0);
        for (let i = 0; i < d; i++) z[i] = plane.mean[i] + px * plane.axes[0][i] + py * plane.axes[1][i];
        for (let i = 0; i < d; i++) res[i] = z[i];
        if (mlpOn) {                                                     // z + MLP(z)
          if (ln) lnRow(z, 0, d, lw, 0, lb, 0, xhat, x);
          linearRow(ln ? x : z, 0, d, Win, 0, m, bin, 0, pre, 0);
          activate(cfg, pre, 0, m, hid, null);
          linearRow(hid, 0, m, Wout, 0, d, bout, 0, out, 0);
          for (let i = 0; i < d; i++) res[i] += out[i];
        }
        linearRow(res, 0, d, WU, 0, V, bU, bU ? 0 : -1, logit, 0);
        let best = 0;
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
  // a final norm, RMSNorm or a gated MLP).
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

  // The sampling distribution of readout.sampling.distribution: softmax(logits / temperature),
  // then top-k, then top-p over what top-k kept (the smallest set of most likely tokens holding
  // at least p of that mass), renormalised. topK = 0 and topP = 1 mean off; ties are broken by
  // vocabulary index.
  function sampling(logits, {temperature = 1, topK = 0, topP = 1} = {}) {
    const probs = softmax(logits.map((v) => v / temperature));
    const order = probs.map((_, i) => i).sort((a, b) => probs[b] - probs[a] || a - b);
    const ranked = topK > 0 ? order.slice(0, topK) : order;
    let mass = 0;
    for (const i of ranked) mass += probs[i];
    // As Python's: a token goes when the mass before it already reaches p (to rounding).
    const reach = topP * mass * (1 - 1e-12);
    const keep = new Set();
    let before = 0;
    for (const i of ranked) {
      if (topP < 1 && keep.size > 0 && before >= reach) break;
      keep.add(i);
      before += probs[i];
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
    // grouped keys and values: the head's group's (attn._W_K, attn._W_V)
    const g = Math.floor(h / (cfg.n_heads / FM.kvHeads(cfg)));
    const mat = (x) => Array.from({length: d}, (_, i) => {
      const data = w[`blocks.${layer}.${FM.attnWeight(cfg, x)}`].data, hh = x === "Q" ? h : g;
      return Array.from(data.subarray((hh * d + i) * dh, (hh * d + i + 1) * dh));
    });
    const WQ = mat("Q"), WK = mat("K"), WV = mat("V");
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

  // X^T X of an [n][d] matrix.
  function scatter(X) {
    const d = X[0].length, S = Array.from({length: d}, () => zeros(d));
    for (const x of X) {
      for (let i = 0; i < d; i++) {
        const xi = x[i], row = S[i];
        for (let j = i; j < d; j++) row[j] += xi * x[j];
      }
    }
    for (let i = 0; i < d; i++) for (let j = 0; j < i; j++) S[i][j] = S[j][i];
    return S;
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
    // The axes are the centred points' right singular vectors; for more points than dimensions,
    // those of their d x d scatter matrix X^T X (its eigenvectors): the same axes, at a cost that
    // grows with the points once instead of with every rotation of them.
    const X = points.map((p) => p.map((v, i) => v - mean[i]));
    const {V} = svd(n > d ? scatter(X) : X);
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

  return {
    outputMap, outputGrid, kl, entropy, sampling, mulberry32, pick, generate, svd, circuits,
    pca2, projectPlane, liftPlane,
  };
})();

if (typeof module !== "undefined") module.exports = FlatMeasures;
