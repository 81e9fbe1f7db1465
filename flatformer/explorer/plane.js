// The plane view: a square canvas with equal axis scales for 2-D geometry (Views.Plane):
// points, lines, arrows and an image under them, with a tooltip per point.
"use strict";

Views.Plane = (() => {
  const {h, fmt, figure, showTip, hideTip, toCanvas} = Views;

  return class Plane {
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
      const shown = Views.cut(text, FlatConstants.MAX_LABEL);
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
  };
})();
