"""``.nsys-rep`` -> SQLite export, through ``nsys export`` (reports are a private binary format).

The export is written beside the report (``capture.nsys-rep`` -> ``capture.sqlite``), as
``nsys stats`` does, and reused while it is newer than the report; when that folder is not
writable it goes to a per-user cache folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from profiler.errors import InputError

EXPORT_TIMEOUT_S = 3600


#: where Nsight Systems installs itself when it is not on PATH
NSYS_GLOBS = ("/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
              "/usr/local/cuda*/bin/nsys", "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys")


def find_nsys() -> str | None:
    """Path of the ``nsys`` executable: ``TRTPROF_NSYS`` (exclusively, when set), then PATH, then the
    usual install folders; None when there is none."""
    import glob

    override = os.environ.get("TRTPROF_NSYS")
    if override:
        return override if Path(override).is_file() else None
    found = shutil.which("nsys")
    if found:
        return found
    for pattern in NSYS_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def _fresh(sqlite: Path, report: Path) -> bool:
    return sqlite.is_file() and sqlite.stat().st_size > 0 and sqlite.stat().st_mtime >= report.stat().st_mtime


def export_sqlite(report: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """The SQLite export of an nsys report, exporting it with ``nsys export`` when needed."""
    report = Path(report)
    if not report.is_file():
        raise InputError(f"capture file not found: {report}")
    candidates = [Path(out)] if out is not None else [
        report.with_suffix(".sqlite"),
        Path(tempfile.gettempdir()) / "trtprof-exports" /
        (hashlib.sha1(str(report.resolve()).encode()).hexdigest()[:16] + ".sqlite"),
    ]
    for candidate in candidates:
        if _fresh(candidate, report):
            return candidate
    nsys = find_nsys()
    if nsys is None:
        raise InputError(f"{report} is an nsys report and 'nsys' is not on PATH to export it: run "
                         f"'nsys export --type sqlite {report}' where Nsight Systems is installed and "
                         f"pass the .sqlite file")
    last_error = ""
    for candidate in candidates:
        try:
            candidate.parent.mkdir(parents=True, exist_ok=True)
            if not os.access(candidate.parent, os.W_OK):
                continue
        except OSError:
            continue
        cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
               "-o", str(candidate), str(report)]  # the form used on the H200 (nsys 2025.3)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(f"'nsys export' failed on {report}: {exc}") from exc
        if proc.returncode == 0 and candidate.is_file():
            return candidate
        last_error = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        last_error = last_error[0]
    raise InputError(f"'nsys export' could not export {report}: {last_error or 'no writable folder'}")
