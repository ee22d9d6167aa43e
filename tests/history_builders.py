"""Stores of synthetic runs for the history tests: one run per median, oldest first, with known steps."""

from __future__ import annotations

import datetime as dt

import numpy as np

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)


def noisy(levels, noise_rel: float, seed: int) -> np.ndarray:
    """``levels`` (one per run) times 1 + N(0, noise_rel)."""
    rng = np.random.default_rng(seed)
    levels = np.asarray(levels, dtype=float)
    return levels * (1 + rng.normal(0, noise_rel, len(levels)))


def fill(store, medians, *, key: str = "fp16-ws1G-s1", model: str = "/m/resnet.onnx", label: str = "nightly",
         driver_from: dict[int, str] | None = None, samples: int = 0, start: int = 0, gpu: str = "NVIDIA H200",
         seed: int = 0) -> list[int]:
    """One sweep run per median (run i created at T0 + i hours), its variant ``key`` with that median; the
    driver is ``driver_from``'s value from run index on (580.1 before); ``samples`` per-iteration samples around the
    median when asked (for compare pages). Returns the run ids, oldest first."""
    rng = np.random.default_rng(seed)
    drivers = sorted((driver_from or {}).items())
    ids = []
    for i, med in enumerate(medians):
        driver = "580.1"
        for at, d in drivers:
            if i >= at:
                driver = d
        rid = store.create_run(kind="sweep", source=model, label=label, gpu=gpu, driver_version=driver,
                               backend="tensorrt", model=model, created_at=T0 + dt.timedelta(hours=start + i))
        smp = None
        if samples:
            smp = [{"idx": j, "latency_ms": float(med * (1 + 0.01 * x))} for j, x in enumerate(rng.normal(0, 1, samples))]
        store.add_variant(rid, {"key": key, "fingerprint": f"fp-{key}", "precision": "fp16", "backend": "tensorrt",
                                "latency_ms": {"median": float(med), "p99": float(med) * 1.15, "count": samples or 100},
                                "memory": {"rss_after_run_bytes": 5e8}},
                          samples=smp, accuracy=[{"output": "y", "cosine": 0.9999, "max_abs": 1e-3, "passed": True}])
        store.finish_run(rid)
        ids.append(rid)
    return ids
