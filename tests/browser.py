"""Headless Chromium for the browser tests: where it is and how it is started (no downloads: Debian's
``chromium``, which ``.ci/run`` installs, or TRTPROF_CHROMIUM)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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
