"""Output paths checked before the work starts, so a typo in ``--json``/``--report``/``--out`` costs one
sentence up front instead of a traceback after minutes of measuring.

One rule for paths of the wrong kind: an *output* path that is a directory where a file is written (or a file,
FIFO or device where a directory is written) is a usage error (exit 2, as click says of ``dir_okay=False``
paths); an *input* path of the wrong kind is bad input (exit 3, :func:`profiler.files.check_input_file`). An
output that cannot be written for another reason (permissions, a full disk) is exit 3 naming the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

import click

from profiler.errors import InputError, UsageError
from profiler.files import atomic_write_bytes, os_reason as _reason

__all__ = ["check_output_file", "check_output_dir", "check_outputs", "store_file", "write_text",
           "atomic_write_bytes"]


def check_output_file(path: str | None, option: str) -> None:
    """Make sure ``path`` (a file to write; '-' is stdout) can be written: parent folders are created. An empty
    name (``--json ''``) is a usage error, not a silent no-op."""
    if path == "":
        raise click.UsageError(f"{option} needs a file name ('-' for standard output)")
    if not path or path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {path} is a directory; give a file name")
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
        raise UsageError(f"{option} {path} is {_kind(p)}; give a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {option} directory {path}: {_reason(exc)}") from None
    if not os.access(p, os.W_OK):
        raise InputError(f"cannot write into {option} directory {path}: permission denied")
    return p


def _kind(p: Path) -> str:
    from profiler.files import path_kind

    mode = p.stat().st_mode
    return "a file" if stat.S_ISREG(mode) else path_kind(mode)


def write_text(path: str, text: str, option: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, then a rename): a full
    disk or a kill mid-write leaves the previous file or none, never a truncated one. An OS failure
    becomes one sentence naming the option."""
    atomic_write_bytes(Path(path), text.encode("utf-8"), option)


def store_file(url: str | None) -> str | None:
    """The file of a SQLite run store URL (``--db``, TRTPROF_DB or ./trtprof.db), None for a server."""
    from profiler.store.api import resolve_url

    resolved = resolve_url(url)
    if not resolved.startswith("sqlite:///"):
        return None
    path = resolved[len("sqlite:///"):]
    return None if path in ("", ":memory:") else path


def _identity(path: str) -> tuple[str, tuple[int, int] | None, int | None]:
    """(resolved path, (device, inode) when it exists, its st_mode)."""
    try:
        st = os.stat(path)
        ident, mode = (st.st_dev, st.st_ino), st.st_mode
    except (OSError, ValueError):
        ident, mode = None, None
    return os.path.realpath(path), ident, mode


def _same(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] or (a[1] is not None and a[1] == b[1])


#: The most files of an input folder whose inodes are compared with the outputs (a folder of exports has tens).
MAX_FOLDER_FILES = 100_000


def _inside(out: tuple, folder: tuple, inodes: set[tuple[int, int]]) -> bool:
    """An existing file under an input folder (a Parquet capture, a folder of trtexec exports), by its path or
    as another name (a hard link) of one of the folder's files."""
    if folder[2] is None or not stat.S_ISDIR(folder[2]) or out[1] is None:
        return False
    return out[0].startswith(folder[0].rstrip(os.sep) + os.sep) or out[1] in inodes


def _folder_inodes(path: str) -> set[tuple[int, int]]:
    """(device, inode) of the files under ``path`` (at most :data:`MAX_FOLDER_FILES`)."""
    found: set[tuple[int, int]] = set()
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            found.add((st.st_dev, st.st_ino))
            if len(found) >= MAX_FOLDER_FILES:
                return found
    return found


def check_outputs(outputs: Iterable[tuple[str, str | None]], inputs: Iterable[tuple[str, str | None]] = (),
                  store: str | None = None) -> None:
    """Refuse (exit 2, one sentence) an output that would overwrite what the command reads: an input file
    (same path once resolved, or the same inode through another name or a hard link), an existing file inside
    an input folder, the run store's file, or another output of the same command. ``outputs`` and ``inputs``
    are (option or role, path) pairs; '-' (standard output) and unset ones are skipped. Devices and FIFOs
    written in place (``/dev/null``) may be named by several outputs."""
    outs = [(opt, p, _identity(p)) for opt, p in outputs if p and p != "-"]
    ins = [(what, p, _identity(p)) for what, p in inputs if p and p != "-"]
    if store:
        ins.append(("the run store (--db)", store, _identity(store)))
    folders = {p: _folder_inodes(p) for _, p, ident in ins if ident[2] is not None and stat.S_ISDIR(ident[2])}
    for i, (opt, path, ident) in enumerate(outs):
        for what, in_path, in_ident in ins:
            if _same(ident, in_ident):
                raise UsageError(f"{opt} {path} is {what} {in_path}, which this command reads; "
                                 "give the output another file name")
            if _inside(ident, in_ident, folders.get(in_path, set())):
                raise UsageError(f"{opt} {path} is one of the files of {what} {in_path}, which this command reads; "
                                 "write the output elsewhere")
        for other, _other_path, other_ident in outs[:i]:
            in_place = ident[2] is not None and not stat.S_ISREG(ident[2])
            if _same(ident, other_ident) and not in_place:
                raise UsageError(f"{other} and {opt} both name {path}; give each output its own file")
