"""One owner per run at a time: a lease (owner, expiry) on the run row, renewed by a heartbeat.

A sweep holds its run's lease while it measures; ``trtprof sweep --resume`` takes the lease in one
write transaction (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT ... FOR UPDATE``), so two processes
can never both work on one run. A process that dies stops renewing, its lease expires after
``LEASE_TTL_S``, and the run can then be resumed. Runs stored before leases existed have none and can
be resumed as before.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import uuid
from typing import Any

from sqlalchemy import select

from profiler.errors import UsageError
from profiler.store import models as m

LEASE_TTL_S = 120.0
HEARTBEAT_S = 30.0


def new_owner() -> str:
    """host:pid:token, unique per claim (a token, so a reused pid is never mistaken for the owner)."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    """SQLite hands back naive datetimes (stored UTC)."""
    return t.replace(tzinfo=dt.timezone.utc) if t is not None and t.tzinfo is None else t


def claim(store: Any, run_id: int, owner: str, ttl_s: float = LEASE_TTL_S) -> None:
    """Take the run's lease, marking it running; UsageError if another live process holds it."""
    with store.write_session() as s, s.begin():
        run = s.execute(select(m.Run).where(m.Run.id == run_id).with_for_update()).scalar_one()
        expires = _aware(run.lease_expires_at)
        now = _now()
        if run.status == "running" and run.lease_owner and run.lease_owner != owner and expires and expires > now:
            host, _, rest = run.lease_owner.partition(":")
            pid = rest.split(":")[0]
            raise UsageError(
                f"run {run_id} is still running (process {pid} on {host}, heartbeat due within "
                f"{(expires - now).total_seconds():.0f} s); wait for it to finish, or stop it first. A run whose "
                f"process died can be resumed {ttl_s:.0f} s after its last heartbeat")
        run.status = "running"
        run.lease_owner = owner
        run.lease_expires_at = now + dt.timedelta(seconds=ttl_s)


def renew(store: Any, run_id: int, owner: str, ttl_s: float = LEASE_TTL_S) -> bool:
    """Extend the lease if ``owner`` still holds it; False when it was lost (taken after expiring)."""
    with store.write_session() as s, s.begin():
        run = s.get(m.Run, run_id)
        if run is None or run.lease_owner != owner:
            return False
        run.lease_expires_at = _now() + dt.timedelta(seconds=ttl_s)
        return True


def release(store: Any, run_id: int, owner: str) -> None:
    """Give the lease up (the run finished, failed or was interrupted)."""
    with store.write_session() as s, s.begin():
        run = s.get(m.Run, run_id)
        if run is not None and run.lease_owner == owner:
            run.lease_owner = None
            run.lease_expires_at = None


class Heartbeat:
    """Renews a lease every ``every_s`` seconds from a daemon thread until stopped."""

    def __init__(self, store: Any, run_id: int, owner: str, every_s: float = HEARTBEAT_S,
                 ttl_s: float = LEASE_TTL_S):
        self.store, self.run_id, self.owner = store, run_id, owner
        self.every_s, self.ttl_s = every_s, ttl_s
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"trtprof-lease-{run_id}", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                if not renew(self.store, self.run_id, self.owner, self.ttl_s):
                    self.lost = True
                    return
            except Exception:  # a store hiccup: try again at the next beat, the lease has slack
                continue
