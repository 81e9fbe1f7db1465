// The edge graph of flatformer/edges/graph.py in JavaScript, in the same order, with no DOM:
// nodes tok, pos, aL.H (receivers aL.H.q/k/v), mL, logits; an edge [sender, receiver]; a
// forward pass with any edges ablated, and every sender's mean output over held-out windows.
"use strict";

const FlatEdges = (() => {
  const FM = typeof FlatModel !== "undefined" ? FlatModel : require("./model.js");
  const {attnOnly, causalOf, rotary, shortformer, parallel, windowOf, zeros, vecMat, attendHead, project, turn, attnInput, mlp, unembed, checkTokens} = FM;

  function edgeGraph(cfg) {
    // rotary positions turn q and k, shortformer ones join their inputs: neither is a sender
    let senders = rotary(cfg) || shortformer(cfg) ? ["tok"] : ["tok", "pos"];
    const receivers = [], edges = [];
    for (let l = 0; l < cfg.n_layers; l++) {
      const before = senders;
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
      for (const s of parallel(cfg) ? before : senders) edges.push([s, `m${l}`]);  // parallel: e
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
    const coeff = cfg.attn_coeff === undefined ? 1 : cfg.attn_coeff;  // Zhong et al.'s rate
    const WE = w["embed.W_E"].data;
    const outs = {tok: tokens.map((t) => Array.from(WE.subarray(t * d, t * d + d)))};
    const WP = rotary(cfg) ? null : w["pos_embed.W_pos"].data;
    const posAt = (i) => Array.from(WP.subarray(i * d, i * d + d));
    if (g.senders.includes("pos")) outs.pos = tokens.map((_, i) => posAt(i));
    // The attention output biases b_O of every layer before a receiver's node are on the
    // stream it reads (graph.py's bias_before): no edge carries them, so none ablates them.
    const biasBefore = (r) => {
      const node = r.replace(/\.[qkv]$/, "");
      const after = node[0] === "m" && !parallel(cfg);
      const layers = node === "logits" ? cfg.n_layers : Number(node.slice(1).split(".")[0]) + (after ? 1 : 0);
      const b = zeros(d);
      for (let l = 0; l < layers; l++) {
        const bO = w[`blocks.${l}.attn.b_O`];
        if (bO) for (let c = 0; c < d; c++) b[c] += bO.data[c];
      }
      return b;
    };
    const read = (r) => {
      const x = Array.from({length: T}, () => (cfg.attn_out_bias ? biasBefore(r) : zeros(d)));
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
          const withPos = shortformer(cfg) && which !== "V";  // shortformer: ln1(x) + p
          qkv[which] = read(`${head}.${which.toLowerCase()}`)
            .map((x, i) => attnInput(model, l, x).map((a, c) => (withPos ? a + WP[i * d + c] : a)))
            .map((x) => project(model, l, which, x, h))
            .map((y, i) => (which === "V" ? y : turn(cfg, y, i)));
        }
        // model.js's attention on this head alone ([T][1][dh] flat), its inputs read apart
        const [q, k, v] = ["Q", "K", "V"].map((x) => Float64Array.from(qkv[x].flat()));
        const scores = new Float64Array(T * T), pattern = new Float64Array(T * T), zf = new Float64Array(T * dh);
        attendHead(q, k, v, T, 1, dh, 0, 1, scores, pattern, zf, coeff, 1, 0, windowOf(cfg, l), causalOf(cfg));
        const z = Array.from({length: T}, (_, i) => Array.from(zf.subarray(i * dh, (i + 1) * dh)));
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

  return {edgeGraph, edgeForward, meanOutputs};
})();

if (typeof module !== "undefined") module.exports = FlatEdges;
