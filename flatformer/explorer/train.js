// Training in JavaScript, float64, no DOM: the backward pass of flatformer/engine/model.py, on
// the activations model.js's forward pass (FlatModel.run) leaves, for every block kind a
// config can ask for (LayerNorm or none, ReLU or tanh GELU, W_O or concatenated
// heads, Q/K/V biases, attention-only blocks, ln_final, an unembedding bias), the masked
// cross-entropy of flatformer/model.py, the recipe's cosine schedule (train.py Recipe.lr_at)
// and AdamW with the arithmetic of flatformer/optim.py (torch.optim.AdamW's, operation by
// operation). Parameters live in one Float64Array in the one-seed layout (Params.member): the
// tensors of ModelConfig.param_shapes in order, each raveled. tests/test_playground.py holds the
// gradients to model.backward's within 1e-9 and the AdamW trajectory to optim.AdamW's.
"use strict";

const FlatTrain = (() => {
  // The parameter layout, the forward pass and the model's two constants are FlatModel's
  // (model.js): one paramShapes for the explorer, the trainer and the run archive, one forward
  // pass (FlatModel.run) whose activations the backward pass below reads; LN_EPS and GELU_C as
  // flatformer/config.py ships them.
  const FM = typeof FlatModel !== "undefined" ? FlatModel : require("./model.js");
  const {paramShapes, size, layout} = FM;

  function check(cfg) {
    if (!["relu", "gelu"].includes(cfg.act_fn)) throw new Error(`act_fn ${cfg.act_fn} is not trainable here`);
    if (!["none", "pre_ln"].includes(cfg.normalization)) throw new Error(`normalization ${cfg.normalization}`);
    // Imported models' features the backward pass does not cover.
    if (cfg.attn_out_bias) throw new Error("attn_out_bias (b_O) is not trainable here");
    if (cfg.d_vocab_out && cfg.d_vocab_out !== cfg.d_vocab) throw new Error("d_vocab_out is not trainable here");
  }

  // A seeded generator of uniform numbers in [0, 1) (splitmix32): the page's own stream; it
  // need not be NumPy's, only reproducible.
  function rng(...seeds) {
    let s = 0x9e3779b9;
    for (const x of seeds) s = Math.imul(s ^ (x >>> 0), 0x85ebca6b) + 0x632be59b | 0;
    return () => {
      s = s + 0x9e3779b9 | 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return ((z ^ (z >>> 16)) >>> 0) / 4294967296;
    };
  }

  function normal(u) {
    const a = 1 - u(), b = u();
    return Math.sqrt(-2 * Math.log(a)) * Math.cos(2 * Math.PI * b);
  }

  // PyTorch's default initialisation (model.init_params): embeddings N(0, 1) times
  // `embedScale`, linear maps uniform in +-1/sqrt(fan_in), LayerNorm gains 1 and biases 0.
  function init(cfg, u, embedScale = 1) {
    const flat = new Float64Array(layout(cfg).total);
    const fan = {W_Q: cfg.d_model, W_K: cfg.d_model, W_V: cfg.d_model, b_Q: cfg.d_model,
      b_K: cfg.d_model, b_V: cfg.d_model, W_O: cfg.n_heads * cfg.d_head, W_in: cfg.d_model,
      b_in: cfg.d_model, W_out: cfg.d_mlp, b_out: cfg.d_mlp, W_U: cfg.d_model, b_U: cfg.d_model};
    let o = 0;
    for (const [name, shape] of paramShapes(cfg)) {
      const leaf = name.split(".").pop(), n = size(shape);
      for (let i = 0; i < n; i++) {
        if (leaf === "W_E" || leaf === "W_pos") flat[o + i] = embedScale * normal(u);
        else if (leaf === "w") flat[o + i] = 1;
        else if (leaf === "b") flat[o + i] = 0;
        else { const bound = 1 / Math.sqrt(fan[leaf]); flat[o + i] = (2 * u() - 1) * bound; }
      }
      o += n;
    }
    return flat;
  }

  // dx of LayerNorm for one row, added into dx; gain and bias gradients into g.
  function lnBackward(dy, xhat, o, d, scale, P, wo, g, bo, dx) {
    let m1 = 0, m2 = 0;
    for (let c = 0; c < d; c++) {
      const dxh = dy[o + c] * P[wo + c];
      m1 += dxh; m2 += dxh * xhat[o + c];
      g[wo + c] += dy[o + c] * xhat[o + c];
      g[bo + c] += dy[o + c];
    }
    m1 /= d; m2 /= d;
    for (let c = 0; c < d; c++) dx[o + c] += (dy[o + c] * P[wo + c] - m1 - xhat[o + c] * m2) / scale;
  }

  // The backward pass's scratch arrays, reused: allocating typed arrays was most of a small
  // model's step. Each backward pass starts its sequence length's pool over.
  const pools = new WeakMap();
  let pool = null;
  function start(cfg, T) {
    if (!pools.has(cfg)) pools.set(cfg, new Map());
    const byT = pools.get(cfg);
    if (!byT.has(T)) byT.set(T, {arrays: [], i: 0});
    pool = byT.get(T);
    pool.i = 0;
  }
  function alloc(n) {
    let a = pool.arrays[pool.i];
    if (a === undefined || a.length !== n) { a = new Float64Array(n); pool.arrays[pool.i] = a; } else a.fill(0);
    pool.i++;
    return a;
  }

  // Adds the gradient of the loss with respect to every parameter into G, given dlogits
  // (T * V) of one sequence and the workspace `f` its forward pass (FlatModel.run) left.
  function backward(cfg, P, f, dlogits, G) {
    const {GELU_C} = FM.constants();
    const {T, layers} = f, off = layout(cfg);
    start(cfg, T);
    const d = cfg.d_model, H = cfg.n_heads, dh = cfg.d_head, m = cfg.d_mlp, V = cfg.d_vocab;
    const ln = cfg.normalization === "pre_ln", gelu = cfg.act_fn === "gelu", sq = Math.sqrt(dh);
    const WU = off.WU;
    let dres = alloc(T * d);
    for (let t = 0; t < T; t++) {
      for (let o = 0; o < V; o++) {
        const g = dlogits[t * V + o];
        if (g === 0) continue;
        if (cfg.unembed_bias) G[off.bU + o] += g;
        for (let c = 0; c < d; c++) {
          G[WU + c * V + o] += f.final[t * d + c] * g;
          dres[t * d + c] += g * P[WU + c * V + o];
        }
      }
    }
    if (cfg.ln_final) {
      const dx = alloc(T * d);
      for (let t = 0; t < T; t++) lnBackward(dres, f.lnFinal.xhat, t * d, d, f.lnFinal.scale[t], P, off.lnfw, G, off.lnfb, dx);
      dres = dx;
    }
    for (let l = cfg.n_layers - 1; l >= 0; l--) {
      const o = off.L[l], L = layers[l];
      if (m > 0) {
        const {Win, bin, Wout, bout} = o;
        const dmin = alloc(T * d), dpre = alloc(m);
        for (let t = 0; t < T; t++) {
          for (let c = 0; c < d; c++) G[bout + c] += dres[t * d + c];
          for (let u = 0; u < m; u++) {
            let s = 0;
            const p = L.mlp_post[t * m + u];
            for (let c = 0; c < d; c++) {
              G[Wout + u * d + c] += p * dres[t * d + c];
              s += dres[t * d + c] * P[Wout + u * d + c];
            }
            const x = L.mlp_pre[t * m + u];
            if (gelu) {
              const th = L.tanh[t * m + u];
              s *= (0.5 + 0.5 * th) * (1 + x * (1 - th) * (GELU_C + 3 * 0.044715 * GELU_C * x * x));
            } else if (!(x > 0)) s = 0;
            dpre[u] = s;
          }
          for (let u = 0; u < m; u++) {
            const g = dpre[u];
            if (g === 0) continue;
            G[bin + u] += g;
            for (let c = 0; c < d; c++) {
              G[Win + c * m + u] += L.mlpIn[t * d + c] * g;
              dmin[t * d + c] += g * P[Win + c * m + u];
            }
          }
        }
        if (ln) {
          for (let t = 0; t < T; t++) lnBackward(dmin, L.ln2.xhat, t * d, d, L.ln2.scale[t], P, o.ln2w, G, o.ln2b, dres);
        } else for (let i = 0; i < T * d; i++) dres[i] += dmin[i];
      }
      // attention: out = x + concat_h(softmax(q k^T / sqrt(dh)) v) [W_O]
      const HD = H * dh, dz = alloc(T * HD);
      const WO = o.WO;
      for (let t = 0; t < T; t++) {
        if (WO >= 0) {
          for (let r = 0; r < HD; r++) {
            let s = 0;
            const zz = L.z[t * HD + r];
            for (let c = 0; c < d; c++) {
              G[WO + r * d + c] += zz * dres[t * d + c];
              s += dres[t * d + c] * P[WO + r * d + c];
            }
            dz[t * HD + r] = s;
          }
        } else for (let r = 0; r < HD; r++) dz[t * HD + r] = dres[t * d + r];
      }
      const {q, k, v, pattern} = L;
      const dq = alloc(T * HD), dk = alloc(T * HD), dv = alloc(T * HD);
      const dp = alloc(T);
      for (let h = 0; h < H; h++) {
        for (let i = 0; i < T; i++) {
          const row = (h * T + i) * T;
          let tot = 0;
          for (let j = 0; j <= i; j++) {
            let s = 0;
            const a = pattern[row + j];
            for (let e = 0; e < dh; e++) {
              s += dz[(i * H + h) * dh + e] * v[(j * H + h) * dh + e];
              dv[(j * H + h) * dh + e] += a * dz[(i * H + h) * dh + e];
            }
            dp[j] = s;
            tot += s * a;
          }
          for (let j = 0; j <= i; j++) {
            const ds = pattern[row + j] * (dp[j] - tot) / sq;
            for (let e = 0; e < dh; e++) {
              dq[(i * H + h) * dh + e] += ds * k[(j * H + h) * dh + e];
              dk[(j * H + h) * dh + e] += ds * q[(i * H + h) * dh + e];
            }
          }
        }
      }
      const dain = alloc(T * d);
      const dqkv = [dq, dk, dv];
      for (let i = 0; i < 3; i++) {
        const dx = dqkv[i], W = o.W[i], B = o.B[i];
        for (let t = 0; t < T; t++) {
          for (let h = 0; h < H; h++) {
            for (let e = 0; e < dh; e++) {
              const g = dx[(t * H + h) * dh + e];
              if (B >= 0) G[B + h * dh + e] += g;
              for (let c = 0; c < d; c++) {
                G[W + (h * d + c) * dh + e] += L.attnIn[t * d + c] * g;
                dain[t * d + c] += g * P[W + (h * d + c) * dh + e];
              }
            }
          }
        }
      }
      if (ln) {
        for (let t = 0; t < T; t++) lnBackward(dain, L.ln1.xhat, t * d, d, L.ln1.scale[t], P, o.ln1w, G, o.ln1b, dres);
      } else for (let i = 0; i < T * d; i++) dres[i] += dain[i];
    }
    const WE = off.WE, Wpos = off.Wpos;
    for (let t = 0; t < T; t++) {
      for (let c = 0; c < d; c++) {
        G[Wpos + t * d + c] += dres[t * d + c];
        G[WE + f.tokens[t] * d + c] += dres[t * d + c];
      }
    }
  }

  // The gradient of the loss with respect to the logits of one sequence, reused as the pools are.
  const dlogits = new WeakMap();
  function dlogitsOf(cfg, n) {
    if (!dlogits.has(cfg)) dlogits.set(cfg, new Map());
    const byN = dlogits.get(cfg);
    if (!byN.has(n)) byN.set(n, new Float64Array(n));
    return byN.get(n).fill(0);
  }

  // Per-row negative log-likelihood and its gradient: model.cross_entropy over a batch of
  // sequences, the weighted mean over every weighted target (at least 1 in the divisor).
  function lossAndGrad(cfg, P, batch, G) {
    const V = cfg.d_vocab;
    let total = 0;
    for (const w of batch.weights) for (const x of w) total += x;
    total = Math.max(total, 1);
    let loss = 0;
    G.fill(0);
    for (let s = 0; s < batch.inputs.length; s++) {
      const f = FM.run(cfg, P, batch.inputs[s]);
      const dl = dlogitsOf(cfg, f.T * V), logits = f.logits;
      for (let t = 0; t < f.T; t++) {
        const w = batch.weights[s][t];
        if (w === 0) continue;
        const o = t * V;
        let mx = -Infinity;
        for (let i = 0; i < V; i++) if (logits[o + i] > mx) mx = logits[o + i];
        let se = 0;
        for (let i = 0; i < V; i++) { const ex = Math.exp(logits[o + i] - mx); dl[o + i] = ex; se += ex; }
        const y = batch.targets[s][t];
        loss += (Math.log(se) - (logits[o + y] - mx)) * w;
        for (let i = 0; i < V; i++) dl[o + i] = dl[o + i] / se * (w / total);
        dl[o + y] -= w / total;
      }
      backward(cfg, P, f, dl, G);
    }
    return loss / total;
  }

  // AdamW on the flat buffer, in the order of optim.AdamW.step (torch's arithmetic).
  class AdamW {
    constructor(flat, {betas = [0.9, 0.999], eps = 1e-8, weightDecay = 1e-2} = {}) {
      this.flat = flat; this.betas = betas; this.eps = eps; this.wd = weightDecay;
      this.m = new Float64Array(flat.length); this.v = new Float64Array(flat.length); this.t = 0;
    }

    step(grad, lr) {
      const [b1, b2] = this.betas, p = this.flat, m = this.m, v = this.v;
      this.t += 1;
      const decay = 1.0 - lr * this.wd, c2 = Math.sqrt(1.0 - b2 ** this.t);
      const c1 = lr / (1.0 - b1 ** this.t);
      for (let i = 0; i < p.length; i++) {
        p[i] *= decay;
        m[i] += (grad[i] - m[i]) * (1.0 - b1);
        v[i] = v[i] * b2 + grad[i] * (1.0 - b2) * grad[i];
        p[i] -= m[i] * c1 / (Math.sqrt(v[i]) / c2 + this.eps);
      }
    }
  }

  // train.Recipe.lr_at: the learning rate of the update from `step` to `step + 1`.
  function lrAt(recipe, step) {
    if (recipe.schedule === "constant") return recipe.lr;
    const floor = recipe.lr * recipe.min_lr_ratio;
    return floor + (recipe.lr - floor) * 0.5 * (1 + Math.cos(Math.PI * step / recipe.steps));
  }

  return {check, rng, init, backward, lossAndGrad, AdamW, lrAt};
})();

if (typeof module !== "undefined") module.exports = FlatTrain;
