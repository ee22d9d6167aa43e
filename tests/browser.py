"""Headless Chromium for the browser tests: where it is and how it is started (no downloads: Debian's
``chromium``, which ``.ci/run`` installs, or TRTPROF_CHROMIUM)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterator

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


def chromium_context(tmp_path_factory: Any, **options: Any) -> Iterator[Any]:
    """A browser fixture's body: a headless Chromium context with a fresh profile (``--user-data-dir``),
    ``options`` passed to Playwright's ``launch_persistent_context`` (a viewport); skips the test when
    Chromium or Playwright is absent."""
    import pytest

    exe = chromium_path()
    if exe is None:
        pytest.skip("headless Chromium not found (apt-get install chromium, or set TRTPROF_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install 'trtprof[test]')")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(str(profile), executable_path=exe, headless=True,
                                                        args=CHROMIUM_ARGS, **options)
        try:
            yield context
        finally:
            context.close()
