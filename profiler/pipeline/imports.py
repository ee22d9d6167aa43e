"""The import task: trtexec export sets read into the import document (variants, layers, alignment, findings),
stored as one run, written as JSON and the per-layer report.

    outcome = import_exports(ImportRequest(("exports/",), json_path="import.json", store_url=url))
    outcome.data["variants"], outcome.run_id

The task prints nothing: what a caller shows (the JSON on stdout, a missing report renderer) is in the outcome.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ImportRequest:
    """What to import and where it goes (None: not written)."""

    paths: tuple[str, ...]
    """Export files or folders (files grouped by name prefix)."""
    variant_names: tuple[str, ...] = ()
    """The variant key of each export set, in the order they are found; default: from their prefixes."""
    label: str | None = None
    json_path: str | None = None
    """``-``: the JSON text comes back in the outcome instead (the caller prints it)."""
    report_path: str | None = None
    store_url: str | None = None
    """The run store to record the run in, already created (the task opens it without upgrading)."""


@dataclass(frozen=True)
class ImportOutcome:
    """What one import made: the document (``run.id`` set once stored)."""

    data: dict[str, Any]
    run_id: int | None = None
    json_text: str | None = None
    report_missing: bool = False
    """A report was asked for and this build has no report renderer."""


def import_exports(request: ImportRequest, store: Any = None) -> ImportOutcome:
    """Read, store and write the exports of ``request``. ``store``: an open run store to record into (else
    ``request.store_url``'s, opened and closed here)."""
    from profiler.layers.importer import build_import

    data, exports = build_import(list(request.paths), request.variant_names, request.label)
    run_id = _store(request, data, exports, store)
    if run_id is not None:
        data["run"]["id"] = run_id
    json_text = None
    if request.json_path:
        text = json.dumps(data, indent=2)
        if request.json_path == "-":
            json_text = text
        else:
            from profiler.files import atomic_write_bytes

            atomic_write_bytes(Path(request.json_path), text.encode("utf-8"), "--json")
    return ImportOutcome(data, run_id, json_text, _write_report(data, request.report_path))


def _store(request: ImportRequest, data: dict[str, Any], exports: list, store: Any) -> int | None:
    if store is None and not request.store_url:
        return None
    from profiler.layers.importer import store_import

    own = store is None
    if own:
        from profiler.store import Store

        store = Store.open(request.store_url, upgrade=False)
    try:
        return store_import(store, data, exports)
    finally:
        if own:
            store.close()


def _write_report(data: dict[str, Any], path: str | None) -> bool:
    """Write the per-layer report; True when it was asked for and this build cannot render one."""
    if not path:
        return False
    try:
        from profiler.report import write_layers_report
    except ImportError:
        return True
    write_layers_report(data, path, cdn=False)
    return False
