// An attribution graph's links recomputed from the weights in its file (no DOM): the `frozen`
// table flatformer/graph/paths.py writes holds, per block, the frozen attention patterns and
// LayerNorm scales with the value and output weights, and per node its activation and the
// vectors it writes and reads. weight(s -> t) = activation_s x read_t . LN_t(P write_s), P the
// frozen residual and attention paths from the block after the source's to the target's
// (paths.py's docstring). Node's test runner and the page's self-check hold it to the weights
// Python computed.
"use strict";

const FlatGraph = (() => {
  const MAX_PATHS = 20000;
  const dot = (a, b) => { let s = 0; for (let i = 0; i < a.length; i++) s += a[i] * b[i]; return s; };

  // A LayerNorm's frozen linear part at position `pos`: (x - mean x) / scale * w (none: x);
  // an RMSNorm's, x / scale * w.
  function lnLinear(x, ln, pos) {
    if (!ln) return x.slice();
    if (ln.rms) return x.map((v, i) => v / ln.scale[pos] * ln.w[i]);
    let m = 0;
    for (const v of x) m += v;
    m /= x.length;
    return x.map((v, i) => (v - m) / ln.scale[pos] * ln.w[i]);
  }

  // Head h of a block on a normalised vector x (d): x W_V[h], then W_O[h] (or the head's own
  // d_head slice of the residual stream, without W_O).
  function headOut(F, block, h, x) {
    const WV = block.W_V[h], dh = F.d_head, d = F.d_model;
    const v = new Array(dh).fill(0);
    for (let i = 0; i < d; i++) for (let j = 0; j < dh; j++) v[j] += x[i] * WV[i][j];
    const out = new Array(d).fill(0);
    if (block.W_O) {
      const WO = block.W_O[h];
      for (let j = 0; j < dh; j++) for (let i = 0; i < d; i++) out[i] += v[j] * WO[j][i];
    } else {
      for (let j = 0; j < dh; j++) out[h * dh + j] = v[j];
    }
    return out;
  }

  // The first block a source's write passes through, and the block whose attention a target
  // reads last: a feature or error node of block L writes after L's MLP; the embeddings before
  // block 0; a feature of block L reads after L's attention (before it, in a parallel block,
  // whose MLP reads the block's input); a logit after the last block.
  const firstBlock = (node) => node.layer + 1;
  const lastBlock = (node, F) =>
    node.kind === "logit" || (F && F.parallel) ? node.layer - 1 : node.layer;
  const targetLn = (F, node) => node.kind === "logit" ? F.ln_final : F.blocks[node.layer].ln2;

  // Every path of `vec` written at `pos` through blocks from..to, each {hops, pos, vec}: hops
  // the heads it passed ({layer, head, query, key, pattern}); the direct path has none. Null
  // when there are more than `limit` (they multiply by 1 + heads x positions per block).
  function paths(F, vec, pos, from, to, limit = MAX_PATHS) {
    let states = [{hops: [], pos, vec}];
    for (let l = from; l <= to; l++) {
      const block = F.blocks[l], next = [];
      for (const s of states) {
        next.push(s);
        const x = lnLinear(s.vec, block.ln1, s.pos);
        for (let h = 0; h < F.n_heads; h++) {
          const pattern = block.pattern[h];
          let out = null;
          for (let q = 0; q < F.n_pos; q++) {
            const a = pattern[q][s.pos];
            if (a === 0) continue;
            out = out || headOut(F, block, h, x);
            next.push({hops: [...s.hops, {layer: l, head: h, query: q, key: s.pos, pattern: a}],
                       pos: q, vec: out.map((v) => a * v)});
          }
        }
      }
      if (next.length > limit) return null;
      states = next;
    }
    return states;
  }

  // The dense form: the residual stream (n_pos vectors) that `vec` at `pos` becomes after the
  // attention of blocks from..to.
  function propagate(F, vec, pos, from, to) {
    let stream = Array.from({length: F.n_pos}, (_, p) => (p === pos ? vec.slice() : null));
    for (let l = from; l <= to; l++) {
      const block = F.blocks[l], next = stream.map((v) => (v ? v.slice() : null));
      stream.forEach((v, k) => {
        if (!v) return;
        const x = lnLinear(v, block.ln1, k);
        for (let h = 0; h < F.n_heads; h++) {
          let out = null;
          for (let q = 0; q < F.n_pos; q++) {
            const a = block.pattern[h][q][k];
            if (a === 0) continue;
            out = out || headOut(F, block, h, x);
            if (!next[q]) next[q] = new Array(F.d_model).fill(0);
            for (let i = 0; i < F.d_model; i++) next[q][i] += a * out[i];
          }
        }
      });
      stream = next;
    }
    return stream;
  }

  // What the target reads of a vector at its own position: read . LN_t(x).
  const reads = (F, target, x) => (x ? dot(target.read, lnLinear(x, targetLn(F, target), target.pos)) : 0);

  // {activation, path, weight} of the link source -> target (node ids), from the factors alone.
  function link(F, source, target, memo = null) {
    const s = F.nodes[source], t = F.nodes[target];
    if (!s || !t || !s.write || !t.read) throw new Error(`no factors for the link ${source} -> ${target}`);
    const from = firstBlock(s), to = lastBlock(t, F);
    let path = 0;
    if (from <= to + 1) {
      const key = `${source}|${to}`;
      let stream = memo && memo.get(key);
      if (!stream) {
        stream = propagate(F, s.write, s.pos, from, to);
        if (memo) memo.set(key, stream);
      }
      path = reads(F, t, stream[t.pos]);
    }
    return {activation: s.activation, path, weight: s.activation * path};
  }

  // The link's path weight split by the heads each path passes through (their sum is link's
  // path): [{hops, value}], largest |value| first; null when there are too many to list.
  function linkPaths(F, source, target, limit = MAX_PATHS) {
    const s = F.nodes[source], t = F.nodes[target];
    const all = paths(F, s.write, s.pos, firstBlock(s), lastBlock(t, F), limit);
    if (all === null) return null;
    const found = all
      .filter((p) => p.pos === t.pos)
      .map((p) => ({hops: p.hops, value: reads(F, t, p.vec)}));
    return found.sort((a, b) => Math.abs(b.value) - Math.abs(a.value));
  }

  // Every link of a graph file recomputed and compared with its weight: {n, worst, where}.
  function check(doc) {
    const F = doc.frozen, memo = new Map();
    let worst = 0, where = "";
    for (const l of doc.links) {
      const diff = Math.abs(link(F, l.source, l.target, memo).weight - l.weight);
      if (!(diff <= worst)) { worst = Number.isNaN(diff) ? Infinity : diff; where = `${l.source} -> ${l.target}`; }
    }
    return {n: doc.links.length, worst, where};
  }

  return {lnLinear, headOut, propagate, paths, link, linkPaths, check};
})();

if (typeof module !== "undefined") module.exports = FlatGraph;
