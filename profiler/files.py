"""Writing result files: atomically, with an OS failure said in one sentence (for the library and the CLI)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

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


def write_folder_atomically(final: Path, marker: str, fill: Callable[[Path], None]) -> bool:
    """A cache entry: ``fill(tmp)`` writes the files into a temporary sibling folder, which is then renamed
    to ``final``, so a reader never sees half an entry. ``marker`` is the file whose presence means a
    complete entry. Returns whether ``final`` holds one afterwards; a failure (disk, permissions, a writer's
    error) returns False and leaves nothing behind, since a cache never stops the work it serves. When
    another process stored the same entry first, its copy is kept."""
    import shutil
    import tempfile

    if (final / marker).is_file():
        return True
    tmp: Path | None = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        fill(tmp)
        try:
            os.replace(tmp, final)
        except OSError:  # another process stored the same entry first: keep its copy
            pass
        return (final / marker).is_file()
    except Exception:
        return False
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
