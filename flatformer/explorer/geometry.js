// The geometry views: the embedding plane, the query-key plane with its score field, and the
// output landscape with each position's e -> z arrow. For d_model = 2 (or d_head = 2) they are
// the model's own coordinates; otherwise the first two principal components, said so on the page
// (FlatMeasures.pca2, readout.plane.fit_plane's definition). `env` gives the config, the vocabulary,
// the engine (M: the page's FlatModel, FlatMeasures and FlatEdges), the memo cache, the page's current state and (modular-addition) each number's key phase; the
// only state kept here is what was last drawn, for `last()`.
"use strict";

const Geometry = {
  create(env) {
    const {Plane} = Views, M = env.M, fmt = Views.fmt, tokenCss = Views.tokenCss;
    const cfg = env.cfg, V = cfg.d_vocab, L = cfg.n_layers, memo = env.memo;
    const word = env.word;  // the page's: a token's name cut for display
    const wordOut = env.wordOut || word;  // an output class's name (the logits' columns)
    const VOut = M.vocabOut(cfg), what = env.nextTokens === false ? "output class" : "next token";
    // A token's colour: its own, or (modular-addition, when asked) a hue for its key phase.
    const colourOf = (v, a = 1) => {
      const kp = env.keyPhase;
      if (!env.state().phase || !kp || v >= kp.phase.length) return tokenCss(v, a);
      return `hsla(${Math.round(360 * kp.phase[v])}, 70%, 45%, ${a})`;
    };
    const clip = (text) => (text.length > 8 ? text.slice(0, 7) + "…" : text);
    const at = (t, i) => `${clip(word(t))}${Views.subscript(i)}`;  // "+₇": token + at position 7
    const lastGeometry = {};

    const planeNote = (plane, what) => (plane.exact ? "" : `First two principal components of ${what}.`);
    // The token+position clouds: every token at every position, or past a few hundred points
    // the figures' choice (readout.points.shown_points), which env.shown names.
    const range = (n) => Array.from({length: n}, (_, i) => i);
    const shownTokens = env.shown ? env.shown.tokens : range(V);
    const shownPositions = env.shown ? env.shown.positions : range(cfg.n_ctx);
    const sumsWhat = env.shown ? "the sums shown" : "all token+position sums";

    const allSums = (model, posOff) => memo(`sums:${model.step}:${posOff}`, () => sumsOf(model, posOff));
    function sumsOf(model, posOff) {
      // rotary positions: no W_pos, e = x at every position (positions turn q and k instead);
      // shortformer ones join q and k's inputs (allQK), not the stream
      const d = cfg.d_model, WE = model.w["embed.W_E"].data, W = model.w["pos_embed.W_pos"], pts = [];
      const WP = W && !posOff && !M.shortformer(cfg) ? W.data : null;
      for (const t of shownPositions) {
        for (const v of shownTokens) {
          pts.push({v, t, e: Array.from({length: d}, (_, i) => WE[v * d + i] + (WP ? WP[t * d + i] : 0))});
        }
      }
      return pts;
    }

    function drawEmbedPlanes(c, planes) {
      const state = env.state();
      const w = c.model.w, d = cfg.d_model;
      const tokens = Array.from({length: V}, (_, v) => Array.from(w["embed.W_E"].data.subarray(v * d, v * d + d)));
      const positions = planes.positions ? Array.from({length: cfg.n_ctx}, (_, t) => Array.from(w["pos_embed.W_pos"].data.subarray(t * d, t * d + d))) : null;
      const sums = allSums(c.model, state.pos);
      const geometry = {step: state.step};
      {
        const pl = planes.tokens, plane = M.pca2(tokens), xy = tokens.map((x) => M.projectPlane(plane, x));
        pl.begin(Plane.bounds(xy)); pl.axes();
        xy.forEach(([x, y], v) => pl.point({x, y, r: 4.5, fill: colourOf(v), stroke: "#fff", label: clip(word(v)), tip: [`token ${word(v)}`, `W_E[${v}] = (${tokens[v].map(String).join(", ")})`]}));
        pl.setNote(planeNote(plane, "the token vectors") + (state.phase && env.keyPhase ? ` Hue: each number's phase at key frequency ${env.keyPhase.frequency}.` : ""));
        geometry.tokens = xy;
        geometry.tokenColours = xy.map((_, v) => colourOf(v));
      }
      if (positions) {
        const pl = planes.positions, plane = M.pca2(positions), xy = positions.map((x) => M.projectPlane(plane, x));
        pl.begin(Plane.bounds(xy)); pl.axes();
        pl.line(xy, "rgba(89,99,110,0.6)", 1.2);
        xy.forEach(([x, y], t) => pl.point({x, y, r: 4, shape: "square", fill: t < c.T ? "#1f2328" : "#8c959f", label: `p${Views.subscript(t)}`, tip: [`position ${t}`, `W_pos[${t}] = (${positions[t].map(String).join(", ")})`]}));
        pl.setNote(planeNote(plane, "the position vectors") + (state.pos ? " Positions are switched off: e = x." : ""));
        geometry.positions = xy;
      }
      {
        const pl = planes.sums, plane = M.pca2(sums.map((s) => s.e));
        const xy = sums.map((s) => M.projectPlane(plane, s.e));
        const seqXY = c.run.cache["blocks.0.hook_resid_pre"].map((e) => M.projectPlane(plane, e));
        pl.begin(Plane.bounds(xy.concat(seqXY))); pl.axes();
        // Each token's first and last position are labelled; hover any point for its numbers.
        const labelled = (s) => V <= 40 && (s.t === 0 || s.t === cfg.n_ctx - 1);
        sums.forEach((s, i) => pl.point({x: xy[i][0], y: xy[i][1], r: 2.6, fill: colourOf(s.v, 0.55),
          label: labelled(s) ? at(s.v, s.t) : null, labelColour: colourOf(s.v, 0.95),
          tip: [`${word(s.v)} at position ${s.t}`, `e = (${s.e.map((x) => fmt(x, 4)).join(", ")})`]}));
        pl.line(seqXY, "rgba(31,35,40,0.55)", 1.2, [4, 3]);
        seqXY.forEach(([x, y], i) => pl.point({x, y, r: 5.5, fill: tokenCss(c.seq[i]), stroke: "#1f2328", lineWidth: 1.5,
          label: at(c.seq[i], i), bold: true, tip: [`position ${i}: ${word(c.seq[i])}`, `e = (${c.run.cache["blocks.0.hook_resid_pre"][i].map(String).join(", ")})`]}));
        pl.setNote(`${planeNote(plane, sumsWhat)}${env.shown ? ` Shown: ${env.shown.note}.` : ""} Label “${at(c.seq[c.T - 1], c.T - 1)}” = token ${word(c.seq[c.T - 1])} at position ${c.T - 1}. Large dots joined by the dashed path: this sequence.`);
        geometry.sums = xy;
        geometry.sequence = seqXY;
      }
      lastGeometry.embed = geometry;
    }

    function allQK(model, l, hd, posOff) {
      return memo(`qk:${model.step}:${l}:${hd}:${posOff}`, () => {
        const pts = allSums(model, posOff), WP = M.shortformer(cfg) ? model.w["pos_embed.W_pos"].data : null;
        return pts.map((s) => {
          let a = M.attnInput(model, 0, s.e);
          if (M.shortformer(cfg) && !posOff) a = a.map((x, i) => x + WP[s.t * cfg.d_model + i]);
          return {v: s.v, t: s.t, q: M.turn(cfg, M.project(model, 0, "Q", a, hd), s.t),
            k: M.turn(cfg, M.project(model, 0, "K", a, hd), s.t)};
        });
      });
    }

    function drawQK(pl, c, l, hd, qi) {
      const state = env.state();
      const b = `blocks.${l}.attn.`, cache = c.run.cache, dh = cfg.d_head;
      const turned = M.rotary(cfg) ? "rot_" : "";  // the q and k the scores are made of
      const kv = Math.floor(hd / (cfg.n_heads / M.kvHeads(cfg)));   // the head's group's keys
      const keys = cache[b + `hook_${turned}k`].map((r) => r[kv]), queries = cache[b + `hook_${turned}q`].map((r) => r[hd]);
      const q = queries[qi];
      const backdrop = l === 0 ? allQK(c.model, l, hd, state.pos) : null;
      const cloud = backdrop ? backdrop.flatMap((p) => [p.q, p.k]) : keys.concat(queries);
      const plane = memo(`qkplane:${state.step}:${l}:${hd}:${state.pos}:${backdrop ? "" : c.seq.join(".")}`, () => M.pca2(cloud));
      const P = (x) => M.projectPlane(plane, x);
      const seqK = keys.map(P), seqQ = queries.map(P);
      // The view frames the keys (their differences are what the softmax sees); a query outside
      // it is drawn at the border, on the line from the view's centre towards it.
      const bounds = Plane.bounds((backdrop ? backdrop.map((p) => P(p.k)) : []).concat(seqK), 0.12);
      pl.begin(bounds);
      // The dot-product field of the selected query: score(x) = beta * q·x / sqrt(d_head), which
      // is linear along the plane: score = s0 + sx * x + sy * y.
      const dotq = (u) => u.reduce((s, v, i) => s + v * q[i], 0) * state.beta / Math.sqrt(dh);
      const s0 = dotq(plane.mean), sx = dotq(plane.axes[0]), sy = dotq(plane.axes[1]);
      const score = (x, y) => s0 + sx * x + sy * y;
      const corner = [[bounds.x0, bounds.y0], [bounds.x0, bounds.y1], [bounds.x1, bounds.y0], [bounds.x1, bounds.y1]];
      const limit = Math.max(...corner.map(([x, y]) => Math.abs(score(x, y))), 1e-9);
      const G = 72, img = new ImageData(G, G), LUT = Views.DIVERGING_LUT;
      for (let r = 0; r < G; r++) {
        const y = bounds.y1 - (r + 0.5) / G * (bounds.y1 - bounds.y0);
        for (let cc = 0; cc < G; cc++) {
          const x = bounds.x0 + (cc + 0.5) / G * (bounds.x1 - bounds.x0);
          const rgb = LUT[Math.round(127.5 + 127.5 * score(x, y) / limit)], o = 4 * (r * G + cc);
          img.data[o] = 255 - 0.6 * (255 - rgb[0]); img.data[o + 1] = 255 - 0.6 * (255 - rgb[1]);
          img.data[o + 2] = 255 - 0.6 * (255 - rgb[2]); img.data[o + 3] = 255;
        }
      }
      pl.image(img);
      pl.axes();
      pl.describe = (x, y) => [`score of query ${qi} with a key here`, String(score(x, y))];
      if (backdrop) {
        backdrop.forEach((p) => {
          const [kx, ky] = P(p.k), [qx, qy] = P(p.q);
          pl.point({x: kx, y: ky, r: 1.8, fill: "rgba(178,24,43,0.35)"});
          pl.point({x: qx, y: qy, r: 1.8, fill: "rgba(33,102,172,0.35)"});
        });
      }
      const [lo, hi] = M.keysOf(cfg, l, qi, c.T);
      seqK.forEach(([x, y], j) => {
        const masked = j < lo || j > hi;
        pl.point({x, y, r: 5, fill: masked ? "#c4c9cf" : "#b2182b", stroke: masked ? "#8c959f" : "#fff",
          label: `k ${at(c.seq[j], j)}`, labelColour: masked ? "#8c959f" : "#7a0f1d",
          tip: [`key ${j} (${word(c.seq[j])})${masked ? ": masked for this query" : ""}`,
            `score ${masked ? "−∞ (masked)" : String(cache[b + "hook_attn_scores"][hd][qi][j])}`,
            `weight ${String(cache[b + "hook_pattern"][hd][qi][j])}`]});
      });
      const [qx, qy] = seqQ[qi];
      const cx = (bounds.x0 + bounds.x1) / 2, cy = (bounds.y0 + bounds.y1) / 2, half = (bounds.x1 - bounds.x0) / 2;
      const reach = Math.max(Math.abs(qx - cx), Math.abs(qy - cy)) / (0.94 * half);
      const inside = reach <= 1, [dx, dy] = inside ? [qx, qy] : [cx + (qx - cx) / reach, cy + (qy - cy) / reach];
      if (!inside) pl.arrow([cx + (dx - cx) * 0.7, cy + (dy - cy) * 0.7], [dx, dy], "#2166ac", 2);
      pl.point({x: dx, y: dy, r: 6.5, shape: "diamond", fill: "#2166ac", stroke: "#fff", lineWidth: 1.5,
        label: `q ${at(c.seq[qi], qi)}${inside ? "" : " (outside: ×" + reach.toFixed(1) + ")"}`, labelColour: "#173f6b", bold: true,
        tip: [`query ${qi} (${word(c.seq[qi])})`, `q = (${q.map(String).join(", ")})`, inside ? "" : "drawn at the border: it lies outside the keys' frame"]});
      pl.el.querySelector(".fig-title").textContent = `query–key plane · head ${l}.${hd} · query ${qi} (${word(c.seq[qi])})`;
      pl.setNote("");
      const note = document.getElementById(`qk-note-${l}`);
      if (note) {
        note.textContent = `Background: the score the selected query (blue diamond) would give a key at each point of the plane (red = high score, blue = low; the softmax favours red). `
          + (M.causalOf(cfg) || M.windowOf(cfg, l) ? `Red dots: this sequence's keys, gray where the ${M.windowOf(cfg, l) ? "local window" : "causal mask"} hides them from the query. `
            : "Red dots: this sequence's keys, every one of them read by the query (this model attends both ways). ")
          + (backdrop ? "Faint dots: queries (blue) and keys (red) of every token at every position. " : "")
          + (plane.exact ? "d_head = 2: this is the whole key space." : "d_head > 2: the plane of the first two principal components of the points shown; the field is the score along that plane.")
          + " Click a cell in the attention maps to choose another query.";
      }
      lastGeometry.qk = {layer: l, head: hd, query: qi, keys: seqK, q: [qx, qy], masked: seqK.map((_, j) => j < lo || j > hi)};
    }

    // The landscape's pictures: argmax colours (paler where less sure) and entropy.
    function landscapeImages(grid) {
      const G = grid.G, lnV = Math.log(VOut), a = new ImageData(G, G), e = new ImageData(G, G);
      const LUT = Views.SEQUENTIAL_LUT;
      for (let i = 0; i < G * G; i++) {
        const v = grid.argmax[i], conf = 1 - grid.entropy[i] / lnV;
        const rgb = Views.tokenColour(v), mix = 0.3 + 0.6 * Math.max(0, conf), o = 4 * i;
        a.data[o] = 255 - mix * (255 - rgb[0]); a.data[o + 1] = 255 - mix * (255 - rgb[1]);
        a.data[o + 2] = 255 - mix * (255 - rgb[2]); a.data[o + 3] = 255;
        const h2 = LUT[Math.max(0, Math.min(255, Math.round(255 * grid.entropy[i] / lnV)))];
        e.data[o] = h2[0]; e.data[o + 1] = h2[1]; e.data[o + 2] = h2[2]; e.data[o + 3] = 255;
      }
      return {grid, imgA: Views.toCanvas(a), imgH: Views.toCanvas(e), labels: regionLabels(grid.argmax, G)};
    }

    // Where to write each token's name: the pixel of its zone farthest from the zone's edge
    // (a two-pass chamfer distance transform), so the label sits inside even a curved zone.
    function regionLabels(argmax, G) {
      const dist = new Float64Array(G * G);
      const at2 = (r, c) => argmax[r * G + c];
      for (let r = 0; r < G; r++) {
        for (let c = 0; c < G; c++) {
          const edge = r === 0 || c === 0 || r === G - 1 || c === G - 1 || at2(r - 1, c) !== at2(r, c)
            || at2(r + 1, c) !== at2(r, c) || at2(r, c - 1) !== at2(r, c) || at2(r, c + 1) !== at2(r, c);
          dist[r * G + c] = edge ? 0 : Infinity;
        }
      }
      for (let r = 1; r < G; r++) for (let c = 1; c < G - 1; c++) {
        const i = r * G + c;
        dist[i] = Math.min(dist[i], dist[i - G] + 1, dist[i - 1] + 1, dist[i - G - 1] + 1.41, dist[i - G + 1] + 1.41);
      }
      for (let r = G - 2; r >= 0; r--) for (let c = G - 2; c > 0; c--) {
        const i = r * G + c;
        dist[i] = Math.min(dist[i], dist[i + G] + 1, dist[i + 1] + 1, dist[i + G + 1] + 1.41, dist[i + G - 1] + 1.41);
      }
      const best = new Map();
      for (let i = 0; i < G * G; i++) {
        const v = argmax[i], b = best.get(v);
        if (!b || dist[i] > b.d) best.set(v, {d: dist[i], col: i % G, row: Math.floor(i / G)});
      }
      return [...best].filter(([, b]) => b.d >= 3).map(([v, b]) => ({v, col: b.col, row: b.row}));
    }

    function drawLandscape(planes, c) {
      const state = env.state();
      const l = L - 1, b = `blocks.${l}.`, cache = c.run.cache, mlpOn = !state.mlp.includes(l);
      const sums = allSums(c.model, state.pos);
      const plane = memo(`sumplane:${state.step}:${state.pos}`, () => M.pca2(sums.map((s) => s.e)));
      const P = (x) => M.projectPlane(plane, x);
      const E = cache[b + "hook_resid_pre"].map(P), Z = cache[b + "hook_resid_mid"].map(P);
      const cloud = l === 0 && !state.zoom ? sums.map((s) => P(s.e)) : [];
      const raw = Plane.bounds(cloud.concat(E, Z), 0.1);
      // Snap the bounds outward to a coarse grid so small moves of the arrows reuse the image.
      const unit = Math.pow(2, Math.ceil(Math.log2((raw.x1 - raw.x0) / 8)));
      const bounds = {x0: Math.floor(raw.x0 / unit) * unit, y0: Math.floor(raw.y0 / unit) * unit};
      const span = Math.max(Math.ceil(raw.x1 / unit) * unit - bounds.x0, Math.ceil(raw.y1 / unit) * unit - bounds.y0);
      bounds.x1 = bounds.x0 + span; bounds.y1 = bounds.y0 + span;
      const G = cfg.d_model <= 4 ? 160 : 90;
      const {grid, imgA, imgH, labels} = memo(`land:${state.step}:${mlpOn}:${state.pos}:${bounds.x0}:${bounds.y0}:${span}`,
        () => landscapeImages(M.outputGrid(c.model, plane, bounds, G, mlpOn)));
      const toXY = (px, py) => [bounds.x0 + (px + 0.5) / G * span, bounds.y1 - (py + 0.5) / G * span];
      for (const [kind, pl, img] of [["argmax", planes.argmax, imgA], ["entropy", planes.entropy, imgH]]) {
        pl.begin(bounds);
        pl.image(img);
        pl.axes();
        pl.describe = (x, y) => {
          const col = Math.min(G - 1, Math.max(0, Math.floor((x - bounds.x0) / span * G)));
          const r = Math.min(G - 1, Math.max(0, Math.floor((bounds.y1 - y) / span * G)));
          return [`(${fmt(x, 3)}, ${fmt(y, 3)})`, `most likely: ${wordOut(grid.argmax[r * G + col])}`, `entropy ${fmt(grid.entropy[r * G + col], 3)} nats`];
        };
        if (kind === "argmax") {
          const ctx = pl.ctx;
          ctx.font = "600 12px system-ui, sans-serif";
          ctx.textAlign = "center";
          ctx.textBaseline = "middle";
          ctx.lineWidth = 3;
          ctx.strokeStyle = "rgba(255,255,255,0.8)";
          ctx.fillStyle = "rgba(31,35,40,0.8)";
          for (const {v, col, row: r} of labels) {
            const [x, y] = toXY(col, r);
            ctx.strokeText(clip(wordOut(v)), pl.sx(x), pl.sy(y));
            ctx.fillText(clip(wordOut(v)), pl.sx(x), pl.sy(y));
          }
          ctx.textBaseline = "alphabetic";
        }
        E.forEach((e, i) => {
          const last = i === c.T - 1, col = last ? "#1f2328" : "rgba(31,35,40,0.55)";
          pl.point({x: e[0], y: e[1], r: 3, fill: "#fff", stroke: col});
          pl.arrow(e, Z[i], col, last ? 2.2 : 1.2);
          const p = M.softmax(c.run.logits[i]), top = p.indexOf(Math.max(...p));
          pl.point({x: Z[i][0], y: Z[i][1], r: last ? 4 : 2.5, fill: col, label: at(c.seq[i], i), bold: last,
            tip: [`position ${i} (${word(c.seq[i])})`, `e → z: the attention moves it here`, `${env.nextTokens === false ? "outputs" : "predicts"} ${wordOut(top)} (${(100 * p[top]).toFixed(1)}%)`]});
        });
      }
      const note = document.getElementById("landscape-note");
      note.textContent = (plane.exact
        ? `The output network (${mlpOn ? "z + MLP(z), then" : "MLP off: just"} the unembedding) maps every point of the plane to a${env.nextTokens === false ? "n output" : " next-token"} distribution: left, its most likely ${what} (paler = less sure); right, its entropy (white = certain, dark = ln ${VOut} = uniform). `
        : `A slice of the output network along the first two principal components of the token+position sums (through their mean): left, the most likely ${what}; right, the entropy. `)
        + `Arrows: each position's e (circle) moved by attention to z (dot); the bold arrow is the last position, whose z decides ${env.nextTokens === false ? "its output" : "the next token"}.`;
      lastGeometry.landscape = {bounds, E, Z};
    }

    return {embedPlanes: drawEmbedPlanes, qkPlane: drawQK, landscape: drawLandscape,
            last: () => JSON.parse(JSON.stringify(lastGeometry))};
  },
};
