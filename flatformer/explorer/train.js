// Training in JavaScript, float64, no DOM: the backward pass of flatformer/engine/model.py for every
// block kind a config can ask for (LayerNorm or none, ReLU or tanh GELU, W_O or concatenated
// heads, Q/K/V biases, attention-only blocks, ln_final, an unembedding bias), the masked
// cross-entropy of flatformer/model.py, the recipe's cosine schedule (train.py Recipe.lr_at)
// and AdamW with the arithmetic of flatformer/optim.py (torch.optim.AdamW's, operation by
// operation). Parameters live in one Float64Array in the one-seed layout (Params.member): the
// tensors of ModelConfig.param_shapes in order, each raveled. tests/test_playground.py holds the
// gradients to model.backward's within 1e-9 and the AdamW trajectory to optim.AdamW's.
"use strict";

const FlatTrain = (() => {
  // The parameter layout and the model's two constants are FlatModel's (model.js): one
  // paramShapes for the explorer, the trainer and the run archive; LN_EPS and GELU_C as
  // flatformer/config.py ships them.
  const FM = typeof FlatModel !== "undefined" ? FlatModel : require("./model.js");
  const {paramShapes, size} = FM;

  // name -> offset into the flat buffer (kept per config object: forward asks every call)
  const known = new WeakMap();
  function offsets(cfg) {
    if (known.has(cfg)) return known.get(cfg);
    const off = {};
    let o = 0;
    for (const [name, shape] of paramShapes(cfg)) { off[name] = o; o += size(shape); }
    off.total = o;
    // each layer's offsets as numbers (-1: absent), so the passes look up no strings
    off.L = Array.from({length: cfg.n_layers}, (_, l) => {
      const b = `blocks.${l}.`, at = (n) => (b + n in off ? off[b + n] : -1);
      return {ln1w: at("ln1.w"), ln1b: at("ln1.b"), ln2w: at("ln2.w"), ln2b: at("ln2.b"),
        W: ["W_Q", "W_K", "W_V"].map((n) => at("attn." + n)), B: ["b_Q", "b_K", "b_V"].map((n) => at("attn." + n)),
        WO: at("attn.W_O"), Win: at("mlp.W_in"), bin: at("mlp.b_in"), Wout: at("mlp.W_out"), bout: at("mlp.b_out")};
    });
    known.set(cfg, off);
    return off;
  }

  function check(cfg) {
    if (!["relu", "gelu"].includes(cfg.act_fn)) throw new Error(`act_fn ${cfg.act_fn} is not trainable here`);
    if (!["none", "pre_ln"].includes(cfg.normalization)) throw new Error(`normalization ${cfg.normalization}`);
    // Imported models' features the backward pass does not cover.
    if (cfg.attn_out_bias) throw new Error("attn_out_bias (b_O) is not trainable here");
    if (cfg.attn_coeff !== undefined && cfg.attn_coeff !== 1) throw new Error("attn_coeff is not trainable here");
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
    const flat = new Float64Array(offsets(cfg).total);
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

  // LayerNorm of row x (length d) at xs[xo..]: writes x_hat and the output, returns the scale.
  function lnForward(x, xo, d, w, wo, b, bo, xhat, out, eps) {
    let mean = 0;
    for (let c = 0; c < d; c++) mean += x[xo + c];
    mean /= d;
    let v = 0;
    for (let c = 0; c < d; c++) { const y = x[xo + c] - mean; xhat[xo + c] = y; v += y * y; }
    const scale = Math.sqrt(v / d + eps);
    for (let c = 0; c < d; c++) {
      xhat[xo + c] /= scale;
      out[xo + c] = xhat[xo + c] * w[wo + c] + b[bo + c];
    }
    return scale;
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

  // Scratch arrays, reused: allocating typed arrays was most of a small model's step. Each
  // forward pass starts its sequence length's pool over, and the arrays it returns (and those
  // of the backward pass that follows) stay valid only until the next pass of that length.
  const pools = new WeakMap();
  let pool = null;
  function start(cfg, T) {
    const key = cfg;
    if (!pools.has(key)) pools.set(key, new Map());
    const byT = pools.get(key);
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

  // The forward pass of one sequence with everything the backward pass needs.
  function forward(cfg, P, tokens) {
    const {LN_EPS, GELU_C} = FM.constants();
    const off = offsets(cfg);
    const T = tokens.length, d = cfg.d_model, H = cfg.n_heads, dh = cfg.d_head, m = cfg.d_mlp;
    const V = cfg.d_vocab, ln = cfg.normalization === "pre_ln", gelu = cfg.act_fn === "gelu";
    start(cfg, T);
    const resid = alloc(T * d), WE = off["embed.W_E"], Wpos = off["pos_embed.W_pos"];
    for (let t = 0; t < T; t++) {
      for (let c = 0; c < d; c++) {
        resid[t * d + c] = P[WE + tokens[t] * d + c] + P[Wpos + t * d + c];
      }
    }
    const layers = [];
    const sq = Math.sqrt(dh);
    let x = resid;
    for (let l = 0; l < cfg.n_layers; l++) {
      const o = off.L[l], L = {pre: x};
      let ain = x;
      if (ln) {
        L.xhat1 = alloc(T * d); ain = alloc(T * d); L.scale1 = alloc(T);
        for (let t = 0; t < T; t++) {
          L.scale1[t] = lnForward(x, t * d, d, P, o.ln1w, P, o.ln1b, L.xhat1, ain, LN_EPS);
        }
      }
      L.ain = ain;
      const qkv = [alloc(T * H * dh), alloc(T * H * dh), alloc(T * H * dh)];
      for (let i = 0; i < 3; i++) {
        const W = o.W[i], B = o.B[i], out = qkv[i];
        for (let t = 0; t < T; t++) {
          for (let h = 0; h < H; h++) {
            for (let e = 0; e < dh; e++) {
              let s = B >= 0 ? P[B + h * dh + e] : 0;
              for (let c = 0; c < d; c++) s += ain[t * d + c] * P[W + (h * d + c) * dh + e];
              out[(t * H + h) * dh + e] = s;
            }
          }
        }
      }
      const [q, k, v] = qkv;
      L.q = q; L.k = k; L.v = v;
      const pattern = alloc(H * T * T), z = alloc(T * H * dh);
      for (let h = 0; h < H; h++) {
        for (let i = 0; i < T; i++) {
          const row = (h * T + i) * T;
          let mx = -Infinity;
          for (let j = 0; j <= i; j++) {
            let s = 0;
            for (let e = 0; e < dh; e++) s += q[(i * H + h) * dh + e] * k[(j * H + h) * dh + e];
            s /= sq;
            pattern[row + j] = s;
            if (s > mx) mx = s;
          }
          let tot = 0;
          for (let j = 0; j <= i; j++) { const ex = Math.exp(pattern[row + j] - mx); pattern[row + j] = ex; tot += ex; }
          for (let j = 0; j <= i; j++) pattern[row + j] /= tot;
          for (let e = 0; e < dh; e++) {
            let s = 0;
            for (let j = 0; j <= i; j++) s += pattern[row + j] * v[(j * H + h) * dh + e];
            z[(i * H + h) * dh + e] = s;
          }
        }
      }
      L.pattern = pattern; L.z = z;
      const mid = alloc(T * d);
      const WO = o.WO;
      for (let t = 0; t < T; t++) {
        for (let c = 0; c < d; c++) {
          let s = 0;
          if (WO >= 0) for (let r = 0; r < H * dh; r++) s += z[t * H * dh + r] * P[WO + r * d + c];
          else s = z[t * H * dh + c];
          mid[t * d + c] = x[t * d + c] + s;
        }
      }
      x = mid;
      if (m > 0) {
        let min = mid;
        if (ln) {
          L.xhat2 = alloc(T * d); min = alloc(T * d); L.scale2 = alloc(T);
          for (let t = 0; t < T; t++) {
            L.scale2[t] = lnForward(mid, t * d, d, P, o.ln2w, P, o.ln2b, L.xhat2, min, LN_EPS);
          }
        }
        L.min = min;
        const {Win, bin, Wout, bout} = o;
        const pre = alloc(T * m), post = alloc(T * m), th = gelu ? alloc(T * m) : null;
        for (let t = 0; t < T; t++) {
          for (let u = 0; u < m; u++) {
            let s = P[bin + u];
            for (let c = 0; c < d; c++) s += min[t * d + c] * P[Win + c * m + u];
            pre[t * m + u] = s;
            if (gelu) {
              const tt = Math.tanh(GELU_C * s * (1 + 0.044715 * s * s));
              th[t * m + u] = tt;
              post[t * m + u] = 0.5 * s * (1 + tt);
            } else post[t * m + u] = s > 0 ? s : 0;
          }
        }
        const outR = alloc(T * d);
        for (let t = 0; t < T; t++) {
          for (let c = 0; c < d; c++) {
            let s = P[bout + c];
            for (let u = 0; u < m; u++) s += post[t * m + u] * P[Wout + u * d + c];
            outR[t * d + c] = mid[t * d + c] + s;
          }
        }
        L.mid = mid; L.preAct = pre; L.post = post; L.tanh = th;
        x = outR;
      }
      layers.push(L);
    }
    let fin = x, fxhat = null, fscale = null;
    if (cfg.ln_final) {
      fxhat = alloc(T * d); fin = alloc(T * d); fscale = alloc(T);
      for (let t = 0; t < T; t++) fscale[t] = lnForward(x, t * d, d, P, off["ln_final.w"], P, off["ln_final.b"], fxhat, fin, LN_EPS);
    }
    const logits = alloc(T * V), WU = off["unembed.W_U"];
    const bU = cfg.unembed_bias ? off["unembed.b_U"] : -1;
    for (let t = 0; t < T; t++) {
      for (let o = 0; o < V; o++) {
        let s = bU >= 0 ? P[bU + o] : 0;
        for (let c = 0; c < d; c++) s += fin[t * d + c] * P[WU + c * V + o];
        logits[t * V + o] = s;
      }
    }
    return {tokens, T, layers, fin, fxhat, fscale, logits, off};
  }

  // Adds the gradient of the loss with respect to every parameter into G, given
  // dlogits (T * V) of one sequence's forward pass `f`.
  function backward(cfg, P, f, dlogits, G) {
    const {GELU_C} = FM.constants();
    const {T, off, layers} = f;
    const d = cfg.d_model, H = cfg.n_heads, dh = cfg.d_head, m = cfg.d_mlp, V = cfg.d_vocab;
    const ln = cfg.normalization === "pre_ln", gelu = cfg.act_fn === "gelu", sq = Math.sqrt(dh);
    const WU = off["unembed.W_U"];
    let dres = alloc(T * d);
    for (let t = 0; t < T; t++) {
      for (let o = 0; o < V; o++) {
        const g = dlogits[t * V + o];
        if (g === 0) continue;
        if (cfg.unembed_bias) G[off["unembed.b_U"] + o] += g;
        for (let c = 0; c < d; c++) {
          G[WU + c * V + o] += f.fin[t * d + c] * g;
          dres[t * d + c] += g * P[WU + c * V + o];
        }
      }
    }
    if (cfg.ln_final) {
      const dx = alloc(T * d);
      for (let t = 0; t < T; t++) lnBackward(dres, f.fxhat, t * d, d, f.fscale[t], P, off["ln_final.w"], G, off["ln_final.b"], dx);
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
            const p = L.post[t * m + u];
            for (let c = 0; c < d; c++) {
              G[Wout + u * d + c] += p * dres[t * d + c];
              s += dres[t * d + c] * P[Wout + u * d + c];
            }
            const x = L.preAct[t * m + u];
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
              G[Win + c * m + u] += L.min[t * d + c] * g;
              dmin[t * d + c] += g * P[Win + c * m + u];
            }
          }
        }
        if (ln) {
          for (let t = 0; t < T; t++) lnBackward(dmin, L.xhat2, t * d, d, L.scale2[t], P, o.ln2w, G, o.ln2b, dres);
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
                G[W + (h * d + c) * dh + e] += L.ain[t * d + c] * g;
                dain[t * d + c] += g * P[W + (h * d + c) * dh + e];
              }
            }
          }
        }
      }
      if (ln) {
        for (let t = 0; t < T; t++) lnBackward(dain, L.xhat1, t * d, d, L.scale1[t], P, o.ln1w, G, o.ln1b, dres);
      } else for (let i = 0; i < T * d; i++) dres[i] += dain[i];
    }
    const WE = off["embed.W_E"], Wpos = off["pos_embed.W_pos"];
    for (let t = 0; t < T; t++) {
      for (let c = 0; c < d; c++) {
        G[Wpos + t * d + c] += dres[t * d + c];
        G[WE + f.tokens[t] * d + c] += dres[t * d + c];
      }
    }
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
      const f = forward(cfg, P, batch.inputs[s]);
      const dl = alloc(f.T * V);
      for (let t = 0; t < f.T; t++) {
        const w = batch.weights[s][t];
        if (w === 0) continue;
        const o = t * V;
        let mx = -Infinity;
        for (let i = 0; i < V; i++) if (f.logits[o + i] > mx) mx = f.logits[o + i];
        let se = 0;
        for (let i = 0; i < V; i++) se += Math.exp(f.logits[o + i] - mx);
        const y = batch.targets[s][t];
        loss += (Math.log(se) - (f.logits[o + y] - mx)) * w;
        for (let i = 0; i < V; i++) dl[o + i] = Math.exp(f.logits[o + i] - mx) / se * (w / total);
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

  return {offsets, check, rng, init, forward, backward, lossAndGrad, AdamW, lrAt};
})();

if (typeof module !== "undefined") module.exports = FlatTrain;
