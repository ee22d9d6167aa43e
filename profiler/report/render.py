"""Render a report page (plain data) to one self-contained HTML file.

Jinja2 with autoescaping renders ``reports/templates/<kind>.html.j2``; the figures (plotly JSON specs
built in Python) go into the page once, as one JSON block that a small inline script hands to
``Plotly.newPlot``. plotly.js itself is embedded once (read from the installed plotly package), so the
file opens offline, or referenced from a CDN with ``cdn=True``.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import re
from pathlib import Path
from typing import Any

from profiler.errors import InputError
from profiler.findings import json_safe

CDN_URL = "https://cdn.plot.ly/plotly-{version}.min.js"


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """The minified plotly.js bundle that ships inside the installed plotly package."""
    from importlib import resources

    from profiler.errors import InputError

    try:
        text = (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, OSError) as exc:
        raise InputError(f"the plotly package's plotly.min.js could not be read ({exc}); "
                         "reinstall plotly or write the report with cdn=True") from exc
    # A literal "</script" inside the bundle would end the <script> element early.
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)


@functools.lru_cache(maxsize=1)
def plotly_js_version() -> str:
    """plotly.js's version, read from the bundle's header comment (``plotly.js vX.Y.Z``)."""
    m = re.search(r"plotly\.js v(\d+\.\d+\.\d+)", plotly_js()[:2000])
    if m:
        return m.group(1)
    from plotly.offline import get_plotlyjs_version  # pragma: no cover - header format changed

    return get_plotlyjs_version()  # pragma: no cover


def plotly_cdn_url() -> str:
    return CDN_URL.format(version=plotly_js_version())


@functools.lru_cache(maxsize=1)
def environment():
    """The Jinja2 environment over the templates of the ``reports`` package (autoescape on)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.ChainableUndefined,
    )
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "separators": (",", ":"), "allow_nan": False}
    return env


def render_html(page: dict[str, Any], *, cdn: bool = False) -> str:
    """The HTML text of a page built by one of the ``build_*_page`` functions."""
    from profiler import __version__

    env = environment()
    template = env.get_template(f"{page['kind']}.html.j2")
    figures = json_safe(page.get("figures") or {})
    context = {
        "page": page,
        "figures": figures,
        "cdn": cdn,
        "plotly_src": plotly_cdn_url() if cdn else None,
        "plotly_inline": None if cdn else _markup(plotly_js()),
        "generated_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "version": __version__,
    }
    return template.render(**context)


def _markup(text: str):
    from markupsafe import Markup

    return Markup(text)


def write_html(page: dict[str, Any], path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """Render ``page`` and write it atomically to ``path`` (parent folders are created): a reader never
    sees half a report."""
    from profiler.files import atomic_write_bytes, os_reason

    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write the report {out}: {os_reason(exc)}") from None
    atomic_write_bytes(out, render_html(page, cdn=cdn).encode("utf-8"), "the report")
    return out
