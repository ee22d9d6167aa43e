"""Output paths checked before the work starts, so a typo in ``--json``/``--report``/``--out`` costs one
sentence and exit 3 up front instead of a traceback after minutes of measuring."""

from __future__ import annotations

import os
from pathlib import Path

import click

from profiler.errors import InputError
from profiler.files import atomic_write_bytes, os_reason as _reason

__all__ = ["check_output_file", "check_output_dir", "write_text", "atomic_write_bytes"]


def check_output_file(path: str | None, option: str) -> None:
    """Make sure ``path`` (a file to write; '-' is stdout) can be written: parent folders are created. An empty
    name (``--json ''``) is a usage error, not a silent no-op."""
    if path == "":
        raise click.UsageError(f"{option} needs a file name ('-' for standard output)")
    if not path or path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option} {path} is a directory; give a file name")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write {option} {path}: {_reason(exc)}") from None
    if not p.parent.is_dir():
        raise InputError(f"cannot write {option} {path}: {p.parent} is not a directory")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"cannot write {option} {path}: permission denied")


def check_output_dir(path: str, option: str) -> Path:
    """Create the output directory ``path`` now (or say in one sentence why it cannot be)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{option} {path} is a file; give a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {option} directory {path}: {_reason(exc)}") from None
    if not os.access(p, os.W_OK):
        raise InputError(f"cannot write into {option} directory {path}: permission denied")
    return p


def write_text(path: str, text: str, option: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, then a rename): a full
    disk or a kill mid-write leaves the previous file or none, never a truncated one. An OS failure
    becomes one sentence naming the option."""
    atomic_write_bytes(Path(path), text.encode("utf-8"), option)
