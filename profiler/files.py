"""Writing result files: atomically, with an OS failure said in one sentence (for the library and the CLI)."""

from __future__ import annotations

import os
from pathlib import Path

from profiler.errors import InputError


def os_reason(exc: OSError) -> str:
    """Why an OS call failed, in words: 'permission denied', 'a file stands where a directory is needed'."""
    if isinstance(exc, (NotADirectoryError, FileExistsError)):
        return "a file stands where a directory is needed"
    if isinstance(exc, IsADirectoryError):
        return "it is a directory"
    return exc.strerror or type(exc).__name__


def atomic_write_bytes(path: Path, data: bytes, option: str) -> None:
    """``data`` into ``path`` through a temporary sibling and ``os.replace``: a full disk or a kill
    mid-write leaves the previous file or none, never a truncated one. ``option`` names the path in
    the error (``--out``)."""
    import tempfile

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise InputError(f"cannot write {option} {path}: {os_reason(exc)}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
