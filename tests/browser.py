"""A real headless browser for the report page's tests: Debian's Chromium, driven by Playwright.

``scripts/test.sh`` installs Debian's ``chromium`` package where it is missing; Playwright's
own browser download is never used (its driver ships in its wheel). A missing browser is a
failure, never a skip.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright


@dataclass
class PageCheck:
    figures: dict[str, int]  # data-figure name -> SVG trace groups plotly drew in it
    answer: str  # the text of the answer box
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    pytest.fail(
        "Chromium is missing: scripts/test.sh installs Debian's chromium package "
        "(apt-get install chromium)"
    )


def open_page(html: Path, screenshot: Path) -> PageCheck:
    """Open ``html`` from a file URL in headless Chromium with the network cut off, wait for
    plotly to draw, and keep a full-page screenshot."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
            page = context.new_page()
            check = PageCheck(figures={}, answer="")
            page.on(
                "console",
                lambda m: check.console_errors.append(m.text) if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: check.console_errors.append(str(e)))
            page.on("request", lambda r: check.requests.append(r.url))
            page.goto(html.resolve().as_uri(), wait_until="load")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.plot')].every("
                "d => d.querySelector('.js-plotly-plot .main-svg'))",
                timeout=30_000,
            )
            check.figures = page.eval_on_selector_all(
                ".plot",
                "els => Object.fromEntries(els.map(d => [d.dataset.figure, "
                "d.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length]))",
            )
            check.answer = page.inner_text("#answer")
            page.screenshot(path=str(screenshot), full_page=True)
            return check
        finally:
            browser.close()
