"""The explorer under hostile conditions: its Content-Security-Policy in real Chromium (only the
page's own script runs, nothing is fetched), random URL hashes (the page falls back to
defaults with a notice and never breaks), and the --serve server (GET only, small requests,
up under a burst of concurrent clients)."""

import concurrent.futures
import contextlib
import http.client
import re
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from browser import close, open_page
from flatformer.explorer import render_html

READY = "() => document.documentElement.dataset.ready === 'true'"
KEYS = [
    "seq",
    "step",
    "off",
    "mlp",
    "pos",
    "zoom",
    "beta",
    "temp",
    "k",
    "p",
    "seed",
    "n",
    "cell",
    "view",
]


@pytest.fixture(scope="module")
def page_file(paper_run, tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "page.html"
    path.write_text(render_html(paper_run), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def page(chromium, page_file):
    """One open page for the module: every test checks it made no request of its own."""
    watched = open_page(chromium, page_file.as_uri(), READY)
    yield watched
    close(watched)


def test_the_policy_lets_only_the_pages_own_script_run_and_fetches_nothing(page):
    # A listener the page is asked to reach in every way: no request may ever arrive. (For the
    # iframe, Chromium's predictor may open a TCP connection ahead of the navigation that the
    # policy then refuses; it closes it unused: no byte is sent.)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    received = []

    def accept():
        while listener.fileno() != -1:
            try:
                connection = listener.accept()[0]
            except OSError:
                continue
            connection.settimeout(1)
            with contextlib.suppress(OSError), connection:
                if data := connection.recv(1024):
                    received.append(data)

    threading.Thread(target=accept, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        result = page.page.evaluate(
            """async (url) => {
            const seen = [];
            document.addEventListener("securitypolicyviolation", (e) => seen.push(e.effectiveDirective));
            const fetched = await fetch(url + "/steal").then(() => "fetched", () => "blocked");
            const img = document.createElement("img");
            img.src = url + "/pixel.png";
            const frame = document.createElement("iframe");
            frame.src = url + "/frame";
            const script = document.createElement("script");
            script.textContent = "window.injected = true";
            const remote = document.createElement("script");
            remote.src = url + "/remote.js";
            document.body.append(img, frame, script, remote);
            setTimeout("window.evaluated = true", 0);  // a string is code: eval, which is denied
            try { new WebSocket(url.replace("http", "ws")); } catch (e) { seen.push("ws threw"); }
            navigator.sendBeacon?.(url + "/beacon", "x");
            await new Promise((r) => setTimeout(r, 500));
            return {fetched, evaluated: window.evaluated === true, injected: window.injected === true,
                    seen};
        }""",
            url,
        )
    finally:
        listener.close()
    assert received == []
    assert result["fetched"] == "blocked"
    assert result["injected"] is False and result["evaluated"] is False
    assert {"connect-src", "img-src", "frame-src", "script-src-elem"} <= set(result["seen"])
    assert page.page.evaluate("explorer.ready")
    # Each refusal is logged by Chromium as a console error; nothing else went wrong.
    assert page.errors and all("Content Security Policy" in e for e in page.errors), page.errors
    page.errors.clear()


def hashes():
    value = st.one_of(
        st.text(max_size=30),
        st.integers(-(10**12), 10**12).map(str),
        st.sampled_from(
            [
                "NaN",
                "Infinity",
                "-0",
                "1e400",
                "0x10",
                " 1",
                "1.5",
                "0.0.0.0",
                "..",
                ",",
                "%zz",
                "<img src=x>",
            ]
        ),
    )
    pair = st.tuples(st.sampled_from(KEYS + ["__proto__", "constructor", "x"]), value)
    structured = st.lists(pair, max_size=6).map(lambda kv: "&".join(f"{k}={v}" for k, v in kv))
    return st.one_of(structured, st.text(max_size=200))


def test_random_hashes_fall_back_to_defaults_with_a_notice(page):
    p = page.page
    default = p.evaluate("explorer.state")
    steps = p.evaluate("explorer.data.steps")
    V, T = len(p.evaluate("explorer.data.vocab")), p.evaluate("explorer.data.config.n_ctx")
    counter = iter(range(10**6))

    @settings(
        max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(hashes())
    def check(fragment):
        # A counter key the page ignores makes every hash new, so hashchange always fires.
        fragment = f"{fragment}&_={next(counter)}"
        result = p.evaluate(
            """(h) => new Promise((done) => {
            const before = explorer.renders;
            addEventListener("hashchange", () => setTimeout(() => done({
                renders: explorer.renders - before, state: explorer.state}), 0), {once: true});
            location.hash = h;
        })""",
            fragment,
        )
        state = result["state"]
        assert result["renders"] >= 1
        assert 1 <= len(state["seq"]) <= T and all(0 <= t < V for t in state["seq"])
        assert state["step"] in steps
        assert 0 <= state["beta"] <= 10 and 0 < state["p"] <= 1 and 0 <= state["k"] <= V
        assert set(state) == set(default)

    check()
    assert page.errors == []

    # A link whose every setting is invalid shows the defaults and names what it ignored.
    p.evaluate("location.hash = '#seq=99.99&step=-1&beta=NaN&cell=9.9.9.9'")
    p.wait_for_function("() => explorer.state.beta === 1")
    assert p.evaluate("explorer.state") == default
    text = p.inner_text("body")
    assert re.search(r"Ignored invalid link settings: seq, step=-1, beta=NaN", text), text[:500]
    assert page.errors == []


@pytest.fixture
def server():
    from flatformer.commands.explore import make_server

    srv = make_server(b"<!DOCTYPE html>" + b"x" * 100_000, 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def request(port, method="GET", path="/", headers=None, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        reply = conn.getresponse()
        return reply.status, reply.getheader("Allow"), reply.read()
    finally:
        conn.close()


def test_the_server_answers_only_get_for_the_page(server):
    assert request(server)[0] == 200
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"):
        status, allow, _ = request(server, method, "/", body=b"x" * 10)
        assert (status, allow) == (405, "GET"), method
    assert request(server, "TRACE")[0] == 501
    assert request(server, path="/../../etc/passwd")[0] == 404
    assert request(server, path="/" + "a" * 5000)[0] == 414
    assert request(server, body=b"x" * 1000)[0] == 413
    assert request(server, headers={"X-Big": "y" * 70_000})[0] == 431
    assert request(server, headers={f"X-{i}": "1" for i in range(150)})[0] == 431
    assert request(server)[0] == 200  # still up


def test_the_server_stays_up_under_a_burst_of_clients(server):
    idle = [socket.create_connection(("127.0.0.1", server)) for _ in range(8)]  # silent ones
    try:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda _: request(server), range(64)))
        assert all(status == 200 and len(body) == 100_015 for status, _, body in replies)
    finally:
        for s in idle:
            s.close()
    assert request(server)[0] == 200
