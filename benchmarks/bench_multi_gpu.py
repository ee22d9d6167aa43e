"""One sweep three ways on a multi-GPU host: serial (one GPU), ``--devices 0,1``, and a Dask cluster of one
worker per GPU (``dask scheduler`` + ``dask worker --resources GPU=1`` with ``CUDA_VISIBLE_DEVICES`` each).

    python3 benchmarks/bench_multi_gpu.py --model ch_PP-OCRv4_rec_infer.onnx --shape x:1x3x48x320 --out /tmp/mg

Each mode is the real command line (``python3 -m profiler sweep ...``) in a subprocess; the table gives:

- wall time (each mode with its own empty cache: every mode converts and builds the same engines) of the whole command and of its variant phase (from the first variant line on stderr, or the
  "variants run on" line, to the exit), and the speed-up against the serial run;
- each variant's median latency per mode and its ratio to the serial value (isolation: a GPU that measured
  one variant at a time should give the serial number within run-to-run noise);
- evidence that both GPUs worked at once: the seconds during which variant tasks overlapped on the two
  GPUs (from each variant's recorded start and end), and the share of ``nvidia-smi`` samples (every
  100 ms) in which both GPUs showed utilisation above zero;
- whether any GPU ever ran two variants at once (it must not) and the devices_differ finding, if any.

``--modes serial,dask,serial2`` repeats the serial run, so each variant's run-to-run noise on one GPU is
printed beside the parallel modes' deviations.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_mode(name: str, args: argparse.Namespace, extra: list[str], env: dict | None = None) -> dict:
    """The sweep command of one mode; wall times from its stderr lines."""
    out = Path(args.out) / name
    cmd = [sys.executable, "-m", "profiler", "--db", str(Path(args.out) / f"{name}.db"), "sweep", args.model,
           "--backend", args.backend, "--precision", args.precisions, "--streams", args.streams,
           "--cuda-graph", args.graphs, "--duration", str(args.duration), "--warmup", str(args.warmup),
           "--no-layers", "--no-localize", "--out", str(out), "--cdn", "--cache-dir", str(Path(args.out) / f"cache-{name}"),
           *sum((["--shape", s] for s in args.shape), []), *extra]
    t0 = time.monotonic()
    first_variant = None
    log = open(Path(args.out) / f"{name}.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    for line in proc.stdout:
        log.write(f"{time.monotonic() - t0:8.2f} {line}")
        if first_variant is None and (line.startswith("[1/") or line.startswith("variants run on")):
            first_variant = time.monotonic()
    rc = proc.wait()
    end = time.monotonic()
    log.close()
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return {"name": name, "rc": rc, "wall_s": end - t0, "variant_phase_s": end - (first_variant or t0),
            "started_epoch": time.time() - (end - t0), "ended_epoch": time.time(), "summary": summary}


def start_dask(gpus: list[str], port: int) -> tuple[list[subprocess.Popen], str]:
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--no-dashboard"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    for g in gpus:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--nworkers", "1",
             "--resources", "GPU=1", "--name", f"gpu{g}", "--no-dashboard"],
            cwd=ROOT, env={**os.environ, "CUDA_VISIBLE_DEVICES": g}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
    from distributed import Client

    with Client(address, timeout="60s") as c:
        c.wait_for_workers(len(gpus), timeout=120)
    return procs, address


def overlap_s(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def self_overlap(spans: list[tuple[float, float]]) -> float:
    spans = sorted(spans)
    return sum(max(0.0, e1 - s2) for (_, e1), (s2, _) in zip(spans, spans[1:]))


def smi_both_busy(samples: list[tuple[float, str, float]], t0: float, t1: float) -> tuple[float, dict]:
    """Share of sampling instants in [t0, t1] where every GPU showed utilisation > 0; per-GPU busy share."""
    by_time: dict[float, dict[str, float]] = {}
    for t, idx, util in samples:
        if t0 <= t <= t1:
            by_time.setdefault(round(t, 1), {})[idx] = util
    full = [v for v in by_time.values() if len(v) >= 2]
    if not full:
        return float("nan"), {}
    both = sum(all(u > 0 for u in v.values()) for v in full) / len(full)
    per = {idx: sum(v.get(idx, 0) > 0 for v in full) / len(full) for idx in sorted({i for v in full for i in v})}
    return both, per


def device_spans(summary: dict) -> dict[str, list[tuple[float, float]]]:
    spans: dict[str, list[tuple[float, float]]] = {}
    for v in summary.get("variants") or []:
        d = v.get("device") or {}
        if d.get("started_at"):
            key = str(d.get("index") or d.get("cuda_visible_devices") or d.get("worker"))
            spans.setdefault(key, []).append((d["started_at"], d["finished_at"]))
    return spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--streams", default="1,2")
    ap.add_argument("--graphs", default="off,on")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=200.0)
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--modes", default="serial,devices,dask")
    ap.add_argument("--out", default="/tmp/trtprof-multi-gpu")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    gpus = args.gpus.split(",")

    smi_path = Path(args.out) / "smi.csv"
    try:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,index,utilization.gpu,clocks.sm",
                                "--format=csv,noheader,nounits", "-lms", "100"], stdout=open(smi_path, "w"),
                               stderr=subprocess.DEVNULL)
    except OSError:  # no nvidia-smi (a CPU trial of this script)
        smi = subprocess.Popen(["sleep", "100000"])
    results = []
    try:
        for mode in args.modes.split(","):
            if mode.startswith("serial"):  # serial2, ...: the same serial run again (run-to-run noise)
                results.append(run_mode(mode, args, [], env={"CUDA_VISIBLE_DEVICES": gpus[0]}))
            elif mode == "devices":
                results.append(run_mode("devices", args, ["--devices", args.gpus]))
            elif mode == "dask":
                procs, address = start_dask(gpus, 8786)
                try:
                    results.append(run_mode("dask", args, ["--scheduler", address]))
                finally:
                    for p in reversed(procs):
                        p.terminate()
                    for p in procs:
                        p.wait(timeout=30)
            print(f"{results[-1]['name']}: rc {results[-1]['rc']}, {results[-1]['wall_s']:.1f} s", flush=True)
    finally:
        smi.terminate()
        smi.wait()
    samples = []
    for line in (smi_path.read_text() if smi_path.exists() else "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            import datetime as dt

            t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((t, parts[1], float(parts[2])))
        except (ValueError, IndexError):
            continue
    report(results, samples, args)


def report(results: list[dict], samples: list, args: argparse.Namespace) -> None:
    base = next((r for r in results if r["name"] == "serial"), None)
    print(f"\n{'mode':<8} {'rc':>3} {'wall s':>8} {'variant phase s':>16} {'speed-up':>9} {'speed-up (phase)':>17} "
          f"{'GPU overlap s':>14} {'both busy (smi)':>16} {'2 at once on a GPU':>19}")
    out = {"modes": {}, "variants": {}}
    for r in results:
        spans = device_spans(r["summary"])
        keys = sorted(spans)
        ov = overlap_s(spans[keys[0]], spans[keys[1]]) if len(keys) >= 2 else 0.0
        double = sum(self_overlap(s) for s in spans.values())
        both, per = smi_both_busy(samples, r["started_epoch"], r["ended_epoch"])
        sp = base["wall_s"] / r["wall_s"] if base else float("nan")
        spp = base["variant_phase_s"] / r["variant_phase_s"] if base else float("nan")
        print(f"{r['name']:<8} {r['rc']:>3} {r['wall_s']:>8.1f} {r['variant_phase_s']:>16.1f} {sp:>8.2f}x "
              f"{spp:>16.2f}x {ov:>14.1f} {both:>16.2f} {double:>18.1f}s")
        findings = [f["rule"] for f in (r["summary"].get("findings") or []) if f["rule"].startswith("sweep.dev")]
        out["modes"][r["name"]] = {"rc": r["rc"], "wall_s": r["wall_s"], "variant_phase_s": r["variant_phase_s"],
                                   "speedup": sp, "speedup_phase": spp, "gpu_overlap_s": ov,
                                   "both_busy_share": both, "busy_share": per, "two_at_once_s": double,
                                   "device_findings": findings,
                                   "devices": (r["summary"].get("run") or {}).get("environment", {}).get("devices")}
    print(f"\n{'variant':<24} " + " ".join(f"{r['name'] + ' ms':>12} {'GPU':>4} {'vs serial':>9}" for r in results))
    names = [v["key"] for v in (base or results[0])["summary"].get("variants") or []]
    for key in names:
        cells = []
        ref = None
        for r in results:
            v = next((x for x in r["summary"].get("variants") or [] if x["key"] == key), {})
            med = (v.get("latency_ms") or {}).get("median")
            dev = (v.get("device") or {})
            gpu = dev.get("index") or dev.get("cuda_visible_devices") or "-"
            if r is base:
                ref = med
            ratio = med / ref if med and ref else None
            cells.append(f"{med if med is not None else float('nan'):>12.4f} {str(gpu):>4} "
                         f"{(f'{ratio:.3f}' if ratio else '-'):>9}")
            out["variants"].setdefault(key, {})[r["name"]] = {"median_ms": med, "gpu": gpu, "status": v.get("status"),
                                                             "p99_ms": (v.get("latency_ms") or {}).get("p99")}
        print(f"{key:<24} " + " ".join(cells))
    ratios = [m["median_ms"] / d["serial"]["median_ms"] for d in out["variants"].values()
              for k, m in d.items() if k != "serial" and m.get("median_ms") and d.get("serial", {}).get("median_ms")]
    if ratios:
        print(f"\nper-variant median vs serial: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, "
              f"max {max(ratios):.3f} over {len(ratios)} variant runs")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
