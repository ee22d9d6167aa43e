"""``--repeat N``: after all variants, N fresh processes re-time every measured variant (the run-to-run
spread that ``trtprof compare`` needs), stored with each variant as ``repeats``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.backends.base import Backend
from profiler.findings import json_safe
from profiler.sweep.config import BUSY_HOST_SHARE

if TYPE_CHECKING:
    from profiler.sweep.run import Sweep


def repeat_variants(sweep: Sweep, backend: Backend, feed: dict[str, np.ndarray]) -> None:
    """Re-time the sweep's measured variants in ``config.repeat`` new processes, interleaved; each gets
    ``repeats`` = {medians_ms (one per process), spread_rel, host_others_shares, errors}."""
    from profiler.harness.repeat import run_repeats

    c = sweep.config
    ok = [v for v in sweep.variants if v.get("status") == "ok" and v.get("model_path") and not v.get("repeats")]
    if not ok:
        return
    sweep.say(f"--repeat {c.repeat}: {c.repeat} new processes time {len(ok)} variant(s) each "
              "(the run-to-run spread that trtprof compare needs)")
    got = run_repeats(ok, backend=backend.name, backend_options=backend.process_options(),
                      harness={"iterations": int(c.iterations), "duration_s": float(c.duration_s),
                               "warmup_ms": float(c.warmup_ms), "overlap": bool(c.overlap)},
                      transfers=c.transfers, feeds=feed, cache_dir=str(c.cache_root() / "engines"),
                      repeats=c.repeat, progress=sweep.say)
    for v in ok:
        v["repeats"] = rep = _said(sweep, v["key"], json_safe(got[v["key"]]))
        if sweep.store is not None and sweep.run_id is not None:
            sweep.store.update_variant_metrics(sweep.run_id, v["key"], {"repeats": rep})


def _said(sweep: Sweep, key: str, rep: dict[str, Any]) -> dict[str, Any]:
    """One variant's repeats, its spread added, said: the medians, a loaded host, the failed repeats."""
    meds = rep["medians_ms"]
    busy = [x for x in rep.get("host_others_shares") or [] if x is not None and x >= BUSY_HOST_SHARE]
    if busy:
        sweep.say(f"  {key}: other processes took up to {max(busy) * 100:.0f}% of the host's CPU during "
                  f"{len(busy)} of the repeats; trtprof compare holds that load against any change")
    if meds:
        rep["spread_rel"] = float((max(meds) - min(meds)) / np.median(meds)) if len(meds) > 1 else None
        sweep.say(f"  {key}: medians of {len(meds)} processes {', '.join(f'{m:.3f}' for m in meds)} ms"
                  + (f" (spread {rep['spread_rel'] * 100:.1f}%)" if rep["spread_rel"] is not None else ""))
    for err in dict.fromkeys(rep["errors"]):
        sweep.say(f"  {key}: a repeat failed: {err}")
    return rep
