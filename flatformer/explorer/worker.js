// The playground's Worker: trains one Session off the main thread. Messages in: {start:
// choices, held}, {pause}, {resume}. Out, about 30 times a second while training: the step,
// the current weights, the metrics rows so far; at the end {done}. Checkpoints go out with
// each report (only the new ones), so the page can replay and export them.
"use strict";

const FlatWorker = (() => {
  function attach(scope) {
    let session = null, running = false, busy = false, sentSteps = new Set(), many = true;
    const post = (msg) => scope.postMessage(msg);

    // While the candidates are tried the page shows the first; after the selection it gets the
    // chosen one's checkpoints afresh (`reset`).
    function report(done) {
      const m = session.current, nowMany = session.members.length > 1;
      const reset = many && !nowMany && session.recipe.candidates > 1;
      if (reset) sentSteps = new Set();
      many = nowMany;
      const fresh = [...m.checkpoints.keys()].filter((s) => !sentSteps.has(s));
      fresh.forEach((s) => sentSteps.add(s));
      post({step: session.step, flat: m.flat.slice(), metrics: m.metrics, seconds: session.seconds,
        candidates: session.members.length, reset, done,
        checkpoints: fresh.map((s) => [s, m.checkpoints.get(s)])});
    }

    function loop() {
      if (!running || busy) return;
      busy = true;
      const t0 = Date.now();
      try {
        while (running && !session.done && Date.now() - t0 < 33) session.advance(10);
      } catch (err) {
        running = false; busy = false;
        post({error: String(err.message || err)});
        return;
      }
      busy = false;
      report(session.done);
      if (session.done) running = false;
      else setTimeout(loop, 0);
    }

    scope.onmessage = (e) => {
      const msg = e.data;
      if (msg.start) {
        try {
          session = new FlatSession.Session(msg.start, msg.held);
          session.version = msg.version;
        } catch (err) { post({error: String(err.message || err)}); return; }
        sentSteps = new Set(); many = true; running = true;
        post({config: session.config(), recipe: session.recipe});
        loop();
      } else if (msg.pause) { running = false; }
      else if (msg.resume && session && !session.done) { running = true; loop(); }
    };
  }
  return {attach};
})();

if (typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope) FlatWorker.attach(self);
