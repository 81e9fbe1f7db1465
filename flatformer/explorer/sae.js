// A sparse dictionary's encoder in JavaScript, the inference rule of flatformer/dictionary/sae.py
// (and SAELens's, as dictionary/saelens.py's run_saelens computes it), in float64, with no DOM.
// The dashboards page recomputes every activation it shows with it; tests/js/sae.test.js holds
// it to Python's on fixtures tests/test_dashboards.py writes.
//
// An encoder is {kind, W_enc (d_in rows of d_sae), b_enc (d_sae), b_dec (d_in, or null for a
// transcoder: its input is not centred), k (topk), threshold (d_sae, jumprelu)}:
//   pre = (x - b_dec) W_enc + b_enc
//   relu:     f = max(pre, 0)                       (Bricken et al. 2023)
//   topk:     f = max(pre, 0) at the k largest pre, 0 elsewhere (Gao et al. 2024, eq. 3)
//   jumprelu: f = pre where pre > threshold, else 0 (Rajamanoharan et al. 2024; BatchTopK's
//             inference rule too, with one threshold for every latent: Bussmann et al. 2024)
"use strict";

const FlatSAE = (() => {
  const KINDS = ["relu", "topk", "jumprelu"];

  function preActivations(enc, x) {
    const {W_enc, b_enc, b_dec} = enc, m = b_enc.length, pre = Float64Array.from(b_enc);
    for (let i = 0; i < x.length; i++) {
      const xi = b_dec ? x[i] - b_dec[i] : x[i], row = W_enc[i];
      for (let j = 0; j < m; j++) pre[j] += xi * row[j];
    }
    return pre;
  }

  // The latents of one activation vector x (d_in): a Float64Array of d_sae.
  function encode(enc, x) {
    if (!KINDS.includes(enc.kind)) throw new Error(`no encoder of kind ${enc.kind}`);
    if (x.length !== enc.W_enc.length) throw new Error(`the input has ${x.length} numbers, the encoder reads ${enc.W_enc.length}`);
    const pre = preActivations(enc, x), m = pre.length, f = new Float64Array(m);
    if (enc.kind === "relu") {
      for (let j = 0; j < m; j++) f[j] = Math.max(pre[j], 0);
    } else if (enc.kind === "jumprelu") {
      for (let j = 0; j < m; j++) f[j] = pre[j] > enc.threshold[j] ? pre[j] : 0;
    } else {
      // the k largest, the first index winning a tie (as numpy's argmax)
      const order = Array.from({length: m}, (_, j) => j).sort((a, b) => pre[b] - pre[a] || a - b);
      for (const j of order.slice(0, enc.k)) f[j] = Math.max(pre[j], 0);
    }
    return f;
  }

  return {KINDS, preActivations, encode};
})();

if (typeof module !== "undefined") module.exports = FlatSAE;
