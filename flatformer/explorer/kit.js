// What every panel builds with: a token's name as shown, row labels, the TransformerLens shape
// of each kind of activation, heatmaps sized to their columns, panel sections, exact numbers.
// Panels.kit(ctx) returns them; each panel group (panels-*.js) is Panels.NAME(ctx).
"use strict";

const Panels = {};

Panels.kit = (ctx) => {
  const {h, fmt, Heatmap} = Views;
  const {cfg, vocab, V, H} = ctx;
  // ---- labels and shapes ----
  // A token's name as shown: cut to flatformer/labels.py's MAX_LABEL characters (shipped in
  // FlatConstants), as figures and tables cut it; the full name stays in DATA.
  const word = (t) => Views.cut(vocab[t], FlatConstants.MAX_LABEL);
  // An output class's name as shown (the logits' columns: ctx.vocabOut).
  const wordOut = (v) => Views.cut(ctx.vocabOut[v], FlatConstants.MAX_LABEL);
  // The argmax of a row of logits (the first largest, as numpy's argmax).
  const top = (row) => row.reduce((best, x, v) => (x > row[best] ? v : best), 0);
  // A compiled program's outputs: its value at input position i is the class the model gives
  // at position i + 1 (after BOS), so the outputs are read from position 1 on.
  const outputsOf = (logits) => (ctx.DATA.program ? logits.slice(1) : logits).map((r) => wordOut(top(r)));
  const posLabels = (seq) => seq.map((t, i) => ({text: word(t), pos: i}));
  const dims = (n) => Array.from({length: n}, (_, i) => String(i));
  // The residual stream's columns: a compiled program's named directions ("length:3", cut as
  // every label is), else their numbers.
  const names = ctx.DATA && ctx.DATA.residual;  // a page without DATA (dashboards) has none
  const residual = names && names.length === cfg.d_model
    ? names.map((n) => Views.cut(n, FlatConstants.MAX_LABEL)) : null;
  const stream = () => residual || dims(cfg.d_model);
  const SHAPES = {
    resid: (T) => [[1, T, cfg.d_model], "batch, pos, d_model"],
    head: (T) => [[1, T, H, cfg.d_head], "batch, pos, head_index, d_head"],
    pattern: (T) => [[1, H, T, T], "batch, head_index, query_pos, key_pos"],
    mlp: (T) => [[1, T, cfg.d_mlp], "batch, pos, d_mlp"],
    logits: (T) => [[1, T, ctx.vocabOut.length], ctx.vocabOut.length === V ? "batch, pos, d_vocab" : "batch, pos, d_vocab_out"],
  };
  function cellOpts(cols) {
    if (cols <= 12) return {cell: 30, values: true};
    if (cols <= 20) return {cell: 18};
    return {cell: 14};
  }
  function heat(title, hook, cols, opts = {}) {
    return new Heatmap({title, hook, ...cellOpts(cols), ...opts});
  }
  function show(map, M2, rows, cols, kind, extra = {}) {
    const [shape, axes] = SHAPES[kind] ? SHAPES[kind](rows.length) : [null, null];
    map.update(M2, rows, cols, {shape: extra.shape || shape, axes: extra.axes || axes, ...extra});
  }
  const section = (id, title, lead) => h("section", {id, class: "panel"},
    h("h2", {}, title), lead ? h("p", {class: "lead"}, lead) : null);
  const row = (...children) => h("div", {class: "row"}, ...children);

  function num(key, value, digits = 4) {
    return h("span", {class: "num", dataset: {key, value: String(value)}, title: String(value)}, fmt(value, digits));
  }


  // ---- Circuit: the edge graph of flatformer/edges, every edge ablatable ----
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs = {}) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  }


  return {word, wordOut, top, outputsOf, posLabels, dims, stream, SHAPES, heat, show, section, row, num, svg};
};
