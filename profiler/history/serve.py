"""``trtprof history --serve``: the same pages, made from the store at each request (a new run shows on the next
reload), plus the live pages a static site cannot hold: a stored run's report and the compare of two runs. Only
GET; nothing is written to the store. Bound to 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import http.server
import json
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from profiler.errors import InputError
from profiler.history.review import history_document, review_store
from profiler.history.site import PLOTLY_ASSET, index_html, series_html, subtitle_of

_SERIES = re.compile(r"^/series/([0-9a-f]{12})\.html$")
_COMPARE = re.compile(r"^/compare/(\d+)/(\d+)\.html$")
_REPORT = re.compile(r"^/report/(\d+)\.html$")


class Site:
    """The reviewed series, re-read when the store's runs change (their count or newest id)."""

    def __init__(self, store, *, db: str | None, label: str | None, model: str | None, rule: dict | None):
        self.store, self.db, self.label, self.model, self.rule = store, db, label, model, rule
        self._stamp: Any = None
        self._reviewed: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _current_stamp(self) -> Any:
        from profiler.store.queries import runs_stamp

        return runs_stamp(self.store)

    def reviewed(self) -> list[dict[str, Any]]:
        with self._lock:
            stamp = self._current_stamp()
            if stamp != self._stamp:
                self._reviewed = review_store(self.store, label=self.label, model=self.model, rule=self.rule)
                self._stamp = stamp
            return self._reviewed

    def page(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``path``."""
        html = "text/html; charset=utf-8"
        if path in ("/", "/index.html"):
            rv = self.reviewed()
            return 200, html, index_html(rv, title="trtprof history (live)",
                                         subtitle=subtitle_of(self.label, self.model, self.db, len(rv))).encode()
        if path == "/favicon.ico":
            return 204, "image/x-icon", b""
        if path == "/" + PLOTLY_ASSET:
            from profiler.report.render import plotly_js

            return 200, "application/javascript; charset=utf-8", plotly_js().encode()
        if path == "/history.json":
            return 200, "application/json", json.dumps(history_document(self.reviewed()), default=str).encode()
        if (m := _SERIES.match(path)) is not None:
            s = next((s for s in self.reviewed() if s["id"] == m.group(1)), None)
            if s is not None:
                return 200, html, series_html(s, db=self.db, live=True, cdn=False).encode()
        if (m := _COMPARE.match(path)) is not None:
            return 200, html, self._compare(int(m.group(1)), int(m.group(2)))
        if (m := _REPORT.match(path)) is not None:
            return 200, html, self._report(int(m.group(1)))
        return 404, "text/plain; charset=utf-8", b"not found\n"

    def _file_page(self, write: Callable[[Path], Any]) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "page.html"
            write(out)
            return out.read_bytes()

    def _compare(self, a: int, b: int) -> bytes:
        from profiler.compare import compare_runs
        from profiler.report import write_compare_report

        data = compare_runs(self.store, a, b, force=True)
        return self._file_page(lambda out: write_compare_report(data, out))

    def _report(self, run_id: int) -> bytes:
        from profiler.report import write_report

        data = self.store.report_data(run_id)
        if not data:
            raise InputError(f"run {run_id} has no stored results to report")
        return self._file_page(lambda out: write_report(data, out))


#: Names a loopback server answers to: a page elsewhere that points its own host name at 127.0.0.1 (DNS
#: rebinding) sends its own name in Host and is refused.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _host_allowed(host_header: str | None, address: tuple) -> bool:
    """True unless the server is bound to a loopback address and the request names another host."""
    bound = str(address[0])
    if not (bound.startswith("127.") or bound == "::1"):
        return True
    name = (host_header or "").strip().lower()
    name = name[:name.index("]") + 1] if name.startswith("[") and "]" in name else name.split(":", 1)[0]
    return name in LOOPBACK_NAMES or name == bound


def make_server(site: Site, host: str, port: int) -> http.server.ThreadingHTTPServer:
    """A server answering ``site``'s pages; InputError when the port cannot be bound."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if not _host_allowed(self.headers.get("Host"), self.server.server_address):
                self._send(403, "text/plain; charset=utf-8", b"this server answers only requests addressed to it\n")
                return
            try:
                status, ctype, body = site.page(self.path.split("?", 1)[0])
            except InputError as exc:
                status, ctype, body = 404, "text/plain; charset=utf-8", f"{exc}\n".encode()
            self._send(status, ctype, body)

        def _send(self, status: int, ctype: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
            return

    try:
        return http.server.ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise InputError(f"cannot serve the history on {host}:{port}: {exc.strerror or exc} (is the port in use? "
                         "give another --port)") from None
