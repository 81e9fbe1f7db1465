// The panels of the weights' structure: Circuits (QK and OV with their singular values), the
// edge graph of flatformer/edges with every edge ablatable, the induction heads' scores and
// composition (computed by Python), and the logit lens.
"use strict";

Panels.circuits = (ctx) => {
  const {h, clear, fmt, Plane, tokenCss} = Views;
  const {DATA, M, cfg, vocab, V, L, H, word, posLabels, dims, stream, SHAPES, heat, show, section, row, num, svg} = ctx;
  const memo = ctx.memo, EDGES = ctx.EDGES;

  // ---- Circuits ----
  function circuitsPanel() {
    const el = section("circuits", "Circuits",
      "Each head as two matrices in the residual basis: QK = W_Q W_Kᵀ (which residual directions attend to which) and OV = W_V W_O (what is copied when attended; W_V alone without W_O). Their singular values show how many directions they really use."
      + (M.rotary(cfg) ? " Rotary positions turn q and k by position: QK here is the form between a query and a key at the same position; at a distance the turn between them enters." : ""));
    const cards = [], k = DATA.measures.top_k;
    for (let l = 0; l < L; l++) for (let hd = 0; hd < H; hd++) {
      const qkMap = heat("QK = W_Q W_Kᵀ", `blocks.${l}.attn.W_Q · W_Kᵀ`, cfg.d_model);
      const ovMap = heat(cfg.attn_out ? "OV = W_V W_O" : "OV = W_V", `blocks.${l}.attn.W_V${cfg.attn_out ? " · W_O" : ""}`, cfg.attn_out ? cfg.d_model : cfg.d_head);
      const sv = {QK: h("div", {class: "sv", dataset: {kind: "QK"}}), OV: h("div", {class: "sv", dataset: {kind: "OV"}})};
      const card = h("div", {class: "head-card", dataset: {head: `${l}.${hd}`}}, h("h3", {}, `Head ${l}.${hd}`),
        row(qkMap.el, h("div", {class: "fig"}, h("figcaption", {}, h("span", {class: "fig-title"}, "singular values of QK")), sv.QK),
            ovMap.el, h("div", {class: "fig"}, h("figcaption", {}, h("span", {class: "fig-title"}, "singular values of OV")), sv.OV)));
      cards.push({l, hd, qkMap, ovMap, sv, card});
      el.appendChild(card);
    }
    // One card at a time: the page draws the cards in view first and the rest later
    // (page.js), so each head's SVD is computed only when its card is drawn.
    function drawCard(card, c) {
      const circ = memo(`circ:${ctx.state.step}:${card.l}:${card.hd}`, () => M.circuits(c.model, card.l, card.hd, k));
      const d = cfg.d_model;
      card.qkMap.update(circ.QK.matrix, stream(), stream(), {shape: [d, d], axes: "d_model (query side), d_model (key side)"});
      const ovCols = circ.OV.matrix[0].length;
      card.ovMap.update(circ.OV.matrix, stream(), cfg.attn_out ? stream() : dims(ovCols), {shape: [d, ovCols], axes: cfg.attn_out ? "d_model (read), d_model (written)" : "d_model (read), d_head (written)"});
      for (const key of ["QK", "OV"]) {
        const {s, k, topK} = circ[key], box = card.sv[key];
        clear(box);
        box.dataset.values = s.map(String).join(",");
        box.dataset.topK = String(topK);
        const max = s[0] || 1;
        s.forEach((x, i) => box.appendChild(h("div", {class: "sv-row", title: `σ${i + 1} = ${String(x)}`},
          h("span", {class: "bar-label"}, `σ${i + 1}`),
          h("span", {class: "bar-track"}, h("span", {class: "bar", style: {width: `${100 * x / max}%`, background: i < k ? "#225ea8" : "#8c959f"}})),
          h("span", {class: "bar-value"}, fmt(x, 3)))));
        box.appendChild(h("div", {class: "fig-note"}, `top ${k} hold ${(100 * topK).toFixed(1)}% of the squared mass`));
      }
    }
    return {el, key: () => String(ctx.state.step),
      parts: (c) => cards.map((card) => ({el: card.card, draw: () => drawCard(card, c)})),
      update(c) { for (const card of cards) drawCard(card, c); }};
  }

  // ---- Circuit: the edge graph of flatformer/edges, every edge ablatable ----
  function edgesPanel() {
    const C = DATA.circuit;
    const el = section("edges", "Circuit",
      `The model as a graph: embeddings, each head (reading the stream three times: q, k, v), each MLP, the logits. An edge is one node's output as a later one reads it. Click an edge to ablate it (it then carries its mean output over the held-out windows, mean ablation); its width is the KL of the last ${ctx.nextTokens ? "next-token" : "position's output"} distribution when it alone is ablated, on this prompt.`);
    const why = DATA.circuit_note ? DATA.circuit_note : DATA.format === "flatformer-playground-1"
      ? "The circuit comes from `flatformer circuits`: download the run and open it with `flatformer explore`."
      : "This run's task is unknown to this version: no circuit.";
    // Without held-out windows there is no mean to ablate to; without a circuit (the
    // playground's weights) the graph still works, with no edge highlighted as kept.
    if (!C && !DATA.measures.mean_windows) {
      el.appendChild(h("p", {class: "fig-note"}, why));
      return {el, key: () => "none", update() {}};
    }
    const inCircuit = new Set(C ? C.edges.map(([s, r]) => `${s}>${r}`) : []);
    const only = h("input", {type: "checkbox", id: "circuit-only", onchange: (e) => ctx.set({only: e.target.checked})});
    const reset = h("button", {type: "button", onclick: () => ctx.set({cut: [], only: false})}, "restore every edge");
    const note = h("p", {class: "fig-note", id: "circuit-note"});
    const box = h("div", {class: "edge-graph", id: "edge-graph"});
    const out = h("table", {class: "ablations", id: "edge-output"});
    el.append(row(C ? h("label", {}, only, C.source ? ` circuit only (the ${C.edges.length} of ${C.edges_total} edges of ${C.source})` : ` circuit only (the ${C.edges.length} of ${C.edges_total} edges flatformer circuits kept at step ${C.step}${C.scope ? ` on ${C.scope.prompts} held-out prompts${C.scope.length ? ` of ${C.scope.length} tokens` : ""}` : ""}, faithfulness ${C.faithfulness === null ? "-" : C.faithfulness.toFixed(3)} of the ${C.metric})`)
      : h("span", {class: "fig-note", id: "no-circuit"}, `No circuit highlighted: ${why}`), reset), note, box, out);
    const cols = {}, colOf = (n) => (n === "tok" || n === "pos" ? 0 : n === "logits" ? 1 + 2 * L
      : 1 + 2 * Number(n.slice(1).split(".")[0]) + (n[0] === "m" ? 1 : 0));
    for (const n of EDGES.nodes) (cols[colOf(n)] = cols[colOf(n)] || []).push(n);
    const rows = Math.max(...Object.values(cols).map((c) => c.length));
    const W = 140 * (2 + 2 * L), Hh = 70 * rows + 20, bw = 64, bh = 34;
    const at = {};
    for (const [x, members] of Object.entries(cols)) {
      members.forEach((n, i) => { at[n] = [50 + 140 * x, Hh / 2 + 70 * (i - (members.length - 1) / 2)]; });
    }
    const port = {q: -10, k: 0, v: 10};
    const color = {q: "#0072B2", k: "#D55E00", v: "#009E73"};
    return {el, key: () => `${ctx.state.step}:${ctx.state.seq.join(".")}:${ctx.state.cut.join(",")}:${ctx.state.only}`, update(c) {
      const T = c.T, model = c.model;
      const means = memo(`means:${ctx.state.step}`, () => M.meanOutputs(model, DATA.measures.mean_windows));
      const refs = {};
      for (const s of EDGES.senders) refs[s] = means[s].slice(0, T);
      const cut = new Set(ctx.state.cut);
      const keep = EDGES.edges.map(([s, r], e) => (cut.has(e) || (ctx.state.only && !inCircuit.has(`${s}>${r}`)) ? 0 : 1));
      const ones = EDGES.edges.map(() => 1);
      const clean = M.edgeForward(model, c.seq, refs, ones).logits[T - 1];
      const now = M.edgeForward(model, c.seq, refs, keep).logits[T - 1];
      const effect = memo(`edge-effects:${ctx.state.step}:${c.seq.join(".")}`, () => EDGES.edges.map((_, e) => {
        const alone = ones.slice();
        alone[e] = 0;
        return M.kl(clean, M.edgeForward(model, c.seq, refs, alone).logits[T - 1]);
      }));
      const largest = Math.max(...effect, 1e-12);
      clear(box);
      const pic = svg("svg", {width: W, height: Hh, viewBox: `0 0 ${W} ${Hh}`, role: "img"});
      EDGES.edges.forEach(([s, r], e) => {
        const kind = /\.[qkv]$/.test(r) ? r.slice(-1) : null, node = kind ? r.slice(0, -2) : r;
        const [x0, y0] = at[s], [x1, y1] = at[node];
        const sx = x0 + bw / 2, ex = x1 - bw / 2, ey = y1 + (kind ? port[kind] : 0), mx = (sx + ex) / 2;
        const d = `M ${sx} ${y0} C ${mx} ${y0}, ${mx} ${ey}, ${ex} ${ey}`;
        const kept = keep[e] === 1, member = !C || inCircuit.has(`${s}>${r}`);
        const stroke = !kept ? "#d1242f" : member ? (color[kind] || "#CC79A7") : "#b8b8b8";
        const g = svg("g", {class: "edge", "data-edge": e, "data-src": s, "data-dst": r, "data-kept": kept ? 1 : 0});
        const title = svg("title");
        title.textContent = `${s} → ${r}: KL ${String(effect[e])} nats when ablated alone${kept ? "" : " (ablated)"}`;
        g.append(title, svg("path", {d, fill: "none", stroke, "stroke-width": 0.8 + 6 * effect[e] / largest, "stroke-dasharray": kept ? "" : "4 3"}),
          svg("path", {d, fill: "none", stroke: "transparent", "stroke-width": 10, style: "cursor:pointer"}));
        g.addEventListener("click", () => {
          const next = new Set(ctx.state.cut);
          if (next.has(e)) next.delete(e); else next.add(e);
          ctx.set({cut: [...next].sort((a, b) => a - b)});
        });
        pic.appendChild(g);
      });
      for (const n of EDGES.nodes) {
        const [x, y] = at[n];
        pic.appendChild(svg("rect", {x: x - bw / 2, y: y - bh / 2, width: bw, height: bh, rx: 5, fill: "white", stroke: "#333"}));
        const label = svg("text", {x, y: y + 4, "text-anchor": "middle", "font-size": 12});
        label.textContent = n;
        pic.appendChild(label);
      }
      box.appendChild(pic);
      only.checked = ctx.state.only;
      const ablated = keep.filter((k) => k === 0).length;
      const klNow = M.kl(clean, now);
      note.dataset.kl = String(klNow);
      note.textContent = `${ablated} of ${keep.length} edges ablated; KL(original ‖ this) at the last position = ${String(klNow)} nats`;
      const p = M.softmax(now), p0 = M.softmax(clean);
      const order = p.map((_, v) => v).sort((a, b) => p[b] - p[a] || a - b).slice(0, 5);
      clear(out);
      out.append(h("thead", {}, h("tr", {}, h("th", {}, ctx.nextTokens ? "next token" : "output at the last position"), h("th", {}, "p, these edges"), h("th", {}, "p, every edge"))));
      const body = h("tbody");
      for (const v of order) body.appendChild(h("tr", {}, h("td", {}, h("b", {}, ctx.wordOut(v))), h("td", {}, `${(100 * p[v]).toFixed(1)}%`), h("td", {}, `${(100 * p0[v]).toFixed(1)}%`)));
      out.appendChild(body);
      window.explorer.edges = {keep, logits: now, clean, effect, refs};
    }};
  }

  // ---- Heads: induction scores and composition (numbers exported from Python) ----
  // The scores need the copying score's eigenvalues, so Python computes them at every exported
  // checkpoint (flatformer/analysis/induction.py) and the page shows them as they are.
  const INDUCTION = DATA.induction || null;
  const scoresAt = (step) => (INDUCTION ? INDUCTION.steps[String(step)] : null);

  function showHeadScores(box, l, hd) {
    const at = scoresAt(ctx.state.step);
    box.style.display = at ? "" : "none";
    if (!at) return;
    const s = at.heads.find((x) => x.layer === l && x.head === hd);
    box.dataset.prev = String(s.prev_token);
    box.dataset.prefix = String(s.prefix_matching);
    box.dataset.copying = String(s.copying);
    box.textContent = ` previous-token ${fmt(s.prev_token, 3)} · prefix-matching ${fmt(s.prefix_matching, 3)} · copying ${s.copying === null ? "undefined" : fmt(s.copying, 3)}`;
  }

  function compositionPanel() {
    const el = section("composition", "Composition",
      `Heads as nodes, layer by layer; an arrow from an earlier head A to a later head B, as thick as their composition score ‖M_A M_B‖_F / (‖M_A‖_F ‖M_B‖_F) with M_A = W_V W_O of A and, for B, W_Q W_Kᵀ (Q), its transpose (K) or W_V W_O (V) (Elhage et al. 2021). Random heads of the same shapes score ${fmt(INDUCTION.baseline, 3)} on average; arrows below that are faint. Node labels: previous-token and prefix-matching scores on repeated random tokens (Olsson et al. 2022). The induction score jumps at step ${INDUCTION.phase_step}: move the checkpoint slider across it.`);
    let mode = "k";
    const buttons = ["q", "k", "v"].map((m) => h("button", {type: "button", class: "mode", dataset: {mode: m},
      onclick: () => { mode = m; draw(); }}, `${m.toUpperCase()}-composition`));
    const width = 160 + 200 * (L - 1), height = 40 + 90 * H;
    const graph = svg("svg", {viewBox: `0 0 ${width} ${height}`, width, height, id: "composition-graph"});
    const table = h("table", {class: "composition", id: "composition-table"});
    el.append(h("div", {class: "controls"}, buttons), graph, table);
    const node = (l, hd) => ({x: 80 + 200 * l, y: 45 + 90 * hd});
    function add(tag, attrs, text) {
      const e = svg(tag, attrs);
      if (text !== undefined) e.textContent = text;
      graph.appendChild(e);
      return e;
    }
    function draw() {
      const at = scoresAt(ctx.state.step);
      while (graph.firstChild) graph.removeChild(graph.firstChild);
      buttons.forEach((b) => b.classList.toggle("on", b.dataset.mode === mode));
      const comp = at.composition[mode], n = L * H;
      for (let a = 0; a < n; a++) for (let b = 0; b < n; b++) {
        const v = comp[a][b];
        if (v === null) continue;
        const p = node(Math.floor(a / H), a % H), q = node(Math.floor(b / H), b % H);
        add("line", {x1: p.x + 22, y1: p.y, x2: q.x - 22, y2: q.y, stroke: v > INDUCTION.baseline ? "#b2182b" : "#bbbbbb",
          "stroke-width": (1 + 14 * v).toFixed(2), "stroke-opacity": v > INDUCTION.baseline ? 0.85 : 0.4,
          "data-pair": `${Math.floor(a / H)}.${a % H}>${Math.floor(b / H)}.${b % H}`, "data-value": String(v)});
        add("text", {x: (p.x + q.x) / 2, y: (p.y + q.y) / 2 - 4, "text-anchor": "middle", "font-size": 11}, fmt(v, 2));
      }
      for (const s of at.heads) {
        const p = node(s.layer, s.head);
        add("circle", {cx: p.x, cy: p.y, r: 20, fill: "#ffffff", stroke: "#333333", "stroke-width": 1.2});
        add("text", {x: p.x, y: p.y + 4, "text-anchor": "middle", "font-size": 12, "font-weight": "bold"}, `${s.layer}.${s.head}`);
        add("text", {x: p.x, y: p.y + 34, "text-anchor": "middle", "font-size": 10}, `prev ${fmt(s.prev_token, 2)} · prefix ${fmt(s.prefix_matching, 2)}`);
      }
      clear(table);
      table.append(h("thead", {}, h("tr", {}, h("th", {}, "earlier → later"), h("th", {}, "Q"), h("th", {}, "K"), h("th", {}, "V"))));
      const body = h("tbody");
      const names = at.heads.map((s) => `${s.layer}.${s.head}`);
      for (let a = 0; a < n; a++) for (let b = 0; b < n; b++) {
        if (at.composition.k[a][b] === null) continue;
        body.appendChild(h("tr", {dataset: {pair: `${names[a]}>${names[b]}`}}, h("td", {}, `${names[a]} → ${names[b]}`),
          ...["q", "k", "v"].map((m) => h("td", {dataset: {mode: m, value: String(at.composition[m][a][b])}}, fmt(at.composition[m][a][b], 3)))));
      }
      table.appendChild(body);
    }
    return {el, key: () => String(ctx.state.step), update() { draw(); }};
  }

  // ---- Logit lens ----
  function lensPanel() {
    const el = section("lens", "Logit lens",
      "The unembedding read off the residual stream after the embedding, after each attention" + (M.attnOnly(cfg) ? "" : " and after each MLP") +
      `: what the model would ${ctx.nextTokens ? "predict" : "output"} if it stopped there. ` + (cfg.ln_final
        ? "The final LayerNorm is applied to each row's stream (its scale recomputed), so the last row is the model's own output."
        : "Exact here: there is no final LayerNorm, so the last row is the model's own output."));
    const grid = h("div", {class: "lens", id: "lens-grid"});
    el.appendChild(grid);
    const stages = [["after embedding", "blocks.0.hook_resid_pre"]];
    for (let l = 0; l < L; l++) {
      if (M.attnOnly(cfg)) stages.push([`after attention ${l}`, `blocks.${l}.hook_resid_post`]);
      else if (M.parallel(cfg)) stages.push([`after block ${l}`, `blocks.${l}.hook_resid_post`]);
      else stages.push([`after attention ${l}`, `blocks.${l}.hook_resid_mid`], [`after MLP ${l}`, `blocks.${l}.hook_resid_post`]);
    }
    let cells = [], shown = "", tips = [];
    grid.addEventListener("mousemove", (e) => {
      const cell = e.target.closest(".lens-cell");
      if (cell) Views.showTip(e, tips[+cell.dataset.s][+cell.dataset.i]); else Views.hideTip();
    });
    grid.addEventListener("mouseleave", Views.hideTip);
    function build(seq) {
      clear(grid);
      grid.style.gridTemplateColumns = `auto repeat(${seq.length}, minmax(52px, 1fr))`;
      grid.appendChild(h("div", {class: "corner"}));
      seq.forEach((t, i) => grid.appendChild(h("div", {class: "col-label"}, h("span", {class: "lab-pos"}, String(i)), h("span", {class: "lab-text"}, word(t)))));
      cells = stages.map(([label, hook], s) => {
        grid.appendChild(h("div", {class: "row-label lens-label"}, label, h("code", {class: "hook"}, hook)));
        return seq.map((_, i) => {
          const tok = h("span", {class: "lens-tok"}), p = h("span", {class: "lens-p"});
          grid.appendChild(h("div", {class: "lens-cell", dataset: {s, i}}, tok, p));
          return {cell: grid.lastChild, tok, p};
        });
      });
    }
    return {el, update(c) {
      const key = c.seq.join(".");
      if (key !== shown) { build(c.seq); shown = key; }
      tips = stages.map(([label, hook], s) => c.run.cache[hook].map((r, i) => {
        const p = M.softmax(M.unembed(c.model, r));
        const order = p.map((_, v) => v).sort((a, b) => p[b] - p[a] || a - b);
        const top = order[0], rgb = Views.sequential(p[top], 1), view = cells[s][i];
        view.cell.style.background = Views.css(rgb);
        view.cell.style.color = Views.inkOn(rgb);
        view.cell.dataset.top = top;
        view.tok.textContent = ctx.wordOut(top);
        view.p.textContent = `${(100 * p[top]).toFixed(0)}%`;
        return [`${label}, position ${i}`, ...order.slice(0, 3).map((v) => `${ctx.wordOut(v)}: ${String(p[v])}`)];
      }));
    }};
  }


  return {circuitsPanel, edgesPanel, compositionPanel, lensPanel, showHeadScores};
};
