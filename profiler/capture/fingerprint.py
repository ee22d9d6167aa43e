"""The content hash of a capture, remembered between runs so that finding a cache entry does not re-read
a multi-GB export.

Every cached trace and analysis is keyed by the SHA-256 of the capture's content (never its name, size or
mtime alone). Hashing reads the whole file: 0.9 s per GB on this project's 2-core box (1.15 GB/s in memory,
with SHA instructions), more from a cold disk, which would be most of what a cache hit costs. The memo keeps, per path, the hash with
the file's identity and change stamps from ``stat``: device, inode, size, ``mtime_ns`` and ``ctime_ns``.
``ctime`` is the stamp no program can set: writing the file, renaming another file onto its path, or
putting its old ``mtime`` back with ``utime`` all move it. Two guards cover stamps that do not move:

- **racy stamps** (git's "racily clean" problem): timestamps are coarse (a few ms on ext4, 2 s on FAT),
  so a file rewritten within the tick of the hash could keep the stamps the memo holds. A memo is written
  only when the file's last change is at least ``RACY_NS`` (2 s) older than the moment its hash was
  taken, and the stamps are the same before and after the hash; otherwise the next run hashes again.
- **a sampled check** on every use of a memo: the first and last MiB of the file (with its size) are read
  again and must match the digest remembered with the hash. It costs two small reads and catches a file
  replaced on a filesystem that does not keep ``ctime`` (some FUSE and network mounts).

What can still fool it: a change that keeps the device, inode, size, both stamps and both ends of the file,
which needs the system clock set back or a filesystem that lies about ``ctime``. ``--no-cache`` (or
``TRTPROF_TRACE_CACHE=0``) reads and analyses the capture itself on such filesystems.

A capture that is a folder (``nsys export --type parquetdir`` or ``arrowdir``) hashes as the sorted list
of its files' relative names and content hashes, each remembered as above.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from profiler.hashing import file_sha256

RACY_NS = 2_000_000_000
SAMPLE_BYTES = 1 << 20


def memo_dir() -> Path:
    """:func:`profiler.cache_dir.cache_root` + ``/hashes``."""
    from profiler.cache_dir import cache_root

    return cache_root() / "hashes"


def _stamps(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def sample_digest(path: Path, size: int) -> str:
    """SHA-256 of the size and the first and last ``SAMPLE_BYTES`` of the file."""
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        h.update(fh.read(SAMPLE_BYTES))
        if size > SAMPLE_BYTES:
            fh.seek(max(size - SAMPLE_BYTES, SAMPLE_BYTES))
            h.update(fh.read(SAMPLE_BYTES))
    return h.hexdigest()


def _memo_file(path: Path) -> Path:
    return memo_dir() / (hashlib.sha256(os.fsencode(path)).hexdigest()[:40] + ".json")


def _read_memo(path: Path, stamps: list[int]) -> str | None:
    try:
        memo = json.loads(_memo_file(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(memo, dict) or memo.get("path") != str(path) or memo.get("stamps") != stamps:
        return None
    try:
        if memo.get("sample") != sample_digest(path, stamps[2]):
            return None
    except OSError:
        return None
    sha = memo.get("sha256")
    return sha if isinstance(sha, str) and len(sha) == 64 else None


def _write_memo(path: Path, stamps: list[int], sha: str, sample: str) -> None:
    """Atomically (temporary file, then rename); a memo that cannot be written is only a lost shortcut."""
    target = _memo_file(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".memo.", dir=target.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump({"path": str(path), "stamps": stamps, "sha256": sha, "sample": sample}, fh)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)  # type: ignore[possibly-undefined]
        except (OSError, NameError):
            pass


def file_content_sha256(path: str | os.PathLike, *, memo: bool = True) -> str:
    """SHA-256 of one file's content, through the memo unless ``memo`` is False."""
    p = Path(os.path.abspath(path))
    if not memo:
        return file_sha256(p)
    before = _stamps(p.stat())
    known = _read_memo(p, before)
    if known is not None:
        return known
    started_ns = time.time_ns()
    sha = file_sha256(p)
    after = p.stat()
    last_change_ns = max(after.st_mtime_ns, after.st_ctime_ns)
    if _stamps(after) == before and started_ns - last_change_ns >= RACY_NS:
        try:
            _write_memo(p, before, sha, sample_digest(p, before[2]))
        except OSError:
            pass
    return sha


def content_sha256(path: str | os.PathLike, *, memo: bool = True) -> str:
    """SHA-256 of a capture's content: a file's bytes, or for a folder the sorted relative names and
    content hashes of the files inside it."""
    p = Path(path)
    if not p.is_dir():
        return file_content_sha256(p, memo=memo)
    h = hashlib.sha256(b"folder\0")
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        h.update(f.relative_to(p).as_posix().encode() + b"\0")
        h.update(file_content_sha256(f, memo=memo).encode() + b"\0")
    return h.hexdigest()
