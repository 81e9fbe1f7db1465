// The heatmap view: labels in the DOM (text, never HTML), cells drawn on one canvas. It only
// draws the matrix it is given (Views.Heatmap; the panels compute).
"use strict";

Views.Heatmap = (() => {
  const {h, clear, fmt, short, labelText, labelKey, labelNode, figure, showTip, hideTip} = Views;
  const {DIVERGING_LUT, SEQUENTIAL_LUT, INK} = Views;
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
  return class Heatmap {
    // opts: title, hook, kind ("diverging" | "sequential"), cell (px), values (show numbers),
    // sees(i, j) (false: row i does not read column j, drawn masked), onClick(i, j),
    // describe(i, j, value) -> tooltip lines
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

    isMasked(i, j) { return this.M[i][j] === -Infinity || (!!this.opts.sees && !this.opts.sees(i, j)); }

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
      // Names (a compiled program's directions, "length:3") stand upright over every column;
      // numbered narrow columns are labelled every fourth.
      const named = cols.some((l) => typeof l === "string" && !/^\d+$/.test(l));
      const every = cell < 20 && !named ? 4 : 1;
      clear(this.colLabels);
      clear(this.rowLabels);
      cols.forEach((label, j) => {
        if (j % every) return;
        const span = Math.min(every, cols.length - j) * step;
        const cls = "col-label" + (named ? " upright" : every > 1 ? " left" : "");
        this.colLabels.appendChild(labelNode(label, cls, {width: `${span}px`}));
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
  };
})();
