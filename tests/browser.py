"""Shared Playwright helpers: Debian's chromium, launched once, and pages that record every
request, console error and dialog so tests can assert the page stayed offline and quiet."""

from __future__ import annotations

from dataclasses import dataclass, field

# The flags that work on this machine (see ../shared/TOOLCHAIN.md): headless, no sandbox
# (containers), and none of chromium's own background traffic.
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)


_shared: dict = {}


def shared_browser():
    """One chromium for the whole test session, started on first use.

    Test modules wrap it in a session fixture whose teardown calls `close_shared_browser`;
    every module gets the same browser, so a session launches chromium once.
    """
    if "browser" not in _shared:
        from playwright.sync_api import sync_playwright

        _shared["playwright"] = sync_playwright().start()
        _shared["browser"] = launch(_shared["playwright"])
    return _shared["browser"]


def close_shared_browser():
    if "browser" in _shared:
        _shared.pop("browser").close()
        _shared.pop("playwright").stop()


@dataclass
class Watched:
    """A page plus everything it asked for or complained about."""

    page: object
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


def open_page(
    browser, url: str | None = None, wait_for: str | None = None, viewport=(1280, 900)
) -> Watched:
    """A new page in a fresh context, recording requests, console errors and dialogs."""
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    # Waits end when the page is ready; the bound only ends a page that never is, and it is
    # wide because the suite's other workers share the machine.
    context.set_default_timeout(90_000)
    page = context.new_page()
    watched = Watched(page)
    page.on("request", lambda r: watched.requests.append(r.url))
    page.on("console", lambda m: watched.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: watched.errors.append(str(e)))

    def on_dialog(dialog):
        watched.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    if url:
        page.goto(url)
        if wait_for:
            page.wait_for_function(wait_for)
    return watched


def close(watched: Watched):
    watched.page.context.close()
