// Reusable views for the explorer page: safe DOM building, number formats, colour maps, a
// tooltip, figure frames and labels, a line chart; the heatmap (heatmap.js) and the geometry
// plane (plane.js) build on them. Views only draw what they are given; the panels compute.
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

  // A name cut to `max` characters with an ellipsis (labels.short's rule).
  const cut = (text, max) => (text.length > max ? text.slice(0, max - 1) + "\u2026" : text);

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

  return {h, append, clear, fmt, cut, short, subscript, labelText, labelKey, labelNode, toCanvas,
          DIVERGING_LUT, SEQUENTIAL_LUT, INK, diverging, sequential, css, inkOn, tokenColour,
          tokenCss, showTip, hideTip, figure, lineChart, divergingRamp, sequentialRamp};
})();
