// The page's top: the header with the self-check banner, the sequence editor with the training
// curve, and the toolbar (checkpoint slider, knobs, the next token and the KL they cost).
"use strict";

Panels.input = (ctx) => {
  const {h, clear, fmt, Plane, tokenCss} = Views;
  const {DATA, M, cfg, vocab, V, L, H, word, posLabels, dims, SHAPES, heat, show, section, row, num} = ctx;
  const steps = ctx.steps, bannerEl = ctx.banner;

  // ---- header: title, self-check, sequence editor, training curve ----
  function headerPanel() {
    const title = DATA.task ? `${DATA.task}` : DATA.title;
    const facts = [`${DATA.preset || "custom"} · ${DATA.n_params.toLocaleString("en")} parameters`,
      `d_model ${cfg.d_model} · ${L} layer${L > 1 ? "s" : ""} · ${H} head${H > 1 ? "s" : ""}, d_head ${cfg.d_head}`,
      `${M.attnOnly(cfg) ? "attention-only (no MLP)" : `d_mlp ${cfg.d_mlp} (${M.gated(cfg) ? "gated " : ""}${{gelu: "GELU tanh", gelu_erf: "GELU erf", relu: "ReLU", silu: "SiLU"}[cfg.act_fn] || cfg.act_fn})`} · ${M.rms(cfg) ? "pre-RMSNorm" : M.preNorm(cfg) ? "pre-LayerNorm" : "no LayerNorm"}${cfg.ln_final ? ` · final ${M.rms(cfg) ? "RMSNorm" : "LayerNorm"}` : ""}${M.rotary(cfg) ? " · rotary positions" : ""}`,
      `${cfg.attn_out ? "with W_O" : "no W_O (heads concatenated)"} · context ${cfg.n_ctx} · vocabulary ${V}`
        + (ctx.vocabOut.length !== V || DATA.program ? ` · ${ctx.vocabOut.length} output classes` : "")
        + (M.causalOf(cfg) ? "" : " · attends both ways (not causal)")];
    const el = h("header", {class: "top"},
      h("div", {class: "title-row"},
        h("h1", {}, "flatformer explorer ", h("span", {class: "muted"}, "· "), title),
        h("span", {class: "run-name", title: "run folder"}, DATA.title)),
      h("p", {class: "facts"}, facts.join("  ·  ")),
      DATA.program ? h("p", {class: "facts", id: "program-note"}, DATA.program) : null,
      bannerEl);
    return {el, update() {}};
  }

  function sequencePanel() {
    const chips = h("div", {class: "chips", "aria-label": "the input sequence"});
    const input = h("input", {type: "text", id: "seq-text", spellcheck: false, autocomplete: "off",
                              "aria-label": "type the sequence, tokens separated by spaces"});
    const msg = h("div", {class: "msg", id: "seq-msg", role: "status"});
    const say = (text, bad = true) => { msg.textContent = text; msg.classList.toggle("bad", bad); };
    const byLength = vocab.map((_, i) => i).sort((a, b) => vocab[b].length - vocab[a].length || a - b);
    function parse(text) {
      const out = [];
      let i = 0;
      while (i < text.length) {
        if (/\s/.test(text[i])) { i++; continue; }
        const hit = byLength.find((v) => text.startsWith(vocab[v], i)
          && (i + vocab[v].length === text.length || /\s/.test(text[i + vocab[v].length])));
        if (hit === undefined) {
          const bad = text.slice(i).split(/\s/)[0];
          return {error: `“${bad.length > 40 ? bad.slice(0, 40) + "…" : bad}” is not in the vocabulary; click a token below or type one of them.`};
        }
        out.push(hit);
        i += vocab[hit].length;
      }
      if (!out.length) return {error: "the sequence needs at least one token"};
      if (out.length > cfg.n_ctx) return {error: `${out.length} tokens: the context holds ${cfg.n_ctx}`};
      return {tokens: out};
    }
    function submit(e) {
      e.preventDefault();
      const r = parse(input.value);
      if (r.error) { say(r.error); input.classList.add("bad"); return; }
      input.classList.remove("bad");
      say("", false);
      ctx.set({seq: r.tokens, cell: null});
    }
    const palette = h("div", {class: "palette", "aria-label": "vocabulary"},
      vocab.map((text, v) => h("button", {type: "button", class: "tok", title: `token ${v}: ${text}`,
        dataset: {token: v}, style: {borderLeftColor: Views.css(Views.tokenColour(v))},
        onclick: () => {
          if (ctx.state.seq.length >= cfg.n_ctx) return say(`the context holds ${cfg.n_ctx} tokens: remove one first`);
          say("", false);
          ctx.set({seq: [...ctx.state.seq, v], cell: null});
        }}, text)));
    const el = h("section", {id: "input", class: "panel input"},
      h("div", {class: "input-main"},
        h("h2", {}, "Input"),
        chips,
        h("form", {class: "seq-form", onsubmit: submit}, input,
          h("button", {type: "submit"}, "Set"),
          h("button", {type: "button", onclick: () => { say("", false); ctx.set({seq: DATA.demo.slice(), cell: null}); }}, "Demo")),
        msg,
        DATA.input_note ? h("div", {class: "fig-note", id: "seq-note"}, DATA.input_note) : null,
        h("div", {class: "sub"}, "Vocabulary: click to append"),
        palette),
      // A model not trained here (imported, compiled) has no curve: no empty panel for it.
      DATA.metrics.step.length ? h("div", {class: "input-side"},
        h("div", {class: "sub"}, "Training: held-out loss and rule error"),
        h("canvas", {class: "curve", id: "curve"}),
        h("div", {class: "fig-note", id: "curve-note"})) : null);
    let shown = "";
    return {el, say, key: () => `${ctx.state.seq.join(".")}:${ctx.state.step}`, update(c) {
      const key = ctx.state.seq.join(".");
      if (key !== shown) {
        shown = key;
        clear(chips);
        ctx.state.seq.forEach((t, i) => chips.appendChild(h("span", {class: "chip", style: {borderColor: Views.css(Views.tokenColour(t))}},
          h("span", {class: "chip-pos"}, String(i)), h("span", {class: "chip-text"}, word(t)),
          ctx.state.seq.length > 1 ? h("button", {type: "button", class: "chip-x", title: "remove this token", "aria-label": `remove token ${i}`,
            onclick: () => ctx.set({seq: ctx.state.seq.filter((_, j) => j !== i), cell: null})}, "×") : null)));
        if (document.activeElement !== input) input.value = ctx.state.seq.map(word).join(" ");
      }
      const m = DATA.metrics;
      if (m.step.length) {
        Views.lineChart(document.getElementById("curve"), m.step, [
          {values: m.val_loss, colour: "#225ea8", label: "held-out loss"},
          {values: m.rule_error, colour: "#d6604d", label: "rule error (0–1)", max: 1}], ctx.state.step);
        const i = m.step.findIndex((s) => s >= ctx.state.step);
        const at = i >= 0 && m.step[i] === ctx.state.step ? i : -1;
        document.getElementById("curve-note").textContent = at >= 0
          ? `step ${ctx.state.step}: loss ${fmt(m.val_loss[at], 4)}, rule error ${m.rule_error[at] === null ? "–" : (100 * m.rule_error[at]).toFixed(1) + "%"}`
          : `step ${ctx.state.step}`;
      }
    }};
  }

  // ---- toolbar: checkpoint slider and knobs, always in view ----
  function toolbar() {
    const slider = h("input", {type: "range", id: "step", min: 0, max: steps.length - 1, step: 1,
      "aria-label": "checkpoint", oninput: () => ctx.set({step: steps[+slider.value]})});
    const stepLabel = h("output", {id: "step-label"});
    let playing = null;
    const play = h("button", {type: "button", id: "play", title: "replay training", onclick: () => {
      if (playing) { clearInterval(playing); playing = null; play.textContent = "▶"; return; }
      let i = steps.indexOf(ctx.state.step);
      if (i >= steps.length - 1) i = -1;
      play.textContent = "❚❚";
      playing = setInterval(() => {
        i += 1;
        if (i >= steps.length) { clearInterval(playing); playing = null; play.textContent = "▶"; return; }
        ctx.set({step: steps[i]});
      }, 80);
    }}, "▶");
    const heads = [];
    for (let l = 0; l < L; l++) for (let hd = 0; hd < H; hd++) heads.push(`${l}.${hd}`);
    const toggle = (id, label, title, checked, onchange) => h("label", {class: "knob", title},
      h("input", {type: "checkbox", id, checked, onchange}), label);
    const headBoxes = heads.map((key) => toggle(`head-${key.replace(".", "-")}`, `L${key.replace(".", "H")}`,
      `head ${key}: untick to zero its output (hook_z)`, true, (e) => {
        const off = new Set(ctx.state.off);
        if (e.target.checked) off.delete(key); else off.add(key);
        ctx.set({off: [...off].sort()});
      }));
    const mlpBoxes = Array.from({length: M.attnOnly(cfg) ? 0 : L}, (_, l) => toggle(`mlp-${l}`, L > 1 ? `MLP${l}` : "MLP",
      `MLP of layer ${l}: untick to zero its output (hook_mlp_out)`, true, (e) => {
        const mlp = new Set(ctx.state.mlp);
        if (e.target.checked) mlp.delete(l); else mlp.add(l);
        ctx.set({mlp: [...mlp].sort()});
      }));
    const posBox = toggle("pos", "positions", "untick to zero the position embeddings (hook_pos_embed)", true,
      (e) => ctx.set({pos: !e.target.checked}));
    if (M.rotary(cfg)) posBox.style.display = "none";  // no position embedding to switch off
    const beta = h("input", {type: "range", id: "beta", min: 0, max: 4, step: 0.05, "aria-label": "beta",
      oninput: () => ctx.set({beta: +beta.value})});
    const betaOut = h("output", {id: "beta-label"});
    const reset = h("button", {type: "button", id: "reset-knobs", onclick: () => ctx.set({off: [], mlp: [], pos: false, beta: 1})}, "reset");
    const kl = h("output", {id: "kl", class: "kl"});
    const next = h("output", {id: "next", class: "next"});
    const el = h("nav", {id: "toolbar", class: "toolbar"},
      h("div", {class: "tool"}, h("span", {class: "tool-label"}, "checkpoint"), play, slider, stepLabel),
      h("div", {class: "tool"}, h("span", {class: "tool-label"}, "knobs"), headBoxes, mlpBoxes, posBox,
        h("label", {class: "knob", title: "multiply every attention score by beta (before the softmax)"}, "β", beta, betaOut), reset),
      h("div", {class: "tool readout"}, next, kl));
    return {el, update(c) {
      slider.value = steps.indexOf(ctx.state.step);
      stepLabel.textContent = `step ${ctx.state.step}`;
      heads.forEach((key, i) => { headBoxes[i].firstChild.checked = !ctx.state.off.includes(key); });
      mlpBoxes.forEach((b, l) => { b.firstChild.checked = !ctx.state.mlp.includes(l); });
      posBox.firstChild.checked = !ctx.state.pos;
      beta.value = ctx.state.beta;
      betaOut.textContent = ctx.state.beta.toFixed(2);
      const last = c.T - 1, p = M.softmax(c.run.logits[last]);
      const top = p.indexOf(Math.max(...p));
      // A next-token model predicts the token after the last; a model attending both ways
      // gives an output at every position (a compiled program: its values, read after BOS).
      next.textContent = ctx.nextTokens ? `next: ${ctx.wordOut(top)} (${(100 * p[top]).toFixed(1)}%)`
        : DATA.program ? `program's output: ${ctx.outputsOf(c.run.logits).join(" ") || "(none: the input is BOS alone)"}`
          : `output at position ${last}: ${ctx.wordOut(top)} (${(100 * p[top]).toFixed(1)}%)`;
      next.title = DATA.program || "";
      kl.dataset.value = String(c.kl[last]);
      kl.textContent = ctx.changedKnobs(ctx.state)
        ? `KL(original ‖ changed) = ${fmt(c.kl[last], 4)} nats`
        : "KL(original ‖ changed) = 0 (no knob changed)";
      kl.title = `exact: ${String(c.kl[last])} nats, ${ctx.nextTokens ? "next-token" : "output"} distribution at position ${last}`;
      el.classList.toggle("changed", ctx.changedKnobs(ctx.state));
    }};
  }

  return {headerPanel, sequencePanel, toolbar};
};
