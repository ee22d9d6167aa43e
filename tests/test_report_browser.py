"""The reports in a real headless Chromium: each page loads with no console errors and every chart
div holds a rendered plotly SVG.

Chromium comes from Debian's ``chromium`` package (``.ci/run`` installs it and exports
TRTPROF_CHROMIUM); it is driven through Playwright's protocol client with ``executable_path``, so no
browser is downloaded. Skips with the reason when either is missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from profiler.report import write_report
from tests.test_report import (
    EVIL, ROOT, _evil_everywhere, analysis_example, chart_ids,
)

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    env = os.environ.get("TRTPROF_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    exe = chromium_path()
    if exe is None:
        pytest.skip("headless Chromium not found (apt-get install chromium, or set TRTPROF_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install 'trtprof[test]')")
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh --user-data-dir
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(str(profile), executable_path=exe, headless=True,
                                                        args=CHROMIUM_ARGS)
        try:
            yield context
        finally:
            context.close()


def load(context, path: Path) -> tuple[object, list[str]]:
    """Open ``path``; return the page and every console error or uncaught exception."""
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.goto(path.resolve().as_uri(), wait_until="load")
    return page, errors


def rendered_charts(page) -> dict[str, bool]:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('div.chart')]
        .map(d => [d.id, d.querySelector('svg.main-svg') !== null]))""")


def assert_renders(context, path: Path) -> object:
    page, errors = load(context, path)
    expected = chart_ids(path.read_text())
    assert expected, "the report has no charts"
    try:
        page.wait_for_function("() => [...document.querySelectorAll('div.chart')]"
                               ".every(d => d.querySelector('svg.main-svg'))", timeout=30_000)
    except Exception:  # report which charts did not render, below
        pass
    charts = rendered_charts(page)
    assert sorted(charts) == sorted(expected)
    assert [k for k, ok in charts.items() if not ok] == []
    assert errors == []
    return page


@pytest.mark.parametrize("kind", ["analysis", "sweep", "layers", "compare"])
def test_report_loads_without_errors_every_chart_renders_and_markup_stays_text(browser, kind, tmp_path):
    """The examples carry a name full of markup in every place a name goes (ranges, kernels, variants,
    layers, findings); it must show literally in the tables and in plotly's SVG, and never run."""
    data = dict(_evil_everywhere())[kind]
    out = write_report(data, tmp_path / f"{kind}.html")
    page = assert_renders(browser, out)
    assert page.evaluate("() => document.scripts.length") == 3  # only the scripts the report wrote
    assert EVIL in page.inner_text("body")
    svg_text = page.evaluate("() => [...document.querySelectorAll('svg.main-svg text')]"
                             ".map(t => t.textContent).join('\\n')")
    assert "void foo<int>" in svg_text  # plotly draws the name, it does not parse it as a tag
    if kind == "compare":
        assert page.inner_text("#verdict").startswith("Regression: 1 of 3 variants slower")
    page.close()


def test_cdn_report_offline_says_charts_are_unavailable(browser, tmp_path):
    out = write_report(analysis_example(), tmp_path / "cdn.html", cdn=True)
    page = browser.new_page()
    page.route("**/*", lambda route: route.abort() if route.request.url.startswith("http") else route.continue_())
    uncaught: list[str] = []
    page.on("pageerror", lambda e: uncaught.append(str(e)))
    page.goto(out.resolve().as_uri(), wait_until="load")
    texts = page.evaluate("() => [...document.querySelectorAll('div.chart')].map(d => d.textContent)")
    assert texts and all("plotly.js could not be loaded" in t for t in texts)
    assert uncaught == []
    page.close()


def test_real_capture_report_renders(browser, tmp_path):
    cap = ROOT / "sample_traces" / "launch_bound.sqlite"
    if not cap.is_file():
        pytest.skip(f"{cap} not found")
    analyze = pytest.importorskip("profiler.capture.analyze")
    out = write_report(analyze.analyze_path(cap).to_json(), tmp_path / "real.html")
    assert_renders(browser, out).close()
