// The panels of the forward pass: Embed, then per layer Attend (with a clicked cell's
// arithmetic) and Think (the MLP, with the output landscape after the last layer).
"use strict";

Panels.blocks = (ctx) => {
  const {h, clear, fmt, Plane, tokenCss} = Views;
  const {DATA, M, cfg, vocab, V, L, H, word, posLabels, dims, stream, SHAPES, heat, show, section, row, num} = ctx;
  const geometry = ctx.geometry;
  const rotary = M.rotary(cfg), normName = M.rms(cfg) ? "RMSNorm" : "LayerNorm", short = M.shortformer(cfg);
  const group = H / M.kvHeads(cfg);   // query heads per key and value head (grouped-query attention)
  const actName = {gelu: "GELU", gelu_erf: "exact GELU", relu: "ReLU", silu: "SiLU"}[cfg.act_fn] || cfg.act_fn;

  // ---- Embed ----
  function embedPanel() {
    const el = section("embed", "Embed", rotary
      ? "Each token looks up its row of W_E, which enters the residual stream: e = x. This model has rotary positions: no W_pos; each head turns its queries and keys by their position instead (Attend)."
      : short ? "Each token looks up its row of W_E, which enters the residual stream: e = x. Shortformer positions: each position's row of W_pos is added to the queries' and keys' inputs only (Attend), never to the stream."
        : "Each token looks up its row of W_E, each position its row of W_pos; their sum e = x + p enters the residual stream.");
    const WE = heat("token vectors W_E", "embed.W_E", cfg.d_model);
    const WP = rotary ? null : heat("position vectors W_pos", "pos_embed.W_pos", cfg.d_model);
    const X = heat("x: this sequence's tokens", "hook_embed", cfg.d_model);
    const P = rotary ? null : heat("p: its positions", "hook_pos_embed", cfg.d_model);
    const E = heat(rotary || short ? "e = x" : "e = x + p", "blocks.0.hook_resid_pre", cfg.d_model);
    const planes = {
      tokens: new Plane({title: "tokens (rows of W_E)", size: 240}),
      positions: rotary ? null : new Plane({title: "positions: the ladder", size: 240}),
      sums: new Plane({title: rotary || short ? "every token: e = x" : "every token at every position: e = x + p", size: 420}),
    };
    // modular-addition: colour each number by its phase on the key-frequency circle.
    const kp = DATA.key_phase;
    const phaseBox = kp ? h("label", {class: "knob", title: "hue = the number's angle in the plane of the key frequency (last checkpoint)"},
      h("input", {type: "checkbox", id: "phase", onchange: (e) => ctx.set({phase: e.target.checked})}),
      `colour numbers by their phase at key frequency ${kp.frequency}`) : null;
    el.append(row(...[WE, WP, X, P, E].filter(Boolean).map((x) => x.el)),
      h("h3", {}, "Geometry"), ...(phaseBox ? [phaseBox] : []),
      row(...[planes.sums, planes.tokens, planes.positions].filter(Boolean).map((x) => x.el)));
    return {el, planes, key: () => `${ctx.state.step}:${ctx.state.seq.join(".")}:${ctx.state.pos}:${ctx.state.phase}`, update(c) {
      if (phaseBox) phaseBox.firstChild.checked = ctx.state.phase;
      const w = c.model.w, d = cfg.d_model, seq = c.seq, rows = posLabels(seq);
      const mat = (data, n) => Array.from({length: n}, (_, i) => Array.from(data.subarray(i * d, i * d + d)));
      WE.update(mat(w["embed.W_E"].data, V), vocab, stream(), {shape: [V, d], axes: "d_vocab, d_model"});
      if (WP) WP.update(mat(w["pos_embed.W_pos"].data, cfg.n_ctx), dims(cfg.n_ctx), stream(), {shape: [cfg.n_ctx, d], axes: "n_ctx, d_model"});
      show(X, c.run.cache["hook_embed"], rows, stream(), "resid");
      if (P) show(P, c.run.cache["hook_pos_embed"], rows, stream(), "resid", {dim: ctx.state.pos});
      show(E, c.run.cache["blocks.0.hook_resid_pre"], rows, stream(), "resid");
      geometry.embedPlanes(c, planes);
    }};
  }

  // ---- Attend ----
  function attendPanel(l) {
    const el = section(`attend-${l}`, L > 1 ? `Attend · layer ${l}` : "Attend",
      (M.causalOf(cfg) ? "Each position's query is compared with the keys of itself and every earlier position" : "Each position's query is compared with the keys of every position, before and after it (this model attends both ways: nothing is masked)")
      + ": score = q·k / √d_head; a softmax over the row turns scores into weights, and the head's output z is the weighted sum of the values. Click any cell to open its arithmetic."
      + (rotary ? " Rotary positions: q and k are turned by their position (hook_rot_q, hook_rot_k) before the dot product." : "")
      + (short ? " Shortformer positions: q and k read the normalised stream plus W_pos; v reads the stream alone." : "")
      + (group > 1 ? ` Grouped-query attention: each key and value head serves ${group} query heads.` : "")
      + (M.windowOf(cfg, l) ? ` A local layer: each query reads the ${M.windowOf(cfg, l)} latest keys, its own included.` : ""));
    const b = `blocks.${l}.`;
    const ln = M.preNorm(cfg) ? heat(`${normName} 1 output`, b + "ln1.hook_normalized", cfg.d_model) : null;
    const heads = Array.from({length: H}, (_, hd) => {
      const pick = (i, j) => ctx.set({cell: {l, h: hd, q: i, k: j}});
      const describe = (kind) => (i, j, v) => [`head ${l}.${hd}: query ${i} (${word(ctx.state.seq[i])}) → key ${j} (${word(ctx.state.seq[j])})`,
        v === -Infinity ? (M.windowOf(cfg, l) && j <= i ? "masked: outside this local layer's window" : "masked: a position cannot see later ones") : `${kind} ${String(v)}`, "click for the arithmetic"];
      const card = {
        q: heat(rotary ? "q turned" : "q", b + (rotary ? "attn.hook_rot_q" : "attn.hook_q"), cfg.d_head),
        k: heat(rotary ? "k turned" : "k", b + (rotary ? "attn.hook_rot_k" : "attn.hook_k"), cfg.d_head),
        v: heat("v", b + "attn.hook_v", cfg.d_head),
        scores: heat("scores", b + "attn.hook_attn_scores", 8, {cell: 30, values: true, onClick: pick, describe: describe("score")}),
        pattern: heat("weights", b + "attn.hook_pattern", 8, {cell: 30, values: true, kind: "sequential", unit: true, sees: (i, j) => { const [lo, hi] = M.keysOf(cfg, l, i, ctx.state.seq.length); return j >= lo && j <= hi; }, onClick: pick, describe: describe("weight")}),
        z: heat("z = Σ weight · v", b + "attn.hook_z", cfg.d_head),
      };
      card.badge = h("span", {class: "badge off"}, "switched off");
      card.headScores = h("span", {class: "head-scores"});
      card.el = h("div", {class: "head-card", dataset: {head: `${l}.${hd}`}},
        h("h3", {}, `Head ${l}.${hd}`, card.badge, card.headScores),
        row(card.q.el, card.k.el, card.v.el), row(card.scores.el, card.pattern.el, card.z.el));
      return card;
    });
    const arith = h("div", {class: "arith", id: `arith-${l}`, "aria-live": "polite"});
    const out = heat(cfg.attn_out ? "attention output (z W_O)" : "attention output (heads concatenated)", b + "hook_attn_out", cfg.d_model);
    // Attention-only blocks have no resid_mid: the stream after attention is the block's output.
    // A parallel block has none either: its MLP reads the stream its attention read.
    const midHook = M.attnOnly(cfg) ? b + "hook_resid_post" : M.parallel(cfg) ? null : b + "hook_resid_mid";
    const mid = midHook ? heat("residual after attention", midHook, cfg.d_model) : null;
    const qk = new Plane({title: "query–key plane", size: 330});
    el.append(ln ? row(ln.el) : "", h("div", {class: "heads"}, heads.map((c) => c.el), arith),
      h("h3", {}, "Output and geometry"),
      row(out.el, ...(mid ? [mid.el] : []), qk.el, h("div", {class: "fig-note qk-note", id: `qk-note-${l}`})));
    return {el, update(c) {
      const rows = posLabels(c.seq), T = c.T, cache = c.run.cache;
      if (ln) show(ln, cache[b + "ln1.hook_normalized"], rows, stream(), "resid");
      const sel = c.cell.l === l ? c.cell : null;
      heads.forEach((card, hd) => {
        const off = ctx.state.off.includes(`${l}.${hd}`);
        const kv = Math.floor(hd / group);   // keys and values of the head's group
        const slice = (name) => cache[b + name].map((r) => r[/hook_(rot_)?[kv]$/.test(name) ? kv : hd]);
        const hs = SHAPES.head(T);
        for (const n of ["q", "k", "v"]) {
          const hook = rotary && n !== "v" ? `attn.hook_rot_${n}` : `attn.hook_${n}`;
          card[n].update(slice(hook), rows, dims(cfg.d_head), {shape: hs[0], axes: hs[1] + ` (head ${n === "q" ? hd : kv} shown)`});
        }
        const ps = SHAPES.pattern(T), mark = sel && sel.h === hd ? [sel.q, sel.k] : null;
        card.scores.update(cache[b + "attn.hook_attn_scores"][hd], rows, rows, {shape: ps[0], axes: ps[1] + ` (head ${hd} shown)`, selected: mark});
        card.pattern.update(cache[b + "attn.hook_pattern"][hd], rows, rows, {shape: ps[0], axes: ps[1] + ` (head ${hd} shown)`, selected: mark, limit: 1});
        card.z.update(slice("attn.hook_z"), rows, dims(cfg.d_head), {shape: hs[0], axes: hs[1] + ` (head ${hd} shown)`});
        card.badge.style.display = off ? "" : "none";
        card.el.classList.toggle("off", off);
        ctx.showHeadScores(card.headScores, l, hd);
      });
      show(out, cache[b + "hook_attn_out"], rows, stream(), "resid");
      if (mid) show(mid, cache[midHook], rows, stream(), "resid");
      arith.style.display = sel ? "" : "none";
      if (sel) drawArithmetic(arith, c, sel);
      geometry.qkPlane(qk, c, l, sel ? sel.h : 0, sel ? sel.q : T - 1);
    }};
  }

  function drawArithmetic(box, c, {l, h: hd, q, k}) {
    const b = `blocks.${l}.attn.`, cache = c.run.cache, dh = cfg.d_head;
    const qv = cache[b + (rotary ? "hook_rot_q" : "hook_q")][q][hd], kv = cache[b + (rotary ? "hook_rot_k" : "hook_k")][k][Math.floor(hd / group)];
    const scores = cache[b + "hook_attn_scores"][hd][q], weights = cache[b + "hook_pattern"][hd][q];
    const key = JSON.stringify([l, hd, q, k, c.seq, qv, kv, scores, ctx.state.beta]);
    if (box.dataset.shown === key) return;     // unchanged by this knob: keep the box as it is
    box.dataset.shown = key;
    const prods = qv.map((x, i) => x * kv[i]);
    let dot = 0;
    for (const p of prods) dot += p;
    const max = Math.max(...scores.filter(Number.isFinite));
    const exps = scores.map((s) => (s === -Infinity ? 0 : Math.exp(s - max)));
    const sum = exps.reduce((a, x) => a + x, 0);
    clear(box);
    box.append(
      h("h3", {}, `Arithmetic of head ${l}.${hd}: query ${q} (“${word(c.seq[q])}”) → key ${k} (“${word(c.seq[k])}”)`),
      h("div", {class: "arith-grid"},
        h("div", {},
          h("div", {class: "step-title"}, `1 · the dot product: ${dh} products`),
          h("table", {class: "products"},
            h("thead", {}, h("tr", {}, h("th", {}, "i"), h("th", {}, `q${q}[i]`), h("th", {}, `k${k}[i]`), h("th", {}, "product"))),
            h("tbody", {}, qv.map((x, i) => h("tr", {}, h("td", {}, String(i)), h("td", {}, num(`q.${i}`, x)),
              h("td", {}, num(`k.${i}`, kv[i])), h("td", {}, num(`prod.${i}`, prods[i]))))),
            h("tfoot", {}, h("tr", {}, h("td", {colSpan: 3}, "sum = q·k"), h("td", {}, num("dot", dot)))))),
        h("div", {},
          h("div", {class: "step-title"}, "2 · scale"),
          h("p", {class: "eq"}, "score = q·k / √", String(dh), " = ", num("dot2", dot), " / ", num("sqrt", Math.sqrt(dh)),
            ctx.state.beta !== 1 ? [" × β ", num("beta", ctx.state.beta, 3)] : "", " = ", num("score", scores[k])),
          h("div", {class: "step-title"}, `3 · softmax over row ${q}`),
          h("p", {class: "eq small"}, "weight_j = exp(score_j − max) / Σ exp(score_i − max), max = ", num("max", max), ", Σ = ", num("sum", sum)),
          h("table", {class: "softmax"},
            h("thead", {}, h("tr", {}, h("th", {}, "key"), h("th", {}, "score"), h("th", {}, "exp(score − max)"), h("th", {}, "weight"))),
            h("tbody", {}, scores.map((s, j) => h("tr", {class: j === k ? "hl" : ""},
              h("td", {}, `${j} ${word(c.seq[j])}`),
              h("td", {}, s === -Infinity ? h("span", {class: "muted"}, "masked (−∞)") : num(`row.${j}.score`, s)),
              h("td", {}, num(`row.${j}.exp`, exps[j])),
              h("td", {}, num(`row.${j}.weight`, weights[j]))))))))
    );
  }

  // ---- Think (MLP) ----
  function thinkPanel(l) {
    const last = l === L - 1;
    const el = section(`think-${l}`, L > 1 ? `Think · layer ${l}` : "Think",
      `The MLP reads each position's residual on its own: ${cfg.d_mlp} hidden units (${M.gated(cfg) ? `gated: ${actName}(x W_gate) × (x W_in)` : M.solu(cfg) ? "SoLU, x softmax(x), then a LayerNorm over the units" : actName}), written back into the residual stream.`
      + (M.parallel(cfg) ? " A parallel block: the MLP reads the stream the attention read, and both write to it at once." : ""));
    const b = `blocks.${l}.`;
    const ln = M.preNorm(cfg) ? heat(`${normName} 2 output`, b + "ln2.hook_normalized", cfg.d_model) : null;
    const pre = heat(M.gated(cfg) ? "gate pre-activation x W_gate" : "pre-activation", b + "mlp.hook_pre", cfg.d_mlp);
    const linear = M.gated(cfg) ? heat("linear x W_in", b + "mlp.hook_pre_linear", cfg.d_mlp) : null;
    const mid = M.solu(cfg) ? heat("SoLU x softmax(x)", b + "mlp.hook_mid", cfg.d_mlp) : null;
    const midLn = M.solu(cfg) ? heat("its LayerNorm", b + "mlp.ln.hook_normalized", cfg.d_mlp) : null;
    const post = heat("activation", b + "mlp.hook_post", cfg.d_mlp);
    const out = heat("MLP output", b + "hook_mlp_out", cfg.d_model);
    const resid = heat("residual after the MLP", b + "hook_resid_post", cfg.d_model);
    // the output landscape maps the stream after attention through the MLP: not a parallel block's
    const what = ctx.nextTokens ? "next token" : "output class", dist = ctx.nextTokens ? "next-token" : "output";
    const planes = last && !M.parallel(cfg) ? {argmax: new Plane({title: `output landscape: most likely ${what}`, size: 330}),
                           entropy: new Plane({title: `entropy of the ${dist} distribution`, size: 330})} : null;
    el.append(ln ? row(ln.el) : "", row(pre.el), linear ? row(linear.el) : "", mid ? row(mid.el, midLn.el) : "", row(post.el), row(out.el, resid.el));
    const zoom = h("label", {class: "knob", title: "frame the landscape around this sequence's arrows only"},
      h("input", {type: "checkbox", id: "zoom", onchange: (e) => ctx.set({zoom: e.target.checked})}), "zoom to this sequence");
    if (planes) el.append(h("h3", {}, "Geometry ", zoom), row(planes.argmax.el, planes.entropy.el), h("p", {class: "fig-note wide", id: "landscape-note"}));
    return {el, update(c) {
      const rows = posLabels(c.seq), cache = c.run.cache;
      if (ln) show(ln, cache[b + "ln2.hook_normalized"], rows, stream(), "resid");
      show(pre, cache[b + "mlp.hook_pre"], rows, dims(cfg.d_mlp), "mlp");
      if (linear) show(linear, cache[b + "mlp.hook_pre_linear"], rows, dims(cfg.d_mlp), "mlp");
      if (mid) show(mid, cache[b + "mlp.hook_mid"], rows, dims(cfg.d_mlp), "mlp");
      if (midLn) show(midLn, cache[b + "mlp.ln.hook_normalized"], rows, dims(cfg.d_mlp), "mlp");
      show(post, cache[b + "mlp.hook_post"], rows, dims(cfg.d_mlp), "mlp");
      const off = ctx.state.mlp.includes(l);
      show(out, cache[b + "hook_mlp_out"], rows, stream(), "resid", {dim: off});
      show(resid, cache[b + "hook_resid_post"], rows, stream(), "resid");
      if (planes) {
        zoom.firstChild.checked = ctx.state.zoom;
        geometry.landscape(planes, c);
      }
    }};
  }

  return {embedPanel, attendPanel, thinkPanel};
};
