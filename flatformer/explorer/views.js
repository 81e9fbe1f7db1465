// Reusable views for the explorer page: safe DOM building, colour maps, a heatmap, a canvas
// plane for geometry, a tooltip. Views only draw what they are given; page.js and geometry.js
// compute.
//
// Every string that may come from a user's vocabulary goes into the page as a text node or a
// property (textContent, title), never as HTML.
"use strict";

const Views = (() => {
  // ---- DOM ----
  // h("div", {class: "x", onclick: f, dataset: {k: 1}}, "text", child, [more]) -> element
  function h(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "style") Object.assign(node.style, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key in node && key !== "list") node[key] = value;
      else node.setAttribute(key, String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  // ---- numbers ----
  function fmt(x, digits = 3) {
    if (x === -Infinity) return "−∞";
    if (x === Infinity) return "∞";
    if (Number.isNaN(x)) return "NaN";
    if (x === 0) return "0";
    const a = Math.abs(x);
    if (a >= 1e4 || a < 1e-3) return x.toExponential(Math.max(digits - 2, 1)).replace("-", "−");
    const s = x.toFixed(Math.max(0, digits - 1 - Math.floor(Math.log10(a))));
    return s.replace("-", "−");
  }

  // Short cell text: at most 4 characters where possible.
  function short(x) {
    if (!Number.isFinite(x)) return fmt(x);
    const a = Math.abs(x);
    if (a >= 99.5) return fmt(x, 2);
    if (a >= 9.95) return x.toFixed(0).replace("-", "−");
    if (a >= 0.995) return x.toFixed(1).replace("-", "−");
    return x.toFixed(2).replace(/^(-?)0\./, "$1.").replace("-", "−");
  }

  // ---- colours ----
  const hex = (s) => [1, 3, 5].map((i) => parseInt(s.slice(i, i + 2), 16));
  function ramp(stops) {
    const rgb = stops.map(hex);
    return (t) => {
      t = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0)) * (rgb.length - 1);
      const i = Math.min(rgb.length - 2, Math.floor(t)), f = t - i;
      return rgb[i].map((c, k) => Math.round(c + f * (rgb[i + 1][k] - c)));
    };
  }
  // ColorBrewer RdBu (reversed: blue negative, red positive), a colour-blind-safe diverging map.
  const divergingRamp = ramp(["#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
                              "#fddbc7", "#f4a582", "#d6604d", "#b2182b"]);
  // ColorBrewer YlGnBu from white: probabilities and attention weights.
  const sequentialRamp = ramp(["#ffffff", "#edf8b1", "#c7e9b4", "#7fcdbb", "#41b6c4",
                               "#1d91c0", "#225ea8", "#0c2c84"]);
  const diverging = (x, limit) => divergingRamp(0.5 + 0.5 * x / (limit || 1));
  const sequential = (x, limit = 1) => sequentialRamp(x / (limit || 1));
  const css = (rgb) => `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
  const inkOn = (rgb) => (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 140 ? "#fff" : "#1f2328");

  // Token colours: matplotlib's tab10 plus indigo and maroon, then evenly spaced hues.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                   "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#843c39"];
  const colourCache = [];
  const tokenColour = (i) => colourCache[i] || (colourCache[i] = makeColour(i));
  function makeColour(i) {
    if (i < PALETTE.length) return hex(PALETTE[i]);
    const hue = (i * 137.508) % 360, s = 0.55, l = 0.5;
    const k = (n) => (n + hue / 30) % 12, a = s * Math.min(l, 1 - l);
    const f = (n) => l - a * Math.max(-1, Math.min(k(n) - 3, 9 - k(n), 1));
    return [f(0), f(8), f(4)].map((v) => Math.round(v * 255));
  }

  const tokenCss = (v, a = 1) => { const c = tokenColour(v); return `rgba(${c[0]},${c[1]},${c[2]},${a})`; };

  // ---- tooltip: one for the page ----
  let tip = null;
  function tooltip() {
    if (!tip) {
      tip = h("div", {class: "tooltip", role: "tooltip"});
      document.body.appendChild(tip);
    }
    return tip;
  }
  function showTip(event, lines) {
    const t = tooltip();
    clear(t);
    lines.forEach((line, i) => t.appendChild(h("div", {class: i ? "" : "tip-head"}, line)));
    t.style.display = "block";
    const pad = 14, w = t.offsetWidth, hgt = t.offsetHeight;
    let x = event.clientX + pad, y = event.clientY + pad;
    if (x + w > window.innerWidth - 4) x = event.clientX - w - pad;
    if (y + hgt > window.innerHeight - 4) y = event.clientY - hgt - pad;
    t.style.left = `${Math.max(4, x)}px`;
    t.style.top = `${Math.max(4, y)}px`;
  }
  function hideTip() { if (tip) tip.style.display = "none"; }

  // ---- figure frame: a title, the hook name and its shape ----
  function figure(title, hook, shape, axes) {
    const node = h("figure", {class: "fig", dataset: hook ? {hook} : {}},
      h("figcaption", {},
        h("span", {class: "fig-title"}, title),
        hook ? h("code", {class: "hook"}, hook) : null,
        shape ? h("span", {class: "shape", title: axes || ""}, `[${shape.join(", ")}]`) : null));
    return node;
  }

  // ---- labels: a plain string, or {text, pos} for a token at a position ----
  const SUB = "₀₁₂₃₄₅₆₇₈₉";
  const subscript = (n) => String(n).split("").map((ch) => SUB[+ch]).join("");
  const labelText = (l) => (typeof l === "string" ? l : `${l.text} at position ${l.pos}`);
  const labelKey = (l) => (typeof l === "string" ? l : `${l.pos}:${l.text}`);
  function labelNode(label, cls, style) {
    if (typeof label === "string") return h("div", {class: cls, title: label, style}, h("span", {class: "lab-text"}, label));
    return h("div", {class: cls, title: labelText(label), style},
      h("span", {class: "lab-pos"}, String(label.pos)), h("span", {class: "lab-text"}, label.text));
  }

  // ---- Heatmap: labels in the DOM (text, never HTML), cells drawn on one canvas ----
  // A canvas keeps a re-render cheap: a few hundred rectangles instead of a few hundred styled
  // elements for the browser to lay out. The canvas carries data-cell and data-gap so a test
  // (or a user script) can find cell (i, j) at x = j * (cell + gap), y = i * (cell + gap).
  const GAP = 1;
  let hatch = null;
  function makeHatch(ctx) {
    const c = document.createElement("canvas");
    c.width = 6; c.height = 6;
    const g = c.getContext("2d");
    g.fillStyle = "#f3f4f6"; g.fillRect(0, 0, 6, 6);
    g.strokeStyle = "#dde0e4"; g.lineWidth = 1.5;
    g.beginPath(); g.moveTo(0, 6); g.lineTo(6, 0); g.stroke();
    return ctx.createPattern(c, "repeat");
  }
  function sameValues(A, B) {
    if (!B || A.length !== B.length) return false;
    for (let i = 0; i < A.length; i++) {
      if (A[i].length !== B[i].length) return false;
      for (let j = 0; j < A[i].length; j++) if (!Object.is(A[i][j], B[i][j])) return false;
    }
    return true;
  }
  class Heatmap {
    // opts: title, hook, kind ("diverging" | "sequential"), cell (px), values (show numbers),
    // causal (mask j > i), onClick(i, j), describe(i, j, value) -> tooltip lines
    constructor(opts) {
      this.opts = Object.assign({kind: "diverging", cell: 18, values: false}, opts);
      this.el = figure(opts.title, opts.hook, null);
      this.shapeEl = h("span", {class: "shape"});
      this.el.firstChild.appendChild(this.shapeEl);
      this.colLabels = h("div", {class: "col-labels"});
      this.rowLabels = h("div", {class: "row-labels"});
      this.canvas = h("canvas", {class: "heatmap" + (opts.onClick ? " clickable" : ""),
        dataset: {cell: this.opts.cell, gap: GAP}, role: "img", "aria-label": opts.title});
      this.grid = h("div", {class: "heatgrid"}, h("div"), this.colLabels, this.rowLabels, this.canvas);
      this.legend = h("div", {class: "legend"});
      this.el.append(this.grid, this.legend);
      if (opts.note) this.el.appendChild(h("div", {class: "fig-note"}, opts.note));
      this.key = "";
      this.canvas.addEventListener("mousemove", (e) => this.hover(e));
      this.canvas.addEventListener("mouseleave", hideTip);
      this.canvas.addEventListener("click", (e) => {
        const at = this.cellAt(e);
        if (at && this.opts.onClick && !this.isMasked(at[0], at[1])) this.opts.onClick(at[0], at[1]);
      });
      if (opts.onClick) {
        // Keyboard: focus the map (Tab), then the arrow keys walk the selection cell by cell.
        this.canvas.tabIndex = 0;
        this.canvas.addEventListener("keydown", (e) => {
          const move = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]}[e.key];
          if (!move || !this.M) return;
          e.preventDefault();
          const [i0, j0] = this.selected || [this.M.length - 1, 0];
          const i = Math.max(0, Math.min(this.M.length - 1, i0 + move[0]));
          const j = Math.max(0, Math.min(this.M[0].length - 1, j0 + move[1]));
          if (!this.isMasked(i, j)) this.opts.onClick(i, j);
        });
      }
    }

    cellAt(event) {
      const step = this.opts.cell + GAP;
      const i = Math.floor(event.offsetY / step), j = Math.floor(event.offsetX / step);
      if (!this.M || i < 0 || j < 0 || i >= this.M.length || j >= this.M[0].length) return null;
      return [i, j];
    }

    isMasked(i, j) { return this.M[i][j] === -Infinity || (this.opts.causal && j > i); }

    hover(event) {
      const at = this.cellAt(event);
      if (!at) return hideTip();
      const [i, j] = at, v = this.M[i][j];
      const lines = this.opts.describe ? this.opts.describe(i, j, this.isMasked(i, j) ? -Infinity : v)
        : [`${labelText(this.rows[i])} · ${labelText(this.cols[j])}`, `value ${String(v)}`];
      showTip(event, lines);
    }

    // M: [rows][cols] numbers (-Infinity draws as masked); rows/cols: labels.
    update(M, rows, cols, {limit, shape, axes, selected, dim} = {}) {
      this.M = M; this.rows = rows; this.cols = cols; this.selected = selected;
      const key = rows.map(labelKey).join("\u0000") + "\u0001" + cols.map(labelKey).join("\u0000");
      if (key !== this.key) this.build(rows, cols);
      this.key = key;
      if (shape) {
        this.shapeEl.textContent = `[${shape.join(", ")}]`;
        this.shapeEl.title = axes || "";
      }
      const seq = this.opts.kind === "sequential";
      if (limit === undefined) {
        limit = 0;
        for (const row of M) for (const v of row) if (Number.isFinite(v)) limit = Math.max(limit, Math.abs(v));
        if (seq && this.opts.unit) limit = 1;
      }
      limit = limit || 1;
      this.el.classList.toggle("dim", !!dim);
      // Most knob changes leave many maps as they were: those are not drawn again.
      const stamp = `${limit}|${selected ? selected.join(".") : ""}|${M.length}x${M[0].length}`;
      if (key === this.drawnKey && stamp === this.stamp && sameValues(M, this.drawn)) return;
      this.drawnKey = key; this.stamp = stamp; this.drawn = M.map((r) => Array.from(r));
      this.draw(M, limit, seq, selected);
      this.drawLegend(limit, seq);
    }

    build(rows, cols) {
      const cell = this.opts.cell, step = cell + GAP;
      const every = cell < 20 ? 4 : 1;   // narrow cells: label every fourth column only
      clear(this.colLabels);
      clear(this.rowLabels);
      cols.forEach((label, j) => {
        if (j % every) return;
        const span = Math.min(every, cols.length - j) * step;
        this.colLabels.appendChild(labelNode(label, "col-label" + (every > 1 ? " left" : ""), {width: `${span}px`}));
      });
      rows.forEach((label) => this.rowLabels.appendChild(labelNode(label, "row-label", {height: `${step}px`})));
      const dpr = window.devicePixelRatio || 1, w = cols.length * step - GAP, hgt = rows.length * step - GAP;
      this.canvas.width = Math.round(w * dpr); this.canvas.height = Math.round(hgt * dpr);
      this.canvas.style.width = `${w}px`; this.canvas.style.height = `${hgt}px`;
      this.ctx = this.canvas.getContext("2d");
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    }

    // Cells as one pixel each in a tiny image, scaled up without smoothing; then the gaps,
    // the masked cells, the numbers and the selection on top.
    draw(M, limit, seq, selected) {
      const ctx = this.ctx, cell = this.opts.cell, step = cell + GAP;
      const rows = M.length, cols = M[0].length, LUT = seq ? SEQUENTIAL_LUT : DIVERGING_LUT;
      if (!this.pixels || this.pixels.width !== cols || this.pixels.height !== rows) {
        this.pixels = new ImageData(cols, rows);
        this.tiny = document.createElement("canvas");
        this.tiny.width = cols; this.tiny.height = rows;
        this.tinyCtx = this.tiny.getContext("2d");
      }
      const data = this.pixels.data, index = new Array(rows * cols);
      for (let i = 0; i < rows; i++) {
        for (let j = 0; j < cols; j++) {
          const v = M[i][j];
          const t = seq ? v / limit : 0.5 + 0.5 * v / limit;
          const k = Number.isFinite(t) ? Math.max(0, Math.min(255, Math.round(255 * t))) : 0;
          const rgb = LUT[k], o = 4 * (i * cols + j);
          index[i * cols + j] = k;
          data[o] = rgb[0]; data[o + 1] = rgb[1]; data[o + 2] = rgb[2]; data[o + 3] = 255;
        }
      }
      this.tinyCtx.putImageData(this.pixels, 0, 0);
      const w = cols * step - GAP, hgt = rows * step - GAP;
      ctx.clearRect(0, 0, w, hgt);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(this.tiny, 0, 0, cols * step, rows * step);
      ctx.fillStyle = "#ffffff";
      for (let j = 1; j < cols; j++) ctx.fillRect(j * step - GAP, 0, GAP, hgt);
      for (let i = 1; i < rows; i++) ctx.fillRect(0, i * step - GAP, w, GAP);
      if (!hatch) hatch = makeHatch(ctx);
      ctx.fillStyle = hatch;
      for (let i = 0; i < rows; i++) {
        for (let j = 0; j < cols; j++) if (this.isMasked(i, j)) ctx.fillRect(j * step, i * step, cell, cell);
      }
      if (this.opts.values) {
        ctx.font = "10.5px system-ui, sans-serif";
        ctx.textAlign = "center";
        ctx.textBaseline = "middle";
        for (let i = 0; i < rows; i++) {
          for (let j = 0; j < cols; j++) {
            if (this.isMasked(i, j)) continue;
            ctx.fillStyle = INK[index[i * cols + j] + (seq ? 256 : 0)];
            ctx.fillText(short(M[i][j]), j * step + cell / 2, i * step + cell / 2 + 0.5);
          }
        }
      }
      if (selected) {
        ctx.strokeStyle = "#000"; ctx.lineWidth = 2.5;
        ctx.strokeRect(selected[1] * step + 1.25, selected[0] * step + 1.25, cell - 2.5, cell - 2.5);
      }
    }

    drawLegend(limit, seq) {
      if (limit === this.legendLimit) return;
      this.legendLimit = limit;
      if (!this.legendText) {
        this.legendText = h("span");
        this.legend.append(h("span", {class: "legend-bar " + (seq ? "seq" : "div")}), this.legendText);
      }
      this.legendText.textContent = seq ? `0 … ${fmt(limit, 2)}` : `−${fmt(limit, 2)} … 0 … ${fmt(limit, 2)}`;
    }
  }

  function toCanvas(imageData) {
    const c = document.createElement("canvas");
    c.width = imageData.width; c.height = imageData.height;
    c.getContext("2d").putImageData(imageData, 0, 0);
    return c;
  }

  // 256-entry lookup tables of the colour maps, for per-pixel fields.
  const lut = (f) => Array.from({length: 256}, (_, i) => f(i / 255));
  const DIVERGING_LUT = lut(divergingRamp), SEQUENTIAL_LUT = lut(sequentialRamp);
  const INK = DIVERGING_LUT.concat(SEQUENTIAL_LUT).map(inkOn);     // text colour on each entry

  // ---- Plane: a square canvas with equal axis scales for 2-D geometry ----
  class Plane {
    constructor({title, note, size = 280, hook}) {
      this.size = size;
      this.el = figure(title, hook, null);
      this.canvas = h("canvas", {class: "plane", width: size, height: size});
      this.el.appendChild(this.canvas);
      this.noteEl = h("div", {class: "fig-note"}, note || "");
      this.el.appendChild(this.noteEl);
      this.hits = [];
      this.canvas.addEventListener("mousemove", (e) => this.hover(e));
      this.canvas.addEventListener("mouseleave", hideTip);
    }

    setNote(text) { if (this.noteEl.textContent !== text) this.noteEl.textContent = text; }

    // Square bounds around points [[x, y]], padded, with equal scales.
    static bounds(points, pad = 0.12) {
      let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      for (const [x, y] of points) {
        if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
        x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
      }
      if (x0 === Infinity) { x0 = -1; x1 = 1; y0 = -1; y1 = 1; }
      const span = Math.max(x1 - x0, y1 - y0, 1e-6) * (1 + 2 * pad);
      const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
      return {x0: cx - span / 2, x1: cx + span / 2, y0: cy - span / 2, y1: cy + span / 2};
    }

    begin(bounds) {
      const dpr = window.devicePixelRatio || 1, s = this.size;
      if (this.canvas.width !== s * dpr) {
        this.canvas.width = s * dpr; this.canvas.height = s * dpr;
        this.canvas.style.width = `${s}px`; this.canvas.style.height = `${s}px`;
      }
      const ctx = this.ctx2d || (this.ctx2d = this.canvas.getContext("2d"));
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, s, s);
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, s, s);
      this.ctx = ctx; this.b = bounds; this.hits = [];
      this.sx = (x) => (x - bounds.x0) / (bounds.x1 - bounds.x0) * s;
      this.sy = (y) => s - (y - bounds.y0) / (bounds.y1 - bounds.y0) * s;
      return ctx;
    }

    // An image (e.g. a field) stretched over the whole plane: pixel (i, j) covers data cell
    // x = x0 + (i + 0.5) * dx, y = y1 - (j + 0.5) * dy.
    image(source) {
      if (source instanceof ImageData) {
        if (!this.scratch || this.scratch.width !== source.width || this.scratch.height !== source.height) {
          this.scratch = toCanvas(source);
        } else {
          this.scratch.getContext("2d").putImageData(source, 0, 0);
        }
        source = this.scratch;
      }
      this.ctx.imageSmoothingEnabled = false;
      this.ctx.drawImage(source, 0, 0, this.size, this.size);
    }

    axes() {
      const ctx = this.ctx, s = this.size, b = this.b;
      ctx.strokeStyle = "rgba(0,0,0,0.35)";
      ctx.lineWidth = 1;
      ctx.beginPath();
      if (b.x0 < 0 && b.x1 > 0) { ctx.moveTo(this.sx(0), 0); ctx.lineTo(this.sx(0), s); }
      if (b.y0 < 0 && b.y1 > 0) { ctx.moveTo(0, this.sy(0)); ctx.lineTo(s, this.sy(0)); }
      ctx.stroke();
      ctx.fillStyle = "rgba(0,0,0,0.55)";
      ctx.font = "10px system-ui, sans-serif";
      const span = b.x1 - b.x0;
      ctx.textAlign = "left";
      ctx.fillText(`x ${fmt(b.x0, 2)} … ${fmt(b.x1, 2)}`, 4, s - 4);
      ctx.textAlign = "right";
      ctx.fillText(`scale ${fmt(span, 2)}`, s - 4, s - 4);
      ctx.strokeStyle = "#d1d9e0";
      ctx.strokeRect(0.5, 0.5, s - 1, s - 1);
    }

    // p: {x, y, r, fill, stroke, label, shape ("circle"|"square"|"diamond"), tip: [lines]}
    point(p) {
      const ctx = this.ctx, x = this.sx(p.x), y = this.sy(p.y), r = p.r || 3;
      if (!Number.isFinite(x) || !Number.isFinite(y)) return;
      ctx.beginPath();
      if (p.shape === "square") ctx.rect(x - r, y - r, 2 * r, 2 * r);
      else if (p.shape === "diamond") {
        ctx.moveTo(x, y - r * 1.3); ctx.lineTo(x + r * 1.3, y); ctx.lineTo(x, y + r * 1.3); ctx.lineTo(x - r * 1.3, y);
        ctx.closePath();
      } else ctx.arc(x, y, r, 0, 2 * Math.PI);
      if (p.fill) { ctx.fillStyle = p.fill; ctx.fill(); }
      if (p.stroke) { ctx.strokeStyle = p.stroke; ctx.lineWidth = p.lineWidth || 1; ctx.stroke(); }
      if (p.label) this.label(p.label, x + r + 2, y - r - 1, p.labelColour, p.bold);
      if (p.tip) this.hits.push({x, y, r: Math.max(r, 4), tip: p.tip});
    }

    label(text, x, y, colour, bold) {
      const ctx = this.ctx;
      const shown = text.length > 24 ? text.slice(0, 23) + "…" : text;
      ctx.font = `${bold ? "600 " : ""}10px system-ui, sans-serif`;
      ctx.textAlign = "left";
      // Keep labels inside the canvas: near the right or top edge they flip inwards.
      const width = ctx.measureText(shown).width;
      if (x + width > this.size - 2) x = Math.max(2, x - width - 14);
      if (y < 11) y += 20;
      ctx.lineWidth = 3;
      ctx.strokeStyle = "rgba(255,255,255,0.85)";
      ctx.strokeText(shown, x, y);
      ctx.fillStyle = colour || "#1f2328";
      ctx.fillText(shown, x, y);
    }

    line(points, colour, width = 1, dash) {
      const ctx = this.ctx;
      ctx.beginPath();
      points.forEach(([x, y], i) => (i ? ctx.lineTo(this.sx(x), this.sy(y)) : ctx.moveTo(this.sx(x), this.sy(y))));
      ctx.strokeStyle = colour; ctx.lineWidth = width;
      ctx.setLineDash(dash || []);
      ctx.stroke();
      ctx.setLineDash([]);
    }

    arrow([x0, y0], [x1, y1], colour, width = 1.5) {
      const ctx = this.ctx, a = [this.sx(x0), this.sy(y0)], b = [this.sx(x1), this.sy(y1)];
      const len = Math.hypot(b[0] - a[0], b[1] - a[1]);
      ctx.strokeStyle = colour; ctx.fillStyle = colour; ctx.lineWidth = width;
      ctx.beginPath(); ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); ctx.stroke();
      if (len < 2) return;
      const ux = (b[0] - a[0]) / len, uy = (b[1] - a[1]) / len, head = Math.min(8, len * 0.6);
      ctx.beginPath();
      ctx.moveTo(b[0], b[1]);
      ctx.lineTo(b[0] - head * ux + head * 0.45 * uy, b[1] - head * uy - head * 0.45 * ux);
      ctx.lineTo(b[0] - head * ux - head * 0.45 * uy, b[1] - head * uy + head * 0.45 * ux);
      ctx.closePath(); ctx.fill();
    }

    hover(event) {
      const rect = this.canvas.getBoundingClientRect();
      const x = event.clientX - rect.left, y = event.clientY - rect.top;
      let best = null, bestD = Infinity;
      for (const hit of this.hits) {
        const d = Math.hypot(hit.x - x, hit.y - y);
        if (d <= hit.r + 3 && d < bestD) { best = hit; bestD = d; }
      }
      if (best) return showTip(event, best.tip);
      if (this.describe) {
        const b = this.b, s = this.size;
        const px = b.x0 + x / s * (b.x1 - b.x0), py = b.y1 - y / s * (b.y1 - b.y0);
        const lines = this.describe(px, py);
        if (lines) return showTip(event, lines);
      }
      hideTip();
    }
  }

  // A small line chart on canvas: series [{values, colour, label, max}] against xs.
  function lineChart(canvas, xs, series, marker) {
    const dpr = window.devicePixelRatio || 1, w = canvas.clientWidth || 300, hgt = canvas.clientHeight || 90;
    canvas.width = w * dpr; canvas.height = hgt * dpr;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, hgt);
    const left = 6, right = w - 6, top = 14, bottom = hgt - 14;
    const x0 = xs[0], x1 = xs[xs.length - 1] || 1;
    const X = (x) => left + (x - x0) / ((x1 - x0) || 1) * (right - left);
    ctx.font = "10px system-ui, sans-serif";
    series.forEach((s, k) => {
      const vals = s.values.filter((v) => v !== null);
      const max = s.max !== undefined ? s.max : Math.max(...vals, 1e-9);
      const Y = (v) => bottom - v / max * (bottom - top);
      ctx.strokeStyle = s.colour; ctx.lineWidth = 1.5; ctx.beginPath();
      let started = false;
      s.values.forEach((v, i) => {
        if (v === null) return;
        if (started) ctx.lineTo(X(xs[i]), Y(v)); else { ctx.moveTo(X(xs[i]), Y(v)); started = true; }
      });
      ctx.stroke();
      ctx.fillStyle = s.colour;
      ctx.textAlign = k ? "right" : "left";
      ctx.fillText(s.label, k ? right : left, 10);
    });
    if (marker !== undefined) {
      ctx.strokeStyle = "#1f2328"; ctx.lineWidth = 1; ctx.setLineDash([3, 2]);
      ctx.beginPath(); ctx.moveTo(X(marker), top - 4); ctx.lineTo(X(marker), bottom); ctx.stroke();
      ctx.setLineDash([]);
    }
    ctx.fillStyle = "#59636e"; ctx.textAlign = "left";
    ctx.fillText(`step ${x0}`, left, hgt - 2);
    ctx.textAlign = "right";
    ctx.fillText(`${x1}`, right, hgt - 2);
  }

  return {h, append, clear, fmt, short, subscript, labelText, toCanvas, DIVERGING_LUT, SEQUENTIAL_LUT, diverging, sequential, css, inkOn, tokenColour, tokenCss,
          showTip, hideTip, figure, Heatmap, Plane, lineChart, divergingRamp, sequentialRamp};
})();
