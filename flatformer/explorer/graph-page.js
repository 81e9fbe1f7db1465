// The graph page: one attribution graph file (flatformer/graph/files.py) drawn as circuit-tracer
// and Neuronpedia draw it, nodes by block (rows, inputs at the bottom) and prompt position
// (columns), links by weight. Hover a node for its dashboard, click a link for its arithmetic
// (recomputed by graph-model.js from the factors in the file, with the QK attributions of the
// heads it passes through), click a node to pin it; the pinned subgraph is saved as a file and
// loaded back. The self-check recomputes every link and compares it with the file's weight.
//
// Every string from the file goes in as a text node or a property (Views.h), never as HTML.
"use strict";

const GraphPage = (() => {
  const {h, clear, fmt, append} = Views;
  const SVG = "http://www.w3.org/2000/svg";
  const TOL = 1e-9;

  function svg(tag, attrs = {}, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children) node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }
  const num = (key, value, digits = 4) =>
    h("span", {class: "num", dataset: {key, value: String(value)}, title: String(value)}, fmt(value, digits));

  function mount(app, doc) {
    const meta = doc.metadata, F = doc.frozen, tokens = meta.prompt_tokens;
    const L = F.blocks.length, T = tokens.length;
    const byId = new Map(doc.nodes.map((n) => [n.node_id, n]));
    const KIND = {"cross layer transcoder": "feature", "mlp reconstruction error": "error",
      "embedding": "embedding", "logit": "logit"};
    const kindOf = (n) => KIND[n.feature_type] || "feature";
    const word = (p) => Views.cut(String(tokens[p]), FlatConstants.MAX_LABEL);
    function label(n) {
      const k = kindOf(n), p = n.ctx_idx;
      if (k === "feature") return `feature ${n.feature} of block ${n.layer} at ${p} “${word(p)}”`;
      if (k === "error") return `error of block ${n.layer} at ${p} “${word(p)}”`;
      if (k === "logit") return n.clerp;
      return n.node_id.startsWith("P_") ? `position ${p}` : `token “${word(p)}” at ${p}`;
    }
    const state = {pinned: new Set(doc.qParams.pinnedIds || []), supernodes: doc.qParams.supernodes || [], link: null};

    // ---- header and self-check ----
    const banner = h("div", {id: "selfcheck", class: "banner pending", role: "status"}, "Self-check running…");
    function fail(message) {
      banner.className = "banner fail";
      banner.textContent = message;
      window.graphView.failed = message;
    }
    window.graphView = {state};
    window.addEventListener("error", (e) => fail(`Error in the page: ${e.message}`));
    const header = h("section", {class: "top"},
      h("div", {class: "title-row"}, h("h1", {}, "Attribution graph"), h("span", {class: "run-name"}, `${meta.scan} · ${meta.slug}`)),
      h("p", {class: "facts"}, `Prompt “${meta.prompt}”: ${T} tokens; ${doc.nodes.length} nodes and ${doc.links.length} links kept `
        + `(node threshold ${meta.node_threshold}). Hover a node for its dashboard, click a link for its arithmetic, `
        + "click a node to pin it."),
      banner);

    // ---- layout: rows by block (inputs at the bottom, logits on top), columns by position ----
    const rowOf = (n) => (n.layer === "E" ? 0 : kindOf(n) === "logit" ? L + 1 : Number(n.layer) + 1);
    const cells = new Map();
    for (const n of doc.nodes) {
      const key = `${rowOf(n)}:${n.ctx_idx}`;
      if (!cells.has(key)) cells.set(key, []);
      cells.get(key).push(n);
    }
    // Each column as wide as its busiest cell (the logits crowd the last position).
    const colW = Array.from({length: T}, () => 72);
    for (const [key, members] of cells) {
      const p = Number(key.split(":")[1]);
      colW[p] = Math.max(colW[p], members.length * 18 + 12);
    }
    const colX = colW.map((_, p) => colW.slice(0, p).reduce((a, w) => a + w, 70));
    const rowH = 78, top = 22;
    const width = colX[T - 1] + colW[T - 1] + 10, height = top + (L + 2) * rowH + 34;
    const place = new Map();
    for (const [key, members] of cells) {
      const [r, p] = key.split(":").map(Number);
      members.forEach((n, i) => place.set(n.node_id, {
        x: colX[p] + colW[p] / 2 + (i - (members.length - 1) / 2) * 18,
        y: top + (L + 1 - r) * rowH + rowH / 2}));
    }
    const maxW = Math.max(1e-12, ...doc.links.map((l) => Math.abs(l.weight)));
    const plot = svg("svg", {id: "graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": "attribution graph"});
    const rowNames = ["embeddings", ...Array.from({length: L}, (_, l) => `block ${l}`), "logits"];
    rowNames.forEach((name, r) => plot.appendChild(svg("text", {class: "row-name", x: 4,
      y: top + (L + 1 - r) * rowH + rowH / 2 + 4}, name)));
    tokens.forEach((t, p) => plot.appendChild(svg("text", {class: "col-name", x: colX[p] + colW[p] / 2,
      y: height - 10, "text-anchor": "middle"}, `${p} ${Views.cut(String(t), FlatConstants.MAX_LABEL)}`)));
    const linkLayer = svg("g", {class: "links"}), nodeLayer = svg("g", {class: "nodes"});
    plot.append(linkLayer, nodeLayer);
    doc.links.forEach((l, i) => {
      const a = place.get(l.source), b = place.get(l.target);
      const colour = Views.css(Views.diverging(l.weight, maxW));
      const attrs = {x1: a.x, y1: a.y, x2: b.x, y2: b.y};
      linkLayer.append(
        svg("line", {...attrs, class: "link", stroke: colour, "stroke-width": 0.6 + 4 * Math.abs(l.weight) / maxW}),
        svg("line", {...attrs, class: "link-hit", "data-link": i, onclick: () => showLink(i),
          onmousemove: (e) => Views.showTip(e, [`${label(byId.get(l.source))} → ${label(byId.get(l.target))}`,
            `weight ${fmt(l.weight, 4)}`, "click for its arithmetic"]), onmouseleave: Views.hideTip}));
    });
    const marks = new Map();
    for (const n of doc.nodes) {
      const {x, y} = place.get(n.node_id), k = kindOf(n);
      const shape = k === "feature" ? svg("circle", {cx: x, cy: y, r: 6})
        : k === "logit" ? svg("polygon", {points: `${x},${y - 8} ${x + 8},${y} ${x},${y + 8} ${x - 8},${y}`})
        : svg("rect", {x: x - 6, y: y - 6, width: 12, height: 12, rx: k === "error" ? 0 : 3});
      const g = svg("g", {class: `node ${k}`, "data-node": n.node_id, tabindex: 0,
        onmouseenter: () => showNode(n), onfocus: () => showNode(n), onclick: () => togglePin(n.node_id),
        onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); togglePin(n.node_id); } }},
        shape, svg("title", {}, label(n)));
      marks.set(n.node_id, g);
      nodeLayer.appendChild(g);
    }

    // ---- the dashboard of a node ----
    const dash = h("div", {id: "dashboard", class: "card", "aria-live": "polite"},
      h("p", {class: "muted"}, "Hover a node for its dashboard."));
    const nodeName = (id) => (byId.has(id) ? label(byId.get(id)) : id);
    function edgeTable(title, rows, side) {
      return [h("div", {class: "step-title"}, title),
        rows.length ? h("table", {class: side},
          h("tbody", {}, rows.map((l) => h("tr", {},
            h("td", {}, nodeName(side === "inputs" ? l.source : l.target)), h("td", {}, num(`${side}.${l.source}.${l.target}`, l.weight))))))
          : h("p", {class: "muted"}, "none kept")];
    }
    function showNode(n) {
      dash.dataset.node = n.node_id;
      const f = F.nodes[n.node_id], top = (ls) => ls.sort((a, b) => Math.abs(b.weight) - Math.abs(a.weight)).slice(0, 6);
      append(clear(dash), [
        h("h3", {}, label(n)),
        h("table", {class: "facts-table"}, h("tbody", {},
          [["node", n.node_id], ["kind", n.feature_type], ["block", n.layer], ["position", `${n.ctx_idx} “${word(n.ctx_idx)}”`],
           ...(kindOf(n) === "feature" ? [["feature", String(n.feature)]] : [])]
            .map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", {}, v))),
          h("tr", {}, h("td", {}, "activation"), h("td", {}, f && f.write ? num("activation", f.activation) : "—")),
          h("tr", {}, h("td", {}, "influence"), h("td", {}, num("influence", n.influence))),
          kindOf(n) === "logit" ? h("tr", {}, h("td", {}, "probability"), h("td", {}, num("prob", n.token_prob))) : null)),
        kindOf(n) === "feature" && doc.examples && doc.examples[`${n.layer}_${n.feature}`] ? [
          h("div", {class: "step-title"}, "top activations on held-out text"),
          h("table", {class: "examples"}, h("tbody", {}, doc.examples[`${n.layer}_${n.feature}`].map((e, j) => h("tr", {},
            h("td", {}, e.tokens.slice(0, -1).map((t) => Views.cut(String(t), FlatConstants.MAX_LABEL)).join(" "), " ",
              h("b", {}, Views.cut(String(e.tokens[e.tokens.length - 1]), FlatConstants.MAX_LABEL))),
            h("td", {}, num(`example.${j}`, e.activation))))))] : null,
        edgeTable("top inputs", top(doc.links.filter((l) => l.target === n.node_id)), "inputs"),
        edgeTable("top outputs", top(doc.links.filter((l) => l.source === n.node_id)), "outputs")]);
    }

    // ---- the arithmetic of a link ----
    const arith = h("div", {id: "arith", "aria-live": "polite"}, h("p", {class: "muted"}, "Click a link for its arithmetic."));
    const qkOf = new Map((doc.qk || []).map((r) => [`${r.layer}.${r.head}.${r.query_pos}.${r.key_pos}`, r]));
    const hopText = (p) => p.hops.length ? p.hops.map((x) =>
      `head ${x.layer}.${x.head} (${x.key} → ${x.query}, pattern ${fmt(x.pattern, 3)})`).join(" then ") : "direct, in the residual stream";
    function showLink(i) {
      const l = doc.links[i], r = FlatGraph.link(F, l.source, l.target), parts = FlatGraph.linkPaths(F, l.source, l.target);
      arith.dataset.link = String(i);
      state.link = i;
      toHash();
      arith.className = "arith";
      const listed = parts || [];
      const shown = listed.filter((p) => p.value !== 0).slice(0, 8);
      const rest = r.path - shown.reduce((a, p) => a + p.value, 0);
      const hops = new Map();
      for (const p of shown) for (const x of p.hops) hops.set(`${x.layer}.${x.head}.${x.query}.${x.key}`, x);
      const qkRows = [...hops.keys()].filter((k) => qkOf.has(k)).map((k) => qkOf.get(k));
      clear(arith).append(
        h("h3", {}, `Link ${nodeName(l.source)} → ${nodeName(l.target)}`),
        h("p", {class: "eq"}, "weight = activation × path = ", num("activation", r.activation), " × ", num("path", r.path),
          " = ", num("weight", r.weight), h("span", {class: "muted"}, "  (the file: ", num("file", l.weight), ")")),
        byId.get(l.source) && kindOf(byId.get(l.source)) !== "feature"
          ? h("p", {class: "eq small"}, "activation: 1 for a token, a position or an error node, whose write is its whole vector.") : null,
        h("p", {class: "eq small"}, "path: the source's unit write carried by the frozen residual stream and attention "
          + "(patterns and LayerNorm scales at their values on this prompt) to the target, read by its encoder "
          + "(a logit: its unembedding column minus the mean)."),
        h("div", {class: "arith-grid"},
          h("div", {},
            h("div", {class: "step-title"}, parts ? `the path, by the heads it passes (${parts.length})`
              : "the path (too many ways through the heads to list: the total is exact)"),
            h("table", {class: "paths"},
              h("thead", {}, h("tr", {}, h("th", {}, "path"), h("th", {}, "path weight"), h("th", {}, "× activation"))),
              h("tbody", {}, shown.map((p, j) => h("tr", {}, h("td", {}, hopText(p)), h("td", {}, num(`part.${j}`, p.value)),
                h("td", {}, num(`part.${j}.weight`, p.value * r.activation))))),
              h("tfoot", {},
                shown.length < listed.length || !parts ? h("tr", {class: "rest"}, h("td", {}, "the other paths"), h("td", {}, num("rest", rest)), h("td", {})) : null,
                h("tr", {}, h("td", {}, "sum = path"), h("td", {}, num("sum", r.path)), h("td", {}, num("sum.weight", r.weight)))))),
          qkRows.length ? h("div", {class: "qk"}, qkRows.map(qkTable)) : null));
    }
    function qkTable(row) {
      return h("div", {class: "qk-cell"},
        h("div", {class: "step-title"}, `why head ${row.layer}.${row.head} attends from ${row.query_pos} to ${row.key_pos}`),
        h("table", {class: "qk-terms"},
          h("thead", {}, h("tr", {}, h("th", {}, "query side"), h("th", {}, "key side"), h("th", {}, "term"))),
          h("tbody", {}, row.terms.map((t, j) => h("tr", {}, h("td", {}, nodeName(t.query)), h("td", {}, nodeName(t.key)),
            h("td", {}, num(`qk.${j}`, t.value))))),
          h("tfoot", {},
            h("tr", {}, h("td", {colSpan: 2}, "the other terms"), h("td", {}, num("qk.rest", row.rest))),
            h("tr", {}, h("td", {colSpan: 2}, "score = q·k / √d_head"), h("td", {}, num("qk.score", row.score))))),
        h("p", {class: "eq small"}, "pattern after the softmax: ", num("qk.pattern", row.pattern)));
    }

    // ---- pins and subgraphs ----
    const pinList = h("div", {id: "pinned", class: "chips"});
    const message = h("div", {id: "subgraph-msg", class: "msg", role: "status"});
    const download = h("a", {id: "subgraph-download", class: "download", style: {display: "none"}});
    function drawPins() {
      for (const [id, g] of marks) g.classList.toggle("pinned", state.pinned.has(id));
      toHash();
      append(clear(pinList), [state.pinned.size ? [...state.pinned].map((id) =>
        h("span", {class: "chip small", dataset: {pin: id}}, nodeName(id))) : h("span", {class: "muted"}, "no node pinned")]);
    }
    function togglePin(id) {
      if (state.pinned.has(id)) state.pinned.delete(id); else state.pinned.add(id);
      drawPins();
    }
    // The view in the URL's hash, so that a link opens it again: #pinned=ID,ID&link=N.
    function toHash() {
      const parts = [];
      if (state.pinned.size) parts.push(`pinned=${[...state.pinned].map(encodeURIComponent).join(",")}`);
      if (state.link !== null) parts.push(`link=${state.link}`);
      const hash = parts.length ? `#${parts.join("&")}` : "";
      if (location.hash !== hash) history.replaceState(null, "", hash || location.pathname + location.search);
    }
    function fromHash() {
      const params = new URLSearchParams(location.hash.slice(1));
      const pinned = (params.get("pinned") || "").split(",").filter((id) => byId.has(id));
      const link = Number(params.get("link"));
      return {pinned, link: params.has("link") && Number.isInteger(link) && link >= 0 && link < doc.links.length ? link : null};
    }
    // Neuronpedia's subgraph: the fields of its subgraph-save request (/api/graph/subgraph/save);
    // this page has no density threshold, so it says none.
    function subgraph() {
      const order = doc.nodes.map((n) => n.node_id).filter((id) => state.pinned.has(id));
      return {modelId: meta.scan, slug: meta.slug, displayName: `${meta.slug} subgraph`, pinnedIds: order,
        supernodes: state.supernodes, clerps: [], pruningThreshold: meta.node_threshold, densityThreshold: null, overwriteId: ""};
    }
    let url = null;
    function save() {
      if (url) URL.revokeObjectURL(url);
      url = URL.createObjectURL(new Blob([JSON.stringify(subgraph(), null, 1)], {type: "application/json"}));
      download.href = url;
      download.download = `${meta.slug}-subgraph.json`;
      download.textContent = `download ${meta.slug}-subgraph.json (${state.pinned.size} pinned)`;
      download.style.display = "";
    }
    function load(text) {
      let data;
      try { data = JSON.parse(text); } catch (e) { return say(`not JSON: ${e.message}`, true); }
      const strings = (a) => Array.isArray(a) && a.every((x) => typeof x === "string");
      if (!data || typeof data !== "object" || !strings(data.pinnedIds)) return say("not a subgraph: it needs pinnedIds, a list of node ids", true);
      if (data.supernodes !== undefined && !(Array.isArray(data.supernodes) && data.supernodes.every(strings))) {
        return say("not a subgraph: supernodes must be lists of a label and node ids", true);
      }
      const known = data.pinnedIds.filter((id) => byId.has(id)), unknown = data.pinnedIds.length - known.length;
      state.pinned = new Set(known);
      if (data.supernodes) state.supernodes = data.supernodes.map((g) => [g[0], ...g.slice(1).filter((id) => byId.has(id))]);
      drawPins();
      drawSupernodes();
      say(`loaded ${known.length} pinned nodes${unknown ? `; ${unknown} not in this graph, left out` : ""}`
        + (data.slug && data.slug !== meta.slug ? ` (saved from graph “${data.slug}”)` : ""), false);
    }
    function say(text, bad) { message.textContent = text; message.className = bad ? "msg bad" : "msg"; }
    const fileInput = h("input", {type: "file", id: "subgraph-file", accept: ".json,application/json",
      onchange: (e) => { const f = e.target.files[0]; if (f) f.text().then(load); }});
    const superList = h("ul", {id: "supernodes"});
    function drawSupernodes() {
      append(clear(superList), [state.supernodes.length ? state.supernodes.map((g, i) =>
        h("li", {dataset: {group: String(i)}}, h("b", {}, g[0]), ` (${g.length - 1}): `, g.slice(1).map(nodeName).join("; "), " ",
          h("button", {class: "chip-x", title: "ungroup", "aria-label": `ungroup ${g[0]}`,
            onclick: () => { state.supernodes.splice(i, 1); drawSupernodes(); }}, "×")))
        : h("li", {class: "muted"}, "none")]);
    }
    const groupLabel = h("input", {type: "text", id: "group-label", placeholder: "supernode label", maxLength: 80});
    function group() {
      const members = doc.nodes.map((n) => n.node_id).filter((id) => state.pinned.has(id));
      if (members.length < 2) return say("pin two or more nodes to group them", true);
      state.supernodes = [...state.supernodes, [groupLabel.value.trim() || `group ${state.supernodes.length + 1}`, ...members]];
      drawSupernodes();
      say(`grouped ${members.length} nodes`, false);
    }
    const subPanel = h("section", {id: "subgraph", class: "panel"}, h("h2", {}, "Subgraph"),
      h("p", {class: "lead"}, "The pinned nodes and the supernodes, saved as a file in the shape of Neuronpedia's subgraphs "
        + "(pinnedIds, supernodes) and loaded back. Pin nodes and group them to make a supernode of your own."),
      h("div", {class: "sub"}, "pinned"), pinList,
      h("div", {class: "controls"},
        h("button", {id: "subgraph-save", onclick: save}, "Save subgraph"), download,
        h("label", {}, "Load a subgraph ", fileInput),
        h("button", {id: "unpin", onclick: () => { state.pinned.clear(); drawPins(); }}, "Unpin all")),
      h("div", {class: "controls"}, groupLabel, h("button", {id: "group", onclick: group}, "Group the pinned nodes as a supernode")),
      message, h("div", {class: "sub"}, "supernodes"), superList);

    app.append(header,
      h("section", {id: "graph-panel", class: "panel"}, h("h2", {}, "The graph"),
        h("p", {class: "lead"}, "Rows: the embeddings, each block's transcoder features (circles) and error nodes (squares), "
          + "the output logits (diamonds). Columns: the prompt's positions. Links red where positive, blue where negative, "
          + "wider where larger."), h("div", {class: "graph-wrap"}, plot)),
      h("div", {class: "side-by-side"}, h("section", {class: "panel"}, h("h2", {}, "Dashboard"), dash),
        h("section", {class: "panel"}, h("h2", {}, "Arithmetic"), arith)),
      subPanel);
    const linked = fromHash();
    if (linked.pinned.length) state.pinned = new Set(linked.pinned);
    drawPins();
    drawSupernodes();
    if (linked.link !== null) showLink(linked.link);

    // ---- self-check: every link recomputed from the factors against the file's weight ----
    const result = FlatGraph.check(doc);
    result.ok = result.worst < TOL;
    banner.dataset.worst = String(result.worst);
    if (result.ok) {
      banner.className = "banner ok";
      banner.textContent = `Self-check passed: this page recomputes all ${result.n} links from the weights in it (frozen `
        + `patterns and LayerNorm scales, value and output weights, encoder and decoder vectors, activations); worst `
        + `|difference| from Python's weights ${result.worst.toExponential(1)} (must be < 1e-9).`;
    } else {
      fail(`SELF-CHECK FAILED: worst |JS − Python| = ${result.worst} at ${result.where}; must be < 1e-9. Do not trust this page.`);
    }
    Object.assign(window.graphView, {selfCheck: result, showLink, showNode: (id) => showNode(byId.get(id)), togglePin, subgraph, load});
    document.documentElement.dataset.ready = "true";
  }

  return {mount};
})();

{
  const island = document.getElementById("flatformer-data");
  const data = island ? JSON.parse(island.textContent) : null;
  if (data && data.format === "flatformer-graph-1") GraphPage.mount(document.getElementById("app"), data.graph);
}
