"""SHA-256 of files, read in chunks: the one helper every content key (runs, caches, engines) uses."""

from __future__ import annotations

import hashlib
import os

CHUNK_BYTES = 1 << 22


def file_sha256(*paths: str | os.PathLike, chunk_bytes: int = CHUNK_BYTES) -> str:
    """Hex SHA-256 of the files' contents, in order (a model and its external data files hash as one)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as fh:
            while block := fh.read(chunk_bytes):
                h.update(block)
    return h.hexdigest()


def file_sha256_or_none(path: str | os.PathLike) -> str | None:
    """:func:`file_sha256`, or None when the file cannot be read (a run's optional ``source_hash``)."""
    try:
        return file_sha256(path)
    except OSError:
        return None


__all__ = ["CHUNK_BYTES", "file_sha256", "file_sha256_or_none"]
