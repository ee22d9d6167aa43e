"""Writing result files: atomically, with an OS failure said in one sentence (for the library and the CLI)."""

from __future__ import annotations

import os
import stat
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


def path_kind(mode: int) -> str:
    """What a non-regular path is, in words ('a directory', 'a named pipe (FIFO)', 'a device', 'a socket')."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def check_input_file(path: str | Path, what: str, expected: str) -> None:
    """One rule for every file a command reads: a path that is missing, or is a directory, a FIFO, a device or a
    socket where a regular file is needed, is bad input (:class:`InputError`, exit 3), said in one sentence
    (``{what} {path} is a directory, not {expected}``). Checked before the file is opened, since opening a
    FIFO blocks until some other process writes to it. (An output path of the wrong kind is a usage error
    instead: see ``profiler.cli.outputs``.)"""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist (give {expected})") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {os_reason(exc)}") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {path} is {path_kind(mode)}, not {expected}")


def atomic_write_bytes(path: Path, data: bytes, option: str) -> None:
    """``data`` into ``path``, naming ``option`` (``--out``) in the one-sentence error (exit 3). A regular
    file (or a new path) is written through a temporary sibling and ``os.replace``, so a full disk or a kill
    mid-write leaves the previous file or none, never a truncated one. A symlink is followed (its target is
    written, the link stays); a device or a FIFO (``/dev/null``, ``/dev/stdout``) is written in place, since
    renaming over it would replace it with a regular file."""
    if str(path) == "-":
        _write_stdout(data, option)
        return
    try:
        mode = os.stat(path).st_mode  # what the path names, through any symlink
    except OSError:
        mode = None  # a new path, or a link to one
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        _write_in_place(path, data, option, shown=path)
    else:
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        _replace_with(target, data, option, shown=path)


def _write_stdout(data: bytes, option: str) -> None:
    import sys

    try:
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None)
        if out is None:
            sys.stdout.write(data.decode("utf-8"))
        else:
            out.write(data)
            out.flush()
    except OSError as exc:
        raise InputError(f"cannot write {option} to standard output: {os_reason(exc)}") from None


def _write_in_place(target: Path, data: bytes, option: str, shown: Path) -> None:
    """A device or a FIFO: opened for writing as it is (no truncation, no rename)."""
    try:
        fd = os.open(target, os.O_WRONLY)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as exc:
        raise InputError(f"cannot write {option} {shown}: {os_reason(exc)}") from None


def _replace_with(target: Path, data: bytes, option: str, shown: Path) -> None:
    """A regular file or a new path: a temporary sibling, fsynced, then renamed over ``target``."""
    import tempfile

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise InputError(f"cannot write {option} {shown}: {os_reason(exc)}") from None
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
