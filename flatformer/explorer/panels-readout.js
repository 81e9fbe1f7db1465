// Read out (logits, the sampling distribution and the seeded sampler) and Knobs (what each
// single change costs on this prompt, as `flatformer analyze` lists them).
"use strict";

Panels.readout = (ctx) => {
  const {h, clear, fmt, Plane, tokenCss} = Views;
  const {DATA, M, cfg, vocab, V, L, H, word, posLabels, dims, stream, SHAPES, heat, show, section, row, num} = ctx;
  const memo = ctx.memo;

  // ---- Read out ----
  function readoutPanel() {
    if (!ctx.nextTokens) return outputsPanel();
    const el = section("readout", "Read out",
      "The last residual is multiplied by the unembedding W_U (plus its bias): one logit per vocabulary token. The next token's distribution then goes through temperature, top-k and top-p before the sampler draws.");
    const lnFinal = cfg.ln_final ? heat("final LayerNorm", "ln_final.hook_normalized", cfg.d_model) : null;
    const logits = heat("logits", cfg.ln_final ? "unembed (ln_final(resid_post) · W_U + b_U)" : "unembed (resid_post · W_U + b_U)", ctx.vocabOut.length);
    const probs = heat("probabilities", "softmax(logits)", ctx.vocabOut.length, {kind: "sequential", unit: true});
    const temp = h("input", {type: "range", id: "temp", min: -2, max: 0.7, step: 0.01, "aria-label": "temperature (log scale)",
      oninput: () => ctx.set({temp: +Math.pow(10, +temp.value).toPrecision(3)})});
    const tempOut = h("output", {id: "temp-label"});
    const topk = h("input", {type: "number", id: "topk", min: 0, max: V, step: 1, "aria-label": "top-k",
      onchange: () => { const k = Math.round(+topk.value); if (k >= 0 && k <= V) ctx.set({k}); }});
    const topp = h("input", {type: "range", id: "topp", min: 0.01, max: 1, step: 0.01, "aria-label": "top-p",
      oninput: () => ctx.set({p: +topp.value})});
    const toppOut = h("output", {id: "topp-label"});
    const bars = h("div", {class: "bars", id: "bars"});
    const stats = h("div", {class: "stats", id: "stats"});
    const seed = h("input", {type: "number", id: "seed", min: 0, step: 1, "aria-label": "sampler seed",
      onchange: () => { const s = Math.round(+seed.value); if (s >= 0 && s < 2 ** 32) ctx.set({seed: s}); }});
    const count = h("input", {type: "number", id: "gen-n", min: 1, max: 64, step: 1, "aria-label": "tokens to generate",
      onchange: () => { const n = Math.round(+count.value); if (n >= 1 && n <= 64) ctx.set({n}); }});
    const gen = h("div", {class: "gen", id: "generated"});
    const table = h("table", {class: "draws", id: "draws"});
    el.append(lnFinal ? row(lnFinal.el) : "", row(logits.el, probs.el),
      h("h3", {}, "Next token"),
      h("div", {class: "controls"},
        h("label", {}, "temperature ", temp, tempOut),
        h("label", {}, "top-k ", topk, h("span", {class: "muted"}, " (0 = off)")),
        h("label", {}, "top-p ", topp, toppOut)),
      stats, bars,
      h("h3", {}, "Seeded sampler"),
      h("div", {class: "controls"},
        h("label", {}, "seed ", seed), h("button", {type: "button", onclick: () => ctx.set({seed: (ctx.state.seed + 1) % 2 ** 32})}, "next seed"),
        h("label", {}, "tokens ", count),
        h("span", {class: "muted"}, "mulberry32(seed) draws u in [0, 1); the token whose slice of the cumulative distribution holds u is picked. The window slides when the context is full; the knobs apply.")),
      gen, table);
    return {el, update(c) {
      const rows = posLabels(c.seq);
      if (lnFinal) show(lnFinal, c.run.cache["ln_final.hook_normalized"], rows, stream(), "resid");
      show(logits, c.run.logits, rows, ctx.vocabOut, "logits");
      show(probs, c.run.logits.map((r) => M.softmax(r)), rows, ctx.vocabOut, "logits", {limit: 1});
      temp.value = Math.log10(ctx.state.temp); tempOut.textContent = `${ctx.state.temp}`;
      topk.value = ctx.state.k; topp.value = ctx.state.p; toppOut.textContent = ctx.state.p.toFixed(2);
      seed.value = ctx.state.seed; count.value = ctx.state.n;
      const options = {temperature: ctx.state.temp, topK: ctx.state.k, topP: ctx.state.p};
      const lastLogits = c.run.logits[c.T - 1], dist = M.sampling(lastLogits, options);
      const Hraw = M.entropy(M.softmax(lastLogits)), Hs = M.entropy(dist.probs);
      clear(stats).append(
        h("span", {class: "stat"}, "entropy ", h("b", {dataset: {value: String(Hs)}, id: "entropy"}, `${fmt(Hs, 3)} nats`)),
        h("span", {class: "stat"}, "effective choices exp(H) ", h("b", {dataset: {value: String(Math.exp(Hs))}, id: "effective"}, fmt(Math.exp(Hs), 3)), ` of ${V}`),
        h("span", {class: "stat muted"}, `before temperature/top-k/top-p: H = ${fmt(Hraw, 3)} nats, exp(H) = ${fmt(Math.exp(Hraw), 3)}`),
        h("span", {class: "stat muted"}, `${dist.kept} token${dist.kept > 1 ? "s" : ""} kept`));
      drawBars(bars, dist, M.softmax(lastLogits));
      const draws = M.generate(c.model, c.seq, ctx.state.n, {seed: ctx.state.seed, knobs: ctx.knobsOf(ctx.state), ...options});
      drawGeneration(gen, table, c, draws);
    }};
  }

  function drawBars(box, dist, raw) {
    if (!box.firstChild) {
      ctx.vocabOut.forEach((text, v) => box.appendChild(h("div", {class: "bar-row"},
        h("span", {class: "bar-label"}, text),
        h("span", {class: "bar-track"}, h("span", {class: "bar raw"}), h("span", {class: "bar", style: {background: tokenCss(v)}})),
        h("span", {class: "bar-value"}))));
    }
    const max = Math.max(...dist.probs, ...raw, 1e-9);
    ctx.vocabOut.forEach((text, v) => {
      const rowEl = box.children[v], [rawBar, bar] = rowEl.children[1].children;
      rowEl.title = `${text}: sampled p = ${String(dist.probs[v])}; model p (T = 1) = ${String(raw[v])}`;
      rawBar.style.width = `${100 * raw[v] / max}%`;
      bar.style.width = `${100 * dist.probs[v] / max}%`;
      rowEl.children[2].textContent = dist.probs[v] > 0 ? `${(100 * dist.probs[v]).toFixed(1)}%` : "–";
    });
  }

  // The whole cumulative distribution of one draw, token slices in vocabulary order.
  function strip(d) {
    let lo = 0;
    const parts = d.probs.map((p, v) => {
      const left = lo;
      lo += p;
      return p > 0 ? h("span", {class: "slice" + (v === d.token ? " chosen" : ""), title: `${word(v)}: [${left.toFixed(4)}, ${lo.toFixed(4)})`,
        style: {left: `${100 * left}%`, width: `${100 * p}%`, background: tokenCss(v, v === d.token ? 0.95 : 0.28)}}) : null;
    });
    return h("div", {class: "strip"}, parts, h("span", {class: "u-mark", style: {left: `${100 * d.u}%`}}));
  }

  function drawGeneration(gen, table, c, draws) {
    clear(gen);
    gen.dataset.tokens = draws.map((d) => d.token).join(",");
    Views.append(gen, [h("span", {class: "muted"}, "prompt "),
      c.seq.map((t) => h("span", {class: "chip small"}, word(t))),
      h("span", {class: "muted"}, " → "),
      draws.map((d) => h("span", {class: "chip small gen-tok", style: {borderColor: tokenCss(d.token)}}, word(d.token)))]);
    clear(table);
    table.append(h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "draw u"), h("th", {}, "cumulative distribution (u marked)"), h("th", {}, "slice"), h("th", {}, "token"), h("th", {}, "p"))));
    const body = h("tbody");
    draws.forEach((d, i) => body.appendChild(h("tr", {dataset: {u: String(d.u), token: d.token}},
      h("td", {}, String(i + 1)), h("td", {}, num(`u.${i}`, d.u, 6)),
      h("td", {}, strip(d)),
      h("td", {class: "muted"}, `[${d.lo.toFixed(3)}, ${d.hi.toFixed(3)})`),
      h("td", {}, h("b", {}, word(d.token))), h("td", {}, `${(100 * d.p).toFixed(1)}%`))));
    table.appendChild(body);
  }

  // ---- Read out of a model whose outputs are no next tokens (one attending both ways, a
  // compiled program): the logits over its output classes and the class at every position;
  // nothing is sampled or fed back (its outputs are not tokens it reads).
  function outputsPanel() {
    const program = DATA.program;
    const el = section("readout", "Read out",
      "Each position's last residual is multiplied by the unembedding W_U (plus its bias): one logit per output class"
      + (ctx.vocabOut.length !== V || program ? ` (this model's ${ctx.vocabOut.length}, which are not the tokens it reads)` : "")
      + ". " + (M.causalOf(cfg) ? "" : "This model attends both ways: every position reads every other, so each position's output depends on the whole input, and there is no next token to sample. ")
      + (program || ""));
    const lnFinal = cfg.ln_final ? heat("final LayerNorm", "ln_final.hook_normalized", cfg.d_model) : null;
    const logits = heat("logits", cfg.ln_final ? "unembed (ln_final(resid_post) · W_U + b_U)" : "unembed (resid_post · W_U + b_U)", ctx.vocabOut.length);
    const probs = heat("probabilities", "softmax(logits)", ctx.vocabOut.length, {kind: "sequential", unit: true});
    const table = h("table", {class: "draws", id: "outputs"});
    el.append(lnFinal ? row(lnFinal.el) : "", row(logits.el, probs.el), h("h3", {}, program ? "The program's output" : "Outputs"), table);
    return {el, update(c) {
      const rows = posLabels(c.seq);
      if (lnFinal) show(lnFinal, c.run.cache["ln_final.hook_normalized"], rows, stream(), "resid");
      show(logits, c.run.logits, rows, ctx.vocabOut, "logits");
      show(probs, c.run.logits.map((r) => M.softmax(r)), rows, ctx.vocabOut, "logits", {limit: 1});
      clear(table);
      // a program's input i is read at position i + 1, where the model gives its value
      table.append(h("thead", {}, h("tr", {}, h("th", {}, "position"), program ? h("th", {}, "program index") : null,
        h("th", {}, "input"), h("th", {}, program ? "output: the program's value" : "output class"), h("th", {}, "p"))));
      const body = h("tbody");
      c.run.logits.forEach((r, i) => {
        const p = M.softmax(r), t = ctx.top(r), read = !program || i > 0;
        body.appendChild(h("tr", {class: read ? "" : "muted", dataset: {position: i, output: read ? ctx.vocabOut[t] : ""}},
          h("td", {}, String(i)), program ? h("td", {}, read ? String(i - 1) : "–") : null, h("td", {}, word(c.seq[i])),
          h("td", {}, read ? h("b", {class: "output"}, ctx.wordOut(t)) : "(BOS: no value)"),
          h("td", {}, `${(100 * p[t]).toFixed(1)}%`)));
      });
      table.appendChild(body);
      if (program) {
        const inputs = c.seq.slice(1).map(word).join(" ");
        table.appendChild(h("caption", {id: "program-output"}, `program(${inputs}) = ${ctx.outputsOf(c.run.logits).join(" ")}`));
      }
    }};
  }

  // ---- Knobs: what each single change costs on this prompt ----
  function knobsPanel() {
    const el = section("knobs", "Knobs",
      ctx.nextTokens
        ? "Each knob is a hook on one named activation; the page reruns the model and reports the KL divergence of the changed next-token distribution p′ from the original p, KL(original ‖ changed) = Σ p log(p/p′), in nats: the same knobs and the same measure as `flatformer analyze`. Generation above uses the changed model."
        : "Each knob is a hook on one named activation; the page reruns the model and reports the KL divergence of the changed output distribution p′ at the last position from the original p, KL(original ‖ changed) = Σ p log(p/p′), in nats (per position in the map), and the outputs at every position under the change.");
    const perPos = heat("KL per position (current knobs)", null, 8, {kind: "sequential", cell: 40, values: true,
      describe: (i, j, v) => [`position ${j}`, `KL ${String(v)} nats`]});
    const table = h("table", {class: "ablations", id: "ablations"});
    el.append(row(perPos.el), h("h3", {}, "One change at a time, on this prompt"), table);
    let shown = "";
    return {el, update(c) {
      perPos.update([c.kl], ["KL"], posLabels(c.seq), {shape: [c.T], axes: "pos"});
      const key = `${ctx.state.step}:${c.seq.join(".")}`;
      if (key === shown) return;   // the table does not depend on the current knobs
      shown = key;
      const model = c.model, seq = c.seq, base = c.base.logits[c.T - 1];
      // The knobs of readout.knobs.standard_knobs, in its order and under its names.
      const options = [], windows = DATA.measures.mean_windows;
      const means = windows ? memo(`head-means:${ctx.state.step}`, () => M.headMeans(model, windows)) : null;
      for (let l = 0; l < L; l++) for (let hd = 0; hd < H; hd++) {
        options.push([`head ${l}.${hd} zero`, `blocks.${l}.attn.hook_z[:, :, ${hd}] = 0`, {off: [`${l}.${hd}`]}]);
        if (means) options.push([`head ${l}.${hd} mean`, `blocks.${l}.attn.hook_z[:, :, ${hd}] = its mean over ${windows.length} held-out windows`, null, {headsMean: {[`${l}.${hd}`]: means[l]}}]);
      }
      if (!M.attnOnly(cfg)) for (let l = 0; l < L; l++) options.push([`mlp ${l} off`, `blocks.${l}.hook_mlp_out = 0`, {mlp: [l]}]);
      if (!M.rotary(cfg)) options.push(["positions off", "hook_pos_embed = 0", {pos: true}]);
      for (const beta of DATA.measures.betas) options.push([`beta ${beta}`, `hook_attn_scores × ${beta}${beta === 0 ? " (uniform attention)" : ""}`, {beta}]);
      const p0 = M.softmax(base), top0 = p0.indexOf(Math.max(...p0));
      clear(table);
      const outputs0 = ctx.nextTokens ? null : ctx.outputsOf(c.base.logits).join(" ");
      table.append(h("thead", {}, h("tr", {}, h("th", {}, "change"), h("th", {}, "hook"), h("th", {}, "KL (nats)"), h("th", {}, ctx.nextTokens ? "next token" : "outputs"), h("th", {}))));
      const body = h("tbody");
      for (const [label, hook, change, extra] of options) {
        const s = {off: [], mlp: [], pos: false, beta: 1, ...change};
        const all = M.forward(model, seq, extra || ctx.knobsOf(s)).logits, logits = all[c.T - 1];
        const p = M.softmax(logits), top = p.indexOf(Math.max(...p)), kl = M.kl(base, logits);
        const outputs = ctx.nextTokens ? null : ctx.outputsOf(all).join(" ");
        const changed = ctx.nextTokens ? top !== top0 : outputs !== outputs0;
        body.appendChild(h("tr", {dataset: {knob: label, kl: String(kl)}},
          h("td", {}, label), h("td", {}, h("code", {}, hook)), h("td", {}, num("ablation", kl, 3)),
          h("td", {}, ctx.nextTokens ? `${ctx.wordOut(top)} (${(100 * p[top]).toFixed(0)}%)` : outputs, changed ? h("span", {class: "badge"}, "changed") : ""),
          h("td", {}, change ? h("button", {type: "button", onclick: () => ctx.set(s)}, "apply") : "")));
      }
      table.appendChild(body);
      table.appendChild(h("caption", {}, ctx.nextTokens ? `original next token: ${ctx.wordOut(top0)} (${(100 * p0[top0]).toFixed(1)}%)`
        : `original outputs: ${outputs0}`));
    }};
  }


  return {readoutPanel, knobsPanel};
};
