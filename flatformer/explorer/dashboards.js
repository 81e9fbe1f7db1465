// The feature dashboards page: a dictionary's latents, sortable by firing frequency or largest
// activation, and for the latent chosen its top activating contexts (the firing token
// highlighted, every token shaded by the latent's activation there), its activation histogram,
// its logit effect and its decoder direction in the plane of the activation it writes.
// Every number comes computed by Python (flatformer/dictionary/dashboards.py); the page draws
// them, and recomputes each activation it shows with the encoder (sae.js) as its self-check.
// One state object ({dict, latent, sort}) is mirrored in the URL hash. Token names are data:
// they reach the page as text nodes and titles only (Views.h), never as HTML.
"use strict";

const Dashboards = (() => {
  const {h, clear, fmt, css, sequential, inkOn, tokenCss} = Views;
  const SORTS = {density: "firing frequency", max: "max activation", index: "index"};
  const TOL = 1e-9;
  let heads = 0;   // arrowhead markers, each with an id of its own

  function mount(app, DATA) {
    const kit = Panels.kit({cfg: {}, vocab: DATA.vocab});
    const {word, svg, num} = kit;
    const outWord = (s) => Views.cut(s, FlatConstants.MAX_LABEL);
    const dicts = DATA.dictionaries;
    const api = {failed: null, ready: false, data: DATA};
    window.dashboards = api;
    const banner = h("div", {id: "selfcheck", class: "banner pending", role: "status"}, "Self-check running…");
    function fail(message) {
      banner.className = "banner fail";
      banner.textContent = message;
      api.failed = message;
    }
    window.addEventListener("error", (e) => fail(`Error in the page: ${e.message}`));

    // ---- state, mirrored in the hash: #dict=NAME&latent=N&sort=KEY ----
    const DEFAULT = {dict: 0, latent: null, sort: "density"};
    function fromHash(hash) {
      const p = new URLSearchParams(hash.replace(/^#/, "")), s = {...DEFAULT};
      const d = dicts.findIndex((x) => x.name === p.get("dict"));
      if (d >= 0) s.dict = d;
      if (SORTS[p.get("sort")]) s.sort = p.get("sort");
      const n = Number(p.get("latent"));
      if (p.has("latent") && Number.isInteger(n) && n >= 0 && n < dicts[s.dict].d_sae) s.latent = n;
      return s;
    }
    const toHash = (s) => "#" + new URLSearchParams({dict: dicts[s.dict].name, sort: s.sort,
      ...(s.latent === null ? {} : {latent: String(s.latent)})}).toString();
    let state = fromHash(location.hash || "");

    function set(change) {
      state = {...state, ...change};
      try { history.replaceState(null, "", toHash(state)); } catch (e) { /* about:srcdoc */ }
      render();
    }
    window.addEventListener("hashchange", () => { state = fromHash(location.hash); render(); });

    // ---- the self-check: every activation shown, recomputed from the weights ----
    function selfCheck() {
      let worst = 0, where = "", count = 0, contexts = 0;
      for (const d of dicts) {
        const inputs = DATA.inputs[d.hook_in], cache = new Map();
        const latentsOf = (w) => {
          if (!cache.has(w)) cache.set(w, inputs[w].map((x) => FlatSAE.encode(d.encoder, x)));
          return cache.get(w);
        };
        for (const lat of d.latents) {
          lat.contexts.forEach((c, n) => {
            const f = latentsOf(c.window);
            contexts += 1;
            c.acts.forEach((want, t) => {
              const diff = Math.abs(f[t][lat.index] - want);
              count += 1;
              if (!(diff <= worst)) { worst = Number.isNaN(diff) ? Infinity : diff; where = `${d.name}, latent ${lat.index}, context ${n}, position ${t}`; }
            });
          });
          if (lat.contexts.length) {   // the largest activation is the top context's
            const top = lat.contexts[0], diff = Math.abs(latentsOf(top.window)[top.pos][lat.index] - lat.max);
            if (!(diff <= worst)) { worst = Number.isNaN(diff) ? Infinity : diff; where = `${d.name}, latent ${lat.index}, its maximum`; }
          }
        }
      }
      const ok = worst < TOL;
      if (ok) {
        banner.className = "banner ok";
        banner.textContent = `Self-check passed: this page's encoders reproduce Python's ${count} activations `
          + `(${contexts} contexts of ${dicts.length} ${dicts.length === 1 ? "dictionary" : "dictionaries"}); `
          + `worst |difference| ${worst.toExponential(1)} (must be < 1e-9).`;
      } else {
        fail(`SELF-CHECK FAILED: worst |JS − Python| = ${worst} at ${where}; must be < 1e-9. Do not trust the numbers on this page.`);
      }
      banner.dataset.worst = String(worst);
      return {ok, worst, activations: count, contexts};
    }

    // ---- the page's frame ----
    const picker = h("select", {id: "dictionary", "aria-label": "dictionary",
      onchange: (e) => set({dict: Number(e.target.value), latent: null})},
      dicts.map((d, i) => h("option", {value: String(i)}, d.name)));
    const facts = h("p", {class: "facts"});
    const sortBar = h("div", {class: "tool", id: "sort"}, h("span", {class: "tool-label"}, "sort by"),
      Object.entries(SORTS).map(([key, label]) => h("button", {dataset: {sort: key}, onclick: () => set({sort: key})}, label)));
    const list = h("div", {class: "latent-list", id: "latents", role: "listbox", "aria-label": "latents"});
    const detail = h("section", {class: "panel latent-detail", id: "latent"});
    app.append(
      h("div", {class: "top"},
        h("div", {class: "title-row"}, h("h1", {}, "Feature dashboards"), h("span", {class: "run-name"}, DATA.title)),
        facts, banner),
      h("div", {class: "toolbar"}, h("label", {class: "tool"}, h("span", {class: "tool-label"}, "dictionary"), picker), sortBar),
      h("div", {class: "dash"}, h("section", {class: "panel latents"}, h("h2", {}, "Latents"), list), detail),
      h("footer", {}, "Every activation shown is recomputed in your browser from the dictionary's encoder and the "
        + "activations carried in this file; nothing is fetched from the network. The address bar holds the view."));

    // ---- the latent list: click a latent, or move through the list with the arrow keys ----
    list.addEventListener("keydown", (e) => {
      if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
      e.preventDefault();
      const order = sorted(dicts[state.dict]).map((l) => l.index), at = order.indexOf(state.latent);
      const next = order[Math.min(order.length - 1, Math.max(0, at + (e.key === "ArrowDown" ? 1 : -1)))];
      set({latent: next});
    });
    function sorted(d) {
      const key = state.sort;
      return [...d.latents].sort((a, b) => (key === "index" ? a.index - b.index : b[key] - a[key] || a.index - b.index));
    }
    function drawList(d) {
      clear(list);
      const top = Math.max(...d.latents.map((l) => l.density), 1e-12);
      for (const lat of sorted(d)) {
        const chosen = lat.index === state.latent;
        list.appendChild(h("button", {class: "latent-row" + (chosen ? " chosen" : "") + (lat.density === 0 ? " dead" : ""),
          role: "option", "aria-selected": String(chosen), dataset: {latent: String(lat.index)},
          tabindex: chosen ? 0 : -1, onclick: () => set({latent: lat.index})},
          h("span", {class: "latent-id"}, `#${lat.index}`),
          h("span", {class: "bar-track"}, h("span", {class: "bar", style: {width: `${100 * lat.density / top}%`, background: "var(--accent)"}})),
          h("span", {class: "latent-num", title: `fires on ${lat.density} of the held-out tokens`}, lat.density === 0 ? "dead" : fmt(lat.density, 2)),
          h("span", {class: "latent-num", title: `largest activation ${lat.max}`}, fmt(lat.max, 3))));
      }
    }

    // ---- one latent ----
    function contextsView(d, lat) {
      if (!lat.contexts.length) return h("p", {class: "muted"}, "This latent never fires on the held-out tokens.");
      return h("div", {class: "contexts"}, lat.contexts.map((c, n) => h("div", {class: "context", dataset: {n: String(n)}},
        h("span", {class: "context-act", title: String(c.acts[c.pos])}, fmt(c.acts[c.pos], 3)),
        DATA.windows[c.window].map((t, i) => {
          const a = c.acts[i], rgb = sequential(a, lat.max || 1), fire = i === c.pos;
          return h("span", {class: "ctx-tok" + (fire ? " firing" : "") + (a > 0 ? " on" : ""),
            style: {background: css(rgb), color: inkOn(rgb)},
            title: `${DATA.vocab[t]} at position ${i}: activation ${a}`, dataset: {act: String(a), pos: String(i)}}, word(t));
        }))));
    }

    // The tokens and positions it fires on most, with each one's share of its firings.
    function firesOn(lat) {
      if (!lat.tokens.length) return null;
      const share = (s) => `${fmt(100 * s, 2)}%`;
      return h("div", {class: "fires-on"},
        h("span", {class: "sub"}, "fires on tokens "),
        lat.tokens.map(([name, s]) => h("span", {class: "chip small", title: `${name}: ${s} of its firings`}, outWord(name), " ", h("span", {class: "chip-pos"}, share(s)))),
        h("span", {class: "sub"}, " at positions "),
        lat.positions.map(([p, s]) => h("span", {class: "chip small", title: `position ${p}: ${s} of its firings`}, String(p), " ", h("span", {class: "chip-pos"}, share(s)))));
    }

    function histogramView(lat) {
      const W = 320, H = 120, pad = 22, {edges, counts} = lat.histogram, top = Math.max(...counts, 1);
      const node = svg("svg", {width: W, height: H + pad, class: "histogram", role: "img",
        "aria-label": "histogram of the latent's nonzero activations"});
      const bw = (W - 2 * pad) / counts.length;
      counts.forEach((c, i) => {
        const bh = c / top * (H - 10);
        const r = svg("rect", {x: pad + i * bw, y: H - bh, width: Math.max(bw - 1, 1), height: bh, fill: "#225ea8", "data-count": c});
        const t = svg("title"); t.textContent = `${fmt(edges[i], 3)} to ${fmt(edges[i + 1], 3)}: ${c} tokens`;
        r.appendChild(t); node.appendChild(r);
      });
      const axis = (x, text, anchor) => { const t = svg("text", {x, y: H + 14, "text-anchor": anchor, "font-size": 11, fill: "#59636e"}); t.textContent = text; return t; };
      const most = svg("text", {x: pad, y: 9, "font-size": 10, fill: "#59636e"});
      most.textContent = `${top} tokens in the tallest bin`;
      node.append(most, svg("line", {x1: pad, x2: W - pad, y1: H, y2: H, stroke: "#8c959f"}),
        axis(pad, fmt(edges[0], 3), "start"), axis(W - pad, fmt(edges[edges.length - 1], 3), "end"));
      return h("figure", {class: "fig"}, h("figcaption", {}, h("span", {class: "fig-title"}, "Activation histogram")), node,
        h("div", {class: "fig-note"}, `nonzero activations on ${fmt(lat.density * 100, 3)}% of the held-out tokens; mean ${fmt(lat.mean, 3)}`));
    }

    function logitsView(d, lat) {
      if (!lat.logits) {
        return h("p", {class: "muted logit-none"}, `${d.hook_out} does not write to the residual stream linearly: no logit effect.`);
      }
      const all = [...lat.logits.boosted, ...lat.logits.suppressed], top = Math.max(...all.map(([, v]) => Math.abs(v)), 1e-12);
      const column = (title, rows, cls) => h("div", {class: "logit-col " + cls}, h("div", {class: "sub"}, title),
        rows.map(([name, v]) => h("div", {class: "bar-row logit", title: `${name}: ${v}`},
          h("span", {class: "bar-label"}, outWord(name)),
          h("span", {class: "bar-track"}, h("span", {class: "bar", style: {width: `${100 * Math.abs(v) / top}%`, background: v >= 0 ? "#2166ac" : "#b2182b"}})),
          h("span", {class: "bar-value"}, fmt(v, 3)))));
      return h("figure", {class: "fig logits"}, h("figcaption", {}, h("span", {class: "fig-title"}, "Logit effect"),
        h("code", {class: "hook"}, "W_dec · W_U")),
        h("div", {class: "logit-cols"}, column("top boosted", lat.logits.boosted, "boosted"), column("top suppressed", lat.logits.suppressed, "suppressed")),
        h("div", {class: "fig-note wide"}, "The decoder direction through the direct path to the unembedding, per unit of activation "
          + `(later blocks left out${d.ln_folded ? "; the final LayerNorm folded in" : ""}).`));
    }

    function planeView(d, lat) {
      const S = 300, pad = 16, P = d.plane, pts = [...P.points, ...lat.arrow, ...(lat.truth ? lat.truth.arrow : [])];
      const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
      const span = Math.max(Math.max(...xs) - Math.min(...xs), Math.max(...ys) - Math.min(...ys), 1e-9) * 1.1;
      const cx = (Math.max(...xs) + Math.min(...xs)) / 2, cy = (Math.max(...ys) + Math.min(...ys)) / 2;
      const X = (x) => pad + (x - cx + span / 2) / span * (S - 2 * pad), Y = (y) => S - pad - (y - cy + span / 2) / span * (S - 2 * pad);
      const node = svg("svg", {width: S, height: S, class: "plane-svg", role: "img", "aria-label": "decoder direction in the plane"});
      node.appendChild(svg("rect", {x: 0, y: 0, width: S, height: S, fill: "#fff", stroke: "#d1d9e0"}));
      P.points.forEach((p, i) => node.appendChild(svg("circle", {cx: X(p[0]), cy: Y(p[1]), r: 2.2, fill: tokenCss(P.tokens[i], 0.45)})));
      const defs = svg("defs");
      node.appendChild(defs);
      const arrow = (a, colour, dash, cls) => {
        const [p, q] = a, g = svg("g", {class: cls}), id = `head-${cls}-${++heads}`;
        const marker = svg("marker", {id, viewBox: "0 0 10 10", refX: 8, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse"});
        marker.appendChild(svg("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: colour}));
        defs.appendChild(marker);
        g.appendChild(svg("circle", {cx: X(p[0]), cy: Y(p[1]), r: 3.5, fill: "#fff", stroke: colour, "stroke-width": 1.5}));
        g.appendChild(svg("line", {x1: X(p[0]), y1: Y(p[1]), x2: X(q[0]), y2: Y(q[1]), stroke: colour, "stroke-width": 2.5,
          "stroke-dasharray": dash, "marker-end": `url(#${id})`}));
        node.appendChild(g);
      };
      if (lat.truth) arrow(lat.truth.arrow, "#1a7f37", "5 3", "truth");
      arrow(lat.arrow, "#b42318", "", "decoder");
      const [lx, ly] = P.labels;
      return h("figure", {class: "fig"}, h("figcaption", {}, h("span", {class: "fig-title"}, "Decoder direction"),
        h("code", {class: "hook"}, d.hook_out), h("span", {class: "shape"}, `${lx}${ly ? " × " + ly : ""}`)), node,
        h("div", {class: "fig-note"}, "red: from b_dec (open circle) to b_dec + max · W_dec, the reconstruction when the latent alone fires at its largest; dots: held-out activations, coloured by token",
          lat.truth ? h("div", {class: "truth-note"}, "green, dashed: the closest true feature, ", h("b", {}, lat.truth.name), ` (|cos| ${fmt(lat.truth.cos, 3)})`) : null));
    }

    function drawDetail(d) {
      clear(detail);
      const lat = d.latents[state.latent];
      if (!lat) { detail.appendChild(h("p", {class: "muted"}, "Choose a latent on the left.")); return; }
      detail.append(
        h("h2", {}, `Latent ${lat.index}`),
        h("p", {class: "lead"}, "fires on ", num("density", lat.density, 3), " of the held-out tokens; largest activation ",
          num("max", lat.max, 4), ` (${d.name}, reading `, h("code", {}, d.hook_in), ")"),
        firesOn(lat),
        h("h3", {}, "Top activations"),
        contextsView(d, lat),
        h("div", {class: "row"}, histogramView(lat), logitsView(d, lat), planeView(d, lat)));
    }

    function render() {
      const d = dicts[state.dict];
      if (state.latent === null || state.latent >= d.d_sae) state = {...state, latent: sorted(d)[0].index};
      picker.value = String(state.dict);
      sortBar.querySelectorAll("button").forEach((b) => b.classList.toggle("on", b.dataset.sort === state.sort));
      const m = d.metrics || {}, parts = [`${d.kind || d.encoder.kind} dictionary of ${d.d_sae} latents on `, h("code", {}, d.hook_in)];
      if (d.hook_out !== d.hook_in) parts.push(" → ", h("code", {}, d.hook_out));
      for (const [key, label] of [["l0", "L0"], ["fvu", "FVU"], ["ce_loss_score", "CE loss recovered"], ["dead", "dead"]]) {
        if (typeof m[key] === "number") parts.push(` · ${label} `, Number.isInteger(m[key]) ? String(m[key]) : num(key, m[key], 3));
      }
      clear(facts); facts.append(...parts);
      const focused = list.contains(document.activeElement);   // kept on the list as it is redrawn
      drawList(d);
      drawDetail(d);
      const chosen = list.querySelector(".latent-row.chosen");
      if (chosen) {
        chosen.scrollIntoView({block: "nearest"});
        if (focused) chosen.focus();
      }
    }

    Object.defineProperty(api, "state", {get: () => ({...state})});
    api.set = set;
    api.selfCheck = selfCheck();
    render();
    api.ready = true;
    document.documentElement.dataset.ready = "true";
    return api;
  }

  return {mount};
})();

{
  const island = document.getElementById("flatformer-data");
  const data = island ? JSON.parse(island.textContent) : null;
  if (data && data.format === "flatformer-dashboards-1") Dashboards.mount(document.getElementById("app"), data);
}
