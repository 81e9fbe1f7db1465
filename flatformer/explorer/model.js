// The transformer in JavaScript: the forward pass of flatformer/engine/model.py, one sequence
// at a time (no seed or batch axis), in float64, with no DOM. The page's one forward pass:
// `run` writes every activation into flat arrays allocated once per config and length; the
// explorer's panels read it through `forward`, the playground's trainer (train.js) runs its
// backward pass on what `run` leaves. The measures the page shows are in measures.js, the edge
// graph in edges.js; tests/js/engine.test.js holds every activation to the NumPy reference's
// within 1e-9 on fixtures Python writes.
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
  // The newer architectures' fields, absent from a config at their defaults (config.py's
  // LATER_DEFAULTS): RMSNorm, rotary positions (q and k turned, no W_pos), gated MLPs.
  const preNorm = (cfg) => cfg.normalization === "pre_ln" || cfg.normalization === "pre_rms";
  const rms = (cfg) => cfg.normalization === "pre_rms";
  const rotary = (cfg) => cfg.positional_embedding_type === "rotary";
  const gated = (cfg) => !!cfg.gated_mlp;
  const shortformer = (cfg) => cfg.positional_embedding_type === "shortformer";
  const parallel = (cfg) => !!cfg.parallel_attn_mlp;
  const solu = (cfg) => cfg.act_fn === "solu_ln" && !attnOnly(cfg);
  // Heads of keys and values (grouped-query attention: fewer, each shared by a group of query
  // heads); TransformerLens names their weights attn._W_K, attn._W_V (config.attn_weight).
  const kvHeads = (cfg) => cfg.n_key_value_heads || cfg.n_heads;
  const attnWeight = (cfg, w, kind = "W") => `attn.${kvHeads(cfg) !== cfg.n_heads && w !== "Q" ? "_" : ""}${kind}_${w}`;
  // The keys a query of layer l reads: window_size in a local layer (GPT-Neo's), else 0 (all).
  const windowOf = (cfg, l) => (cfg.attn_types && cfg.attn_types[l] === "local" ? cfg.window_size : 0);
  // Whether a query reads only itself and earlier keys (config.py's causal; absent: true).
  const causalOf = (cfg) => cfg.causal !== false;
  // The keys [lo, hi] query i of T reads: a local layer's window of the latest, else every
  // earlier key (causal) or every key (causal false), as model.py's attention_bias.
  function keyRange(i, T, window, causal) {
    if (window) return [Math.max(0, i - window + 1), i];
    return causal ? [0, i] : [0, T - 1];
  }
  const keysOf = (cfg, l, i, T) => keyRange(i, T, windowOf(cfg, l), causalOf(cfg));
  const epsOf = (cfg) => (cfg.eps === undefined ? constants().LN_EPS : cfg.eps);
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
    const shapes = [["embed.W_E", [v, d]]];
    if (!rotary(cfg)) shapes.push(["pos_embed.W_pos", [cfg.n_ctx, d]]);
    const norm = (name) => shapes.push(...(rms(cfg) ? [[name + ".w", [d]]] : [[name + ".w", [d]], [name + ".b", [d]]]));
    for (let l = 0; l < cfg.n_layers; l++) {
      const b = `blocks.${l}.`;
      if (preNorm(cfg)) norm(b + "ln1");
      const heads = (x) => (x === "Q" ? h : kvHeads(cfg));
      for (const x of "QKV") shapes.push([b + attnWeight(cfg, x), [heads(x), d, dh]]);
      if (cfg.qkv_bias) for (const x of "QKV") shapes.push([b + attnWeight(cfg, x, "b"), [heads(x), dh]]);
      if (cfg.attn_out) shapes.push([b + "attn.W_O", [h, dh, d]]);
      if (cfg.attn_out_bias) shapes.push([b + "attn.b_O", [d]]);
      if (attnOnly(cfg)) continue;
      if (preNorm(cfg)) norm(b + "ln2");
      if (gated(cfg)) shapes.push([b + "mlp.W_gate", [d, m]]);
      shapes.push([b + "mlp.W_in", [d, m]], [b + "mlp.b_in", [m]]);
      if (solu(cfg)) shapes.push([b + "mlp.ln.w", [m]], [b + "mlp.ln.b", [m]]);
      shapes.push([b + "mlp.W_out", [m, d]], [b + "mlp.b_out", [d]]);
    }
    if (cfg.ln_final) norm("ln_final");
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

  // ---- the pieces, each written once over flat arrays with offsets ----
  // Every loop below reads and writes typed arrays (or plain ones) at offsets and allocates
  // nothing: the forward pass (`run`) calls them row by row, and so do the one-vector helpers
  // the panels and measures use (`layerNorm`, `project`, `mlp`, `unembed`).

  // LayerNorm of the row x[xo, xo + d): x_hat = (x - mean) / scale into xhat, x_hat w + b into
  // out (both at xo); returns scale = sqrt(var + eps), TransformerLens's hook_scale.
  function lnRow(x, xo, d, w, wo, b, bo, xhat, out, eps = constants().LN_EPS) {
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

  // RMSNorm of the row x[xo, xo + d): x_hat = x / scale into xhat, x_hat w into out; returns
  // scale = sqrt(mean x^2 + eps), TransformerLens's hook_scale.
  function rmsRow(x, xo, d, w, wo, xhat, out, eps) {
    let v = 0;
    for (let c = 0; c < d; c++) v += x[xo + c] * x[xo + c];
    const scale = Math.sqrt(v / d + eps);
    for (let c = 0; c < d; c++) {
      xhat[xo + c] = x[xo + c] / scale;
      out[xo + c] = xhat[xo + c] * w[wo + c];
    }
    return scale;
  }

  // Rotary positions (RoPE, Su et al. 2021) on the first r dims of each head's row
  // x[xo, xo + dh) at position t, into out: pair i turned by t / base^(2i / r). The pairs are
  // the two halves (i, i + r / 2) or, adjacent, neighbours (2i, 2i + 1); dims past r pass.
  function rotaryRow(x, xo, dh, t, r, base, adjacent, out, oo) {
    const half = r / 2;
    for (let i = 0; i < half; i++) {
      const angle = t / Math.pow(base, (2 * i) / r), c = Math.cos(angle), s = Math.sin(angle);
      const a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
      const xa = x[xo + a], xb = x[xo + b];
      out[oo + a] = xa * c - xb * s;
      out[oo + b] = xb * c + xa * s;
    }
    for (let e = r; e < dh; e++) out[oo + e] = x[xo + e];
  }

  // The row x[xo, xo + rows) through the [rows, cols] matrix stored row-major at W[Wo..], plus
  // the bias b[bo..] (none when bo < 0), into out[oo, oo + cols).
  function linearRow(x, xo, rows, W, Wo, cols, b, bo, out, oo) {
    for (let j = 0; j < cols; j++) {
      let s = bo >= 0 ? b[bo + j] : 0;
      for (let i = 0; i < rows; i++) s += x[xo + i] * W[Wo + i * cols + j];
      out[oo + j] = s;
    }
  }

  // The tanh GELU's t = tanh(c (x + 0.044715 x^3)), written c x (1 + 0.044715 x^2); the
  // backward pass reads it.
  const geluTanh = (x, c) => Math.tanh(c * x * (1 + 0.044715 * x * x));

  // The MLP's nonlinearity of one number: ReLU, the tanh GELU 0.5 x (1 + t), or the exact
  // GELU x (1 + erf(x / sqrt 2)) / 2 (imported models).
  function act(cfg, x) {
    if (cfg.act_fn === "relu") return x > 0 ? x : 0;
    if (cfg.act_fn === "silu") {                   // x sigmoid(x), as exp(-log(1 + e^-x))
      const softplus = x >= 0 ? Math.log1p(Math.exp(-x)) : -x + Math.log1p(Math.exp(x));
      return x * Math.exp(-softplus);
    }
    if (cfg.act_fn === "gelu_erf") return 0.5 * x * (1 + erf(x / Math.SQRT2));
    return 0.5 * x * (1 + geluTanh(x, constants().GELU_C));
  }

  // `act` over pre[o, o + n) into post; the tanh GELU's t into tanh (when given) as well.
  function activate(cfg, pre, o, n, post, tanh) {
    if (cfg.act_fn === "gelu") {
      const c = constants().GELU_C;
      for (let u = o; u < o + n; u++) {
        const t = geluTanh(pre[u], c);
        if (tanh) tanh[u] = t;
        post[u] = 0.5 * pre[u] * (1 + t);
      }
    } else if (cfg.act_fn === "relu") {
      for (let u = o; u < o + n; u++) post[u] = pre[u] > 0 ? pre[u] : 0;
    } else for (let u = o; u < o + n; u++) post[u] = act(cfg, pre[u]);
  }

  // Attention of head h: scores = q k^T / sqrt(dh) (times beta, the knob), masked entries
  // -inf; pattern = softmax(scores) by row, the maximum subtracted first so tiny temperatures
  // never overflow; z = pattern v. q, z are [T][H][dh], k, v [T][Hk][dh] (head hk: grouped keys
  // and values) and scores, pattern [H][T][T], all flat; the masked entries (outside `keysOf`)
  // are left as they are. causal false: every query reads every key (model.py's zero mask).
  function attendHead(q, k, v, T, H, dh, h, beta, scores, pattern, z, coeff = 1, Hk = H, hk = h, window = 0, causal = true) {
    const sq = Math.sqrt(dh);
    for (let i = 0; i < T; i++) {
      const row = (h * T + i) * T, qo = (i * H + h) * dh, [lo, hi] = keyRange(i, T, window, causal);
      let mx = -Infinity;
      for (let j = lo; j <= hi; j++) {
        const ko = (j * Hk + hk) * dh;
        let s = 0;
        for (let e = 0; e < dh; e++) s += q[qo + e] * k[ko + e];
        s /= sq;
        if (beta !== 1) s = beta * s;
        scores[row + j] = s;
        if (s > mx) mx = s;
      }
      let tot = 0;
      for (let j = lo; j <= hi; j++) { const ex = Math.exp(scores[row + j] - mx); pattern[row + j] = ex; tot += ex; }
      for (let j = lo; j <= hi; j++) pattern[row + j] /= tot;
      // Zhong et al.'s attention rate: coeff softmax + (1 - coeff) on every key read
      if (coeff !== 1) for (let j = lo; j <= hi; j++) pattern[row + j] = coeff * pattern[row + j] + (1 - coeff);
      for (let e = 0; e < dh; e++) {
        let s = 0;
        for (let j = lo; j <= hi; j++) s += pattern[row + j] * v[(j * Hk + hk) * dh + e];
        z[qo + e] = s;
      }
    }
  }

  const attnCoeff = (cfg) => (cfg.attn_coeff === undefined ? 1 : cfg.attn_coeff);

  // ---- the forward pass, once ----

  // Each parameter's offset in the one-checkpoint layout of paramShapes, as numbers per layer
  // (-1: absent), so that the pass looks up no strings. Kept per config object.
  const layouts = new WeakMap();
  function layout(cfg) {
    if (layouts.has(cfg)) return layouts.get(cfg);
    const at = {};
    let o = 0;
    for (const [name, shape] of paramShapes(cfg)) { at[name] = o; o += size(shape); }
    const of = (name) => (name in at ? at[name] : -1);
    const off = {
      at, total: o, WE: of("embed.W_E"), Wpos: of("pos_embed.W_pos"), lnfw: of("ln_final.w"),
      lnfb: of("ln_final.b"), WU: of("unembed.W_U"), bU: of("unembed.b_U"),
      L: Array.from({length: cfg.n_layers}, (_, l) => {
        const b = (n) => of(`blocks.${l}.${n}`);
        return {ln1w: b("ln1.w"), ln1b: b("ln1.b"), ln2w: b("ln2.w"), ln2b: b("ln2.b"), Wgate: b("mlp.W_gate"),
          W: [..."QKV"].map((x) => b(attnWeight(cfg, x))), B: [..."QKV"].map((x) => b(attnWeight(cfg, x, "b"))),
          lnw: b("mlp.ln.w"), lnb: b("mlp.ln.b"),
          WO: b("attn.W_O"), bO: b("attn.b_O"), Win: b("mlp.W_in"), bin: b("mlp.b_in"),
          Wout: b("mlp.W_out"), bout: b("mlp.b_out")};
      }),
    };
    layouts.set(cfg, off);
    return off;
  }

  // The arrays one pass of T tokens writes, allocated once per config and length. `hooks`
  // names them as TransformerLens does, in hook_names order, with their shapes; the other
  // fields are what the backward pass (train.js) reads: each LayerNorm's x_hat, the tanh
  // GELU's t, the stream each sublayer reads (attnIn, mlpIn) and the unembedding reads (final).
  const workspaces = new WeakMap();
  let last = null;   // the last workspace asked for: a training step asks for the same one often
  function workspace(cfg, T) {
    if (last && last.cfg === cfg && last.T === T) return last;
    if (!workspaces.has(cfg)) workspaces.set(cfg, new Map());
    const byT = workspaces.get(cfg);
    if (byT.has(T)) return (last = byT.get(T));
    const d = cfg.d_model, H = cfg.n_heads, dh = cfg.d_head, m = cfg.d_mlp, V = vocabOut(cfg);
    const Hk = kvHeads(cfg), ln = preNorm(cfg);
    const hooks = [];
    const array = (name, dims) => {
      const a = new Float64Array(size(dims));
      if (name) hooks.push([name, a, dims]);
      return a;
    };
    const norm = (b) => ({scale: array(b + "hook_scale", [T, 1]), normalized: array(b + "hook_normalized", [T, d]),
      xhat: array(null, [T, d])});
    const ws = {cfg, T, tokens: null, embed: array("hook_embed", [T, d]), layers: []};
    ws.pos = rotary(cfg) ? null : array("hook_pos_embed", [T, d]);
    let resid = array(null, [T, d]);
    for (let l = 0; l < cfg.n_layers; l++) {
      const b = `blocks.${l}.`, L = {};
      L.resid_pre = resid;
      hooks.push([b + "hook_resid_pre", resid, [T, d]]);
      L.ln1 = ln ? norm(b + "ln1.") : null;
      L.attnIn = ln ? L.ln1.normalized : resid;
      for (const x of "qkv") L[x] = array(b + `attn.hook_${x}`, [T, x === "q" ? H : Hk, dh]);
      L.rot_q = rotary(cfg) ? array(b + "attn.hook_rot_q", [T, H, dh]) : null;
      L.rot_k = rotary(cfg) ? array(b + "attn.hook_rot_k", [T, Hk, dh]) : null;
      L.qkIn = shortformer(cfg) ? array(null, [T, d]) : null;     // shortformer: ln1(x) + p
      L.attn_scores = array(b + "attn.hook_attn_scores", [H, T, T]).fill(-Infinity);
      L.pattern = array(b + "attn.hook_pattern", [H, T, T]);
      L.z = array(b + "attn.hook_z", [T, H, dh]);
      L.attn_out = array(b + "hook_attn_out", [T, d]);
      if (!attnOnly(cfg)) {
        // a parallel block has no resid_mid: its MLP reads the stream its attention read
        L.resid_mid = array(parallel(cfg) ? null : b + "hook_resid_mid", [T, d]);
        L.ln2 = ln ? norm(b + "ln2.") : null;
        L.mlpIn = ln ? L.ln2.normalized : parallel(cfg) ? L.resid_pre : L.resid_mid;
        L.mlp_pre = array(b + "mlp.hook_pre", [T, m]);
        L.mlp_pre_linear = gated(cfg) ? array(b + "mlp.hook_pre_linear", [T, m]) : null;
        if (solu(cfg)) {   // SoLU, then a LayerNorm over the neurons whose output is hook_post
          L.mlp_mid = array(b + "mlp.hook_mid", [T, m]);
          L.mlpLn = {scale: array(b + "mlp.ln.hook_scale", [T, 1]), normalized: array(b + "mlp.ln.hook_normalized", [T, m]),
            xhat: array(null, [T, m])};
        }
        L.mlp_post = array(b + "mlp.hook_post", [T, m]);
        L.tanh = cfg.act_fn === "gelu" ? array(null, [T, m]) : null;
        L.mlp_out = array(b + "hook_mlp_out", [T, d]);
      }
      resid = L.resid_post = array(b + "hook_resid_post", [T, d]);
      ws.layers.push(L);
    }
    ws.resid_final = resid;
    ws.lnFinal = cfg.ln_final ? norm("ln_final.") : null;
    ws.final = cfg.ln_final ? ws.lnFinal.normalized : resid;
    ws.logits = array(null, [T, V]);
    ws.hooks = hooks;
    byT.set(T, ws);
    return (last = ws);
  }

  // The normalisation a sublayer (or the unembedding) reads through, row by row, into
  // norm = {scale, normalized, xhat}, weights at offsets wo, bo of P: pre_ln's LayerNorm or
  // pre_rms's RMSNorm (a config with none has no norm to fill), with the config's eps.
  function normalize(cfg, x, T, d, P, wo, bo, norm) {
    const eps = epsOf(cfg);
    if (rms(cfg)) for (let t = 0; t < T; t++) norm.scale[t] = rmsRow(x, t * d, d, P, wo, norm.xhat, norm.normalized, eps);
    else for (let t = 0; t < T; t++) norm.scale[t] = lnRow(x, t * d, d, P, wo, P, bo, norm.xhat, norm.normalized, eps);
  }

  const NO_KNOBS = {beta: 1, posOff: false, headsOff: null, headsMean: null, mlpOff: null};
  function knobsFor(knobs) {
    if (!knobs) return NO_KNOBS;
    const set = (xs) => { const s = new Set(xs || []); return s.size ? s : null; };
    return {beta: knobs.beta === undefined ? 1 : knobs.beta, posOff: !!knobs.posOff,
      headsOff: set(knobs.headsOff), headsMean: knobs.headsMean || null, mlpOff: set(knobs.mlpOff)};
  }

  // e = x + p: token and position embeddings into the first residual stream.
  function embedding(cfg, P, off, ws, tokens, k) {
    const T = ws.T, d = cfg.d_model, {embed, pos} = ws;
    const e = ws.layers.length ? ws.layers[0].resid_pre : ws.resid_final;
    for (let t = 0; t < T; t++) {
      for (let c = 0; c < d; c++) {
        embed[t * d + c] = P[off.WE + tokens[t] * d + c];
        if (!pos) { e[t * d + c] = embed[t * d + c]; continue; }  // rotary: positions turn q, k
        pos[t * d + c] = k.posOff ? 0 : P[off.Wpos + t * d + c];
        // shortformer: the positions join q and k's inputs only, never the stream
        e[t * d + c] = shortformer(cfg) ? embed[t * d + c] : embed[t * d + c] + pos[t * d + c];
      }
    }
    return e;
  }

  // z = e + Attn(e) for layer l (offsets o, arrays L): returns the stream after it.
  function attention(cfg, P, o, L, l, T, e, k, pos) {
    const d = cfg.d_model, H = cfg.n_heads, dh = cfg.d_head, HD = H * dh, Hk = kvHeads(cfg);
    if (L.ln1) normalize(cfg, e, T, d, P, o.ln1w, o.ln1b, L.ln1);
    const x = L.attnIn;
    if (L.qkIn) for (let u = 0; u < T * d; u++) L.qkIn[u] = x[u] + pos[u];
    for (let i = 0; i < 3; i++) {
      const W = o.W[i], B = o.B[i], out = i === 0 ? L.q : i === 1 ? L.k : L.v, n = i === 0 ? H : Hk;
      const inp = L.qkIn && i < 2 ? L.qkIn : x;
      for (let t = 0; t < T; t++) {
        for (let h = 0; h < n; h++) {
          linearRow(inp, t * d, d, P, W + h * d * dh, dh, P, B >= 0 ? B + h * dh : -1, out, (t * n + h) * dh);
        }
      }
    }
    let q = L.q, key = L.k;
    if (L.rot_q) {                                           // rotary positions turn q and k
      const r = cfg.rotary_dim || dh, base = cfg.rotary_base === undefined ? 10000 : cfg.rotary_base;  // as turn
      const adjacent = !!cfg.rotary_adjacent_pairs;
      for (let t = 0; t < T; t++) {
        for (let h = 0; h < H; h++) rotaryRow(L.q, (t * H + h) * dh, dh, t, r, base, adjacent, L.rot_q, (t * H + h) * dh);
        for (let h = 0; h < Hk; h++) rotaryRow(L.k, (t * Hk + h) * dh, dh, t, r, base, adjacent, L.rot_k, (t * Hk + h) * dh);
      }
      q = L.rot_q; key = L.rot_k;
    }
    const z = L.z;
    for (let h = 0; h < H; h++) {
      attendHead(q, key, L.v, T, H, dh, h, k.beta, L.attn_scores, L.pattern, z, attnCoeff(cfg),
        Hk, Math.floor(h / (H / Hk)), windowOf(cfg, l), causalOf(cfg));
      if (k === NO_KNOBS) continue;
      const head = `${l}.${h}`, mean = k.headsMean && k.headsMean[head];
      if (mean) for (let t = 0; t < T; t++) for (let c = 0; c < dh; c++) z[(t * H + h) * dh + c] = mean[t][h][c];
      else if (k.headsOff && k.headsOff.has(head)) for (let t = 0; t < T; t++) z.fill(0, (t * H + h) * dh, (t * H + h + 1) * dh);
    }
    const out = L.attn_out, after = L.resid_mid || L.resid_post;
    for (let t = 0; t < T; t++) {
      if (o.WO >= 0) linearRow(z, t * HD, HD, P, o.WO, d, P, o.bO, out, t * d);
      else for (let c = 0; c < d; c++) out[t * d + c] = o.bO >= 0 ? P[o.bO + c] + z[t * HD + c] : z[t * HD + c];
      for (let c = 0; c < d; c++) after[t * d + c] = e[t * d + c] + out[t * d + c];
    }
    return after;
  }

  // The gated MLP's hidden row (SwiGLU, GeGLU): pre = x W_gate, pre_linear = x W_in, post =
  // act(pre) * pre_linear + b_in, at offset o of the [T][m] arrays.
  function gatedRow(cfg, x, xo, d, m, P, Wgate, Win, bin, pre, preLinear, post, o) {
    linearRow(x, xo, d, P, Wgate, m, P, -1, pre, o);
    linearRow(x, xo, d, P, Win, m, P, -1, preLinear, o);
    for (let u = 0; u < m; u++) post[o + u] = act(cfg, pre[o + u]) * preLinear[o + u] + P[bin + u];
  }

  // h = z + FFN(z) for layer l: returns the stream after it.
  function feedForward(cfg, P, o, L, l, T, z, k) {
    const d = cfg.d_model, m = cfg.d_mlp;
    if (L.ln2) normalize(cfg, parallel(cfg) ? L.resid_pre : z, T, d, P, o.ln2w, o.ln2b, L.ln2);
    const out = L.mlp_out, h = L.resid_post, off = k.mlpOff !== null && k.mlpOff.has(l);
    for (let t = 0; t < T; t++) {
      if (L.mlp_pre_linear) gatedRow(cfg, L.mlpIn, t * d, d, m, P, o.Wgate, o.Win, o.bin, L.mlp_pre, L.mlp_pre_linear, L.mlp_post, t * m);
      else if (L.mlpLn) {                                  // SoLU: mid = pre softmax(pre), then LN
        linearRow(L.mlpIn, t * d, d, P, o.Win, m, P, o.bin, L.mlp_pre, t * m);
        let mx = -Infinity, tot = 0;
        for (let u = t * m; u < (t + 1) * m; u++) if (L.mlp_pre[u] > mx) mx = L.mlp_pre[u];
        for (let u = t * m; u < (t + 1) * m; u++) tot += Math.exp(L.mlp_pre[u] - mx);
        for (let u = t * m; u < (t + 1) * m; u++) L.mlp_mid[u] = L.mlp_pre[u] * Math.exp(L.mlp_pre[u] - mx) / tot;
        L.mlpLn.scale[t] = lnRow(L.mlp_mid, t * m, m, P, o.lnw, P, o.lnb, L.mlpLn.xhat, L.mlpLn.normalized, epsOf(cfg));
        for (let u = t * m; u < (t + 1) * m; u++) L.mlp_post[u] = L.mlpLn.normalized[u];
      } else {
        linearRow(L.mlpIn, t * d, d, P, o.Win, m, P, o.bin, L.mlp_pre, t * m);
        activate(cfg, L.mlp_pre, t * m, m, L.mlp_post, L.tanh);
      }
      if (off) out.fill(0, t * d, (t + 1) * d);
      else linearRow(L.mlp_post, t * m, m, P, o.Wout, d, P, o.bout, out, t * d);
      for (let c = 0; c < d; c++) h[t * d + c] = z[t * d + c] + out[t * d + c];
    }
    return h;
  }

  // The logits of the final stream h (through ln_final when there is one).
  function unembedding(cfg, P, off, ws, h) {
    const T = ws.T, d = cfg.d_model, V = vocabOut(cfg);
    if (ws.lnFinal) normalize(cfg, h, T, d, P, off.lnfw, off.lnfb, ws.lnFinal);
    for (let t = 0; t < T; t++) linearRow(ws.final, t * d, d, P, off.WU, V, P, off.bU, ws.logits, t * V);
  }

  // The forward pass of one sequence: P holds one checkpoint's parameters in paramShapes's
  // layout, knobs are those of the header (or none). Returns the workspace of (cfg, T) with
  // every activation and the logits written: the next pass of the same length overwrites it,
  // so copy what must outlive it.
  function run(cfg, P, tokens, knobs) {
    checkTokens(cfg, tokens);
    const T = tokens.length, off = layout(cfg), ws = workspace(cfg, T), k = knobsFor(knobs);
    ws.tokens = tokens;
    let x = embedding(cfg, P, off, ws, tokens, k);                                  // e = x + p
    for (let l = 0; l < cfg.n_layers; l++) {
      x = attention(cfg, P, off.L[l], ws.layers[l], l, T, x, k, ws.pos);             // z = e + Attn(e)
      if (!attnOnly(cfg)) x = feedForward(cfg, P, off.L[l], ws.layers[l], l, T, x, k);  // h = z + FFN(z)
    }
    unembedding(cfg, P, off, ws, x);
    return ws;
  }

  // The flat buffer behind a model's named views (unpack's): a view when the tensors lie in
  // paramShapes order in one buffer, as unpack leaves them, else a copy. Kept per weights object.
  const flats = new WeakMap();
  function flatOf(model) {
    const {cfg, w} = model;
    if (flats.has(w)) return flats.get(w);
    const shapes = paramShapes(cfg), n = nParams(cfg), first = w[shapes[0][0]].data;
    let P = null;
    if (ArrayBuffer.isView(first)) {
      const bytes = first.BYTES_PER_ELEMENT;
      let o = 0, contiguous = first.byteOffset + n * bytes <= first.buffer.byteLength;
      for (const [name, shape] of shapes) {
        const data = w[name].data;
        contiguous = contiguous && data.buffer === first.buffer && data.constructor === first.constructor
          && data.byteOffset === first.byteOffset + o * bytes && data.length === size(shape);
        o += size(shape);
      }
      if (contiguous) P = new first.constructor(first.buffer, first.byteOffset, n);
    }
    if (!P) {
      P = new Float64Array(n);
      let o = 0;
      for (const [name, shape] of shapes) { P.set(w[name].data, o); o += size(shape); }
    }
    flats.set(w, P);
    return P;
  }

  // A flat array as nested plain arrays of the given shape.
  function nest(data, dims, o = 0) {
    if (dims.length === 1) return Array.from(data.subarray(o, o + dims[0]));
    const inner = size(dims.slice(1));
    return Array.from({length: dims[0]}, (_, i) => nest(data, dims.slice(1), o + i * inner));
  }

  // The explorer's forward: `run` on the model's weights, its results as nested arrays that
  // outlive the next pass. Logits [T][V] and the cache of named activations (see the header).
  function forward(model, tokens, knobs = {}) {
    const ws = run(model.cfg, flatOf(model), tokens, knobs), cache = {};
    for (const [name, data, dims] of ws.hooks) cache[name] = nest(data, dims);
    return {logits: nest(ws.logits, [ws.T, vocabOut(model.cfg)]), cache};
  }

  // ---- one vector at a time, for the panels and measures: the same pieces ----
  const zeros = (n) => new Array(n).fill(0);
  const add = (a, b) => a.map((x, i) => x + b[i]);

  // x (length rows) times the [rows, cols] matrix stored at data[off...].
  function vecMat(x, data, off, rows, cols) {
    const out = zeros(cols);
    linearRow(x, 0, rows, data, off, cols, null, -1, out, 0);
    return out;
  }

  function layerNorm(x, w, b) {
    const d = x.length, xhat = zeros(d), out = zeros(d);
    const scale = lnRow(x, 0, d, w, 0, b, 0, xhat, out);
    return {scale, out};
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

  // Query, key or value of one residual vector for head h of a layer: x W[h] (+ b[h]); keys
  // and values of grouped heads are their group's, h / (n_heads / n_kv_heads).
  function project(model, layer, which, x, h) {
    const {cfg, w} = model, d = cfg.d_model, dh = cfg.d_head, out = zeros(dh);
    const i = which === "Q" ? h : Math.floor(h / (cfg.n_heads / kvHeads(cfg)));
    const b = cfg.qkv_bias ? w[`blocks.${layer}.${attnWeight(cfg, which, "b")}`].data : null;
    linearRow(x, 0, d, w[`blocks.${layer}.${attnWeight(cfg, which)}`].data, i * d * dh, dh, b, b ? i * dh : -1, out, 0);
    return out;
  }

  // One vector through the model's normalisation `name` (LayerNorm or RMSNorm, its eps).
  function normOf(model, name, x) {
    const {cfg, w} = model, d = x.length, xhat = zeros(d), out = zeros(d);
    if (rms(cfg)) rmsRow(x, 0, d, w[name + ".w"].data, 0, xhat, out, epsOf(cfg));
    else lnRow(x, 0, d, w[name + ".w"].data, 0, w[name + ".b"].data, 0, xhat, out, epsOf(cfg));
    return out;
  }

  // A head's q or k (one vector of d_head) as attention reads it at position t: turned by
  // rotary positions when the model has them (hook_rot_q, hook_rot_k), else as it is.
  function turn(cfg, x, t) {
    if (!rotary(cfg)) return x;
    const out = zeros(x.length);
    const base = cfg.rotary_base === undefined ? 10000 : cfg.rotary_base;
    rotaryRow(x, 0, x.length, t, cfg.rotary_dim || x.length, base, !!cfg.rotary_adjacent_pairs, out, 0);
    return out;
  }

  // The residual as the attention of `layer` reads it (after ln1 when there is one).
  function attnInput(model, layer, resid) {
    return preNorm(model.cfg) ? normOf(model, `blocks.${layer}.ln1`, resid) : resid;
  }

  // The MLP of `layer` on one residual vector z: returns {pre, post, out} (out without z).
  function mlp(model, layer, z) {
    const {cfg, w} = model, d = cfg.d_model, m = cfg.d_mlp, b = `blocks.${layer}.`;
    const x = preNorm(cfg) ? normOf(model, b + "ln2", z) : z;
    const pre = zeros(m), post = zeros(m), out = zeros(d);
    if (gated(cfg)) {
      const lin = zeros(m);
      linearRow(x, 0, d, w[b + "mlp.W_gate"].data, 0, m, null, -1, pre, 0);
      linearRow(x, 0, d, w[b + "mlp.W_in"].data, 0, m, null, -1, lin, 0);
      for (let u = 0; u < m; u++) post[u] = act(cfg, pre[u]) * lin[u] + w[b + "mlp.b_in"].data[u];
    } else if (solu(cfg)) {                            // SoLU, then its LayerNorm over the neurons
      linearRow(x, 0, d, w[b + "mlp.W_in"].data, 0, m, w[b + "mlp.b_in"].data, 0, pre, 0);
      const s = softmax(pre), mid = pre.map((p, u) => p * s[u]);
      lnRow(mid, 0, m, w[b + "mlp.ln.w"].data, 0, w[b + "mlp.ln.b"].data, 0, zeros(m), post, epsOf(cfg));
    } else {
      linearRow(x, 0, d, w[b + "mlp.W_in"].data, 0, m, w[b + "mlp.b_in"].data, 0, pre, 0);
      activate(cfg, pre, 0, m, post, null);
    }
    linearRow(post, 0, m, w[b + "mlp.W_out"].data, 0, d, w[b + "mlp.b_out"].data, 0, out, 0);
    return {pre, post, out};
  }

  // The stream as the unembedding reads it: after the final norm when there is one.
  function finalNorm(model, h) {
    return model.cfg.ln_final ? normOf(model, "ln_final", h) : h;
  }

  function unembed(model, h) {
    const {cfg, w} = model, V = vocabOut(cfg), logits = zeros(V);
    const b = cfg.unembed_bias ? w["unembed.b_U"].data : null;
    linearRow(finalNorm(model, h), 0, cfg.d_model, w["unembed.W_U"].data, 0, V, b, b ? 0 : -1, logits, 0);
    return logits;
  }

  function checkTokens(cfg, tokens) {
    if (!tokens.length) throw new Error("the sequence is empty");
    if (tokens.length > cfg.n_ctx) throw new Error(`${tokens.length} tokens exceed the context of ${cfg.n_ctx}`);
    for (let i = 0; i < tokens.length; i++) {
      const t = tokens[i];
      if (!Number.isInteger(t) || t < 0 || t >= cfg.d_vocab) throw new Error(`token ${t} is outside the vocabulary`);
    }
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
    constants, attnOnly, causalOf, keysOf, preNorm, rms, rotary, gated, shortformer, parallel, solu, kvHeads, attnWeight, windowOf, vocabOut, erf, paramShapes, size, nParams, unpack,
    lnRow, rmsRow, rotaryRow, linearRow, geluTanh, act, activate, attendHead, layout, workspace, run, flatOf, forward,
    zeros, add, vecMat, layerNorm, softmax, logSoftmax, project, turn, attnInput, mlp, finalNorm, unembed,
    checkTokens, headMeans,
  };
})();

if (typeof module !== "undefined") module.exports = FlatModel;
