"""The reports in a real headless Chromium: each page loads with no console errors and every chart
div holds a rendered plotly SVG.

Chromium comes from Debian's ``chromium`` package (``.ci/run`` installs it and exports
TRTPROF_CHROMIUM); it is driven through Playwright's protocol client with ``executable_path``, so no
browser is downloaded. Skips with the reason when either is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.report import write_report
from tests.conftest import SHARED
from tests.browser import chromium_context
from tests.report_examples import (
    EVIL, ROOT, evil_everywhere, analysis_example, chart_ids, compare_example, sweep_example,
)

pytestmark = pytest.mark.browser

@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from chromium_context(tmp_path_factory)


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
    data = dict(evil_everywhere())[kind]
    out = write_report(data, tmp_path / f"{kind}.html")
    page = assert_renders(browser, out)
    assert page.evaluate("() => document.scripts.length") == 3  # only the scripts the report wrote
    assert EVIL in page.inner_text("body")
    svg_text = page.evaluate("() => [...document.querySelectorAll('svg.main-svg text')]"
                             ".map(t => t.textContent).join('\\n')")
    assert "void foo<int>" in svg_text  # plotly draws the name, it does not parse it as a tag
    if kind == "compare":
        assert page.inner_text("#verdict").startswith("REGRESSION")
        assert "1 of 3 variants slower" in page.inner_text("#verdict")
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


# ----------------------------------------------------------------------------- layout at 1400 px

def _analysis(path: Path) -> dict:
    analyze = pytest.importorskip("profiler.capture.analyze")
    from profiler.capture.timeline import build_timeline

    res = analyze.analyze_path(path)
    data = res.to_json()
    data["timeline"] = build_timeline(res.context.trace, data)
    return data


def _sweep(path: Path) -> dict:
    import json

    return json.loads(path.read_text())


def _sweep_nsys(path: Path) -> dict:
    """What ``sweep --nsys`` writes: the sweep's summary with its capture attached (timeline included)."""
    from profiler.harness.nsys import attach_capture

    summary = _sweep(path.with_suffix(".summary.json"))
    for v in summary["variants"]:
        v.pop("nsys", None)
    return attach_capture(summary, path)


def _layers(path: Path) -> dict:
    from profiler.layers.importer import build_import

    return build_import([str(path)])[0]


REAL_INPUTS = [
    ("analysis-host-stall", _analysis, ROOT / "sample_traces" / "host_stall.sqlite"),
    ("analysis-graph", _analysis, ROOT / "sample_traces" / "graph.sqlite"),
    ("analysis-no-nvtx", _analysis, ROOT / "sample_traces" / "no_nvtx.sqlite"),
    ("analysis-tensorrt-htod", _analysis, SHARED / "fixtures" / "nsys-tensorrt" / "multistream_HtoD-bound.sqlite"),
    ("analysis-tensorrt-dtoh", _analysis, SHARED / "fixtures" / "nsys-tensorrt" / "multistream_DtoH-bound.sqlite"),
    ("incomplete-killed", _analysis, ROOT / "sample_traces" / "killed.sqlite"),
    ("sweep-h200", _sweep, ROOT / "sample_traces" / "harness_cls.summary.json"),
    ("sweep-h200-streams", _sweep, ROOT / "sample_traces" / "harness_cls_streams.summary.json"),
    ("sweep-h200-nsys", _sweep_nsys, ROOT / "sample_traces" / "harness_cls.sqlite"),
    ("layers-rtx3090", _layers, SHARED / "fixtures" / "trtexec" / "tensorflow" / "resnet" / "RTX-3090"),
    ("layers-qat", _layers, SHARED / "fixtures" / "trtexec" / "tests" / "inputs"),
]


def _layout(page) -> dict:
    """Sideways scroll of the page, and tables hiding columns behind a scroll bar: measured with every
    <details> open (a closed one has no width, so its tables would pass unmeasured)."""
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    return page.evaluate("""() => ({
        scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth,
        first: document.querySelector('main').firstElementChild.id,
        hidden: [...document.querySelectorAll('.tablewrap')].filter(w => w.scrollWidth > w.clientWidth + 1)
                .map(w => (w.closest('section') || {}).id)})""")


def _open_at_1400(browser, out: Path):
    page, errors = load(browser, out)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.wait_for_function("() => [...document.querySelectorAll('div.chart')]"
                           ".every(d => d.querySelector('svg.main-svg'))", timeout=30_000)
    return page, errors


@pytest.mark.parametrize("name,build,path", REAL_INPUTS, ids=[r[0] for r in REAL_INPUTS])
def test_real_reports_open_with_the_verdict_and_never_scroll_sideways_at_1400px(browser, name, build, path, tmp_path):
    if not path.exists():
        pytest.skip(f"{path} not found")
    out = write_report(build(path), tmp_path / f"{name}.html")
    page, errors = _open_at_1400(browser, out)
    lay = _layout(page)
    assert lay["first"] == "verdict", lay
    assert lay["scroll"] <= lay["client"], lay
    assert lay["hidden"] == [], f"tables hiding columns behind a scroll bar in {lay['hidden']}"
    assert errors == []
    status = page.inner_text("#verdict .vstatus")
    assert status in ("PASS", "ISSUES FOUND", "GATE FAILED", "REGRESSION", "INCONCLUSIVE", "FAILED",
                      "INCOMPLETE CAPTURE")
    if name.startswith("incomplete"):  # a capture that lost data never reads PASS: what was lost comes first
        assert status == "INCOMPLETE CAPTURE" and "not all CUDA events" in page.inner_text("#verdict .vheadline")
    if name.startswith("analysis") or name.endswith("-nsys"):
        lanes = page.evaluate("() => [...new Set([...document.querySelectorAll('#timeline div.chart')]"
                              ".flatMap(d => d.data.flatMap(t => t.y)))]")
        assert any(lane.startswith("thread ") for lane in lanes) and any(" · stream " in lane for lane in lanes)
    page.close()


def test_capture_index_page_fits_1280px_with_every_column_visible(browser, tmp_path):
    """``trtprof analyze A B C --out DIR``: the index of real captures (long paths, TensorRT findings)."""
    import subprocess
    import sys

    caps = [ROOT / "sample_traces" / f"{n}.sqlite" for n in ("harness_cls", "host_stall", "launch_bound")]
    caps += sorted((SHARED / "fixtures" / "nsys-tensorrt").glob("*.sqlite"))[:2]
    caps = [c for c in caps if c.is_file()]
    if len(caps) < 3:
        pytest.skip("sample traces not found")
    r = subprocess.run([sys.executable, "-m", "profiler", "analyze", *map(str, caps), "--no-store", "--out",
                        str(tmp_path / "idx")], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    page, errors = load(browser, tmp_path / "idx" / "index.html")
    for width in (1400, 1280):
        page.set_viewport_size({"width": width, "height": 1000})
        lay = page.evaluate("""() => ({scroll: document.documentElement.scrollWidth,
            client: document.documentElement.clientWidth,
            hidden: [...document.querySelectorAll('.tablewrap')].filter(w => w.scrollWidth > w.clientWidth + 1).length,
            rows: document.querySelectorAll('#captures tbody tr').length})""")
        assert lay["scroll"] <= lay["client"] and lay["hidden"] == 0, (width, lay)
        assert lay["rows"] == len(caps)
    assert errors == []
    page.close()


def test_synthetic_reports_too(browser, tmp_path):
    for name, data in (("sweep-20", sweep_example(n_variants=20, n_samples=2000)), ("compare", compare_example())):
        out = write_report(data, tmp_path / f"{name}.html")
        page, errors = _open_at_1400(browser, out)
        lay = _layout(page)
        assert lay["first"] == "verdict" and lay["scroll"] <= lay["client"] and lay["hidden"] == [], (name, lay)
        assert errors == []
        if name == "sweep-20":  # the per-layer chart: one bar per variant, each variant named on the axis
            xs = page.evaluate("() => document.getElementById('fig-layers').data.map(t => t.x)")
            assert all(x == xs[0] for x in xs) and len(xs[0]) == 20 and "?" not in xs[0]
        page.close()


def _in_first_viewport(page, selector: str) -> bool:
    """Whether the element ``selector`` starts inside the first 1000 px of the page (the first screen)."""
    return page.evaluate(f"""() => {{ const e = document.querySelector({selector!r});
        return e !== null && e.getBoundingClientRect().top + window.scrollY < window.innerHeight; }}""")


def test_the_first_screen_holds_the_verdict_and_what_it_is_about(browser, tmp_path):
    """At 1400x1000: an analysis report shows its verdict and the inference count (not the layer ranges'
    instances); a sweep report its verdict and the variants table, above the findings' evidence."""
    from profiler.capture.analyze import analyze_path

    capture = ROOT / "sample_traces" / "trt_eager.sqlite"
    if not capture.is_file():
        pytest.skip(f"{capture} not found")
    data = analyze_path(capture).to_json()
    page, errors = _open_at_1400(browser, write_report(data, tmp_path / "analysis.html"))
    assert _in_first_viewport(page, "#verdict .vstatus") and _in_first_viewport(page, ".cards .card")
    first = page.evaluate("() => [...document.querySelectorAll('.cards .card')][0].innerText")
    assert first.split("\n")[:2] == ["INFERENCES", str(data["inference"]["count"])]
    ranges = sum(r["count"] for r in data["ranges"])
    assert ranges > data["inference"]["count"]  # the layer ranges outnumber the inferences
    assert errors == []
    page.close()
    summary = sweep_example()
    summary["run"]["random_calibration"] = True
    page, errors = _open_at_1400(browser, write_report(summary, tmp_path / "sweep.html"))
    assert _in_first_viewport(page, "#verdict .vstatus")
    assert _in_first_viewport(page, "#variants table thead")
    order = page.evaluate("() => [...document.querySelectorAll('main section.sec')].map(s => s.id).slice(0, 2)")
    assert order == ["variants", "findings"]
    assert errors == []
    page.close()
