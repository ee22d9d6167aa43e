"""The history site in headless Chromium: the index lists every series, a series page draws its charts with no
console error, a change point names the compare of the two runs either side of it, and on the live server its
link opens that compare. Screenshots go to the test's tmp folder (TRTPROF_SCREENSHOTS=DIR keeps copies)."""

from __future__ import annotations

import os
import shutil
import threading

import numpy as np
import pytest

from profiler.store import Store
from tests.browser import chromium_context
from tests.history_builders import fill, noisy

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from chromium_context(tmp_path_factory, viewport={"width": 1400, "height": 1000})


@pytest.fixture(scope="module")
def store_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("history-browser")
    url = f"sqlite:///{tmp / 'h.db'}"
    store = Store.open(url)
    levels = np.where(np.arange(60) >= 30, 1.15, 1.0)
    ids = fill(store, noisy(levels, 0.02, 5), driver_from={45: "580.2"}, samples=30)
    fill(store, noisy(np.full(12, 3.0), 0.02, 6), key="int8-ws1G-s2", model="/m/<b>bert</b>.onnx", start=100)
    store.close()
    return url, ids, tmp


def _shot(page, tmp, name):
    path = tmp / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get("TRTPROF_SCREENSHOTS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(path, keep)


def _open(browser, url):
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load")
    return page, errors


def _charts_drawn(page) -> dict[str, bool]:
    page.wait_for_function("() => [...document.querySelectorAll('div.chart')].every(d => d.querySelector('svg.main-svg'))",
                           timeout=30_000)
    return page.evaluate("() => Object.fromEntries([...document.querySelectorAll('div.chart')]"
                         ".map(d => [d.id, d.querySelector('svg.main-svg') !== null]))")


def test_static_site_lists_series_draws_charts_and_names_the_compare(browser, store_url, capsys):
    from profiler.cli import main

    url, ids, tmp = store_url
    out = tmp / "site"
    with pytest.raises(SystemExit) as exc:
        main(["history", "--db", url, "--out", str(out)])
    assert exc.value.code == 0
    page, errors = _open(browser, (out / "index.html").as_uri())
    rows = page.eval_on_selector_all("#series-table a", "as => as.map(a => a.textContent)")
    assert sorted(rows) == ["fp16-ws1G-s1", "int8-ws1G-s2"]
    assert "<b>bert</b>.onnx" in page.inner_text("#series-table")  # markup in a name stays text
    _shot(page, tmp, "history-index")
    page.click("text=fp16-ws1G-s1")
    page.wait_for_load_state("load")
    assert _charts_drawn(page) == {"chart-latency": True, "chart-accuracy": True, "chart-memory": True}
    changes = page.eval_on_selector_all("#change-table tr.change code.cmd", "cs => cs.map(c => c.textContent)")
    assert changes == [f"trtprof compare {ids[29]} {ids[30]} --db {url}"]
    # the chart marks the change point and the driver change on the axis
    marks = page.evaluate("() => document.getElementById('chart-latency').layout.shapes.map(s => s.line.dash || 'solid')")
    assert sorted(marks) == ["dash", "solid"]
    assert "driver_version" in page.inner_text("#chart-latency")
    _shot(page, tmp, "history-series")
    assert errors == []
    page.close()


def test_live_server_change_point_opens_the_compare_of_the_pair(browser, store_url):
    from profiler.history.serve import Site, make_server

    url, ids, tmp = store_url
    store = Store.open(url, upgrade=False)
    server = make_server(Site(store, db=url, label=None, model=None, rule=None), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        page, errors = _open(browser, f"http://127.0.0.1:{port}/")
        page.click("text=fp16-ws1G-s1")
        page.wait_for_load_state("load")
        _charts_drawn(page)
        href = page.get_attribute("#change-table a.compare", "href")
        assert href == f"../compare/{ids[29]}/{ids[30]}.html"
        page.click("#change-table a.compare")
        page.wait_for_load_state("load")
        assert page.url.endswith(f"/compare/{ids[29]}/{ids[30]}.html")
        assert page.inner_text("#verdict").startswith(("REGRESSION", "INCONCLUSIVE"))
        _shot(page, tmp, "history-compare")
        assert errors == []
        page.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        store.close()


def test_cdn_site_offline_says_charts_are_unavailable(browser, store_url):
    from profiler.history.review import review_store
    from profiler.history.site import write_site

    url, ids, tmp = store_url
    store = Store.open(url, upgrade=False)
    made = write_site(review_store(store), tmp / "cdn", db=url, cdn=True)
    store.close()
    assert made["plotly_bytes"] == 0 and not (tmp / "cdn" / "assets" / "plotly.min.js").exists()
    page = browser.new_page()
    page.route("**/*", lambda route: route.abort() if route.request.url.startswith("http") else route.continue_())
    uncaught: list[str] = []
    page.on("pageerror", lambda e: uncaught.append(str(e)))
    page.goto(next((tmp / "cdn" / "series").glob("*.html")).as_uri(), wait_until="load")
    texts = page.evaluate("() => [...document.querySelectorAll('div.chart')].map(d => d.textContent)")
    assert texts and all("plotly.js could not be loaded" in t for t in texts)
    assert uncaught == []
    page.close()
