"""Accuracy and preparation cost of the fp16/int8 variants on real models, against fp32.

For the bundled default model and rapidocr's three OCR models (direction classifier, PP-OCRv4
detector with dynamic H/W, PP-OCRv4 recogniser), this prepares every precision variant with
``profiler.variants.prepare`` (fp16; int8 with entropy, minmax and percentile calibration on rendered
text inputs; int8 calibrated on random inputs), runs fp32 and the variant through ONNX Runtime on CPU
on held-out rendered inputs, and prints ``profiler.accuracy`` metrics with the default-threshold
verdict. These numbers justify ``profiler.accuracy.DEFAULT_THRESHOLDS``.

The metrics columns run the variant with ONNX Runtime's basic graph optimisations: the model's own
arithmetic (Q/DQ as fake quantization with float accumulation, which is what TensorRT's int8 kernels
with int32 accumulation approximate). ``ort_all_rel_l2`` runs it with every optimisation, i.e.
through ONNX Runtime's fused int8 CPU kernels; on x86 CPUs without VNNI their u8s8 products can
saturate, so that column can be far worse than the model itself::

    python3 benchmarks/bench_variants.py                     # all models, 16 calibration samples
    python3 benchmarks/bench_variants.py --models cls det --calib-samples 32 --eval-samples 16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["default", "cls", "det", "rec"])
    ap.add_argument("--calib-samples", type=int, default=16)
    ap.add_argument("--eval-samples", type=int, default=8)
    ap.add_argument("--methods", nargs="+", default=["entropy", "minmax", "percentile"])
    args = ap.parse_args()

    import onnxruntime as ort

    from profiler.accuracy import compare_batches, evaluate
    from profiler.models import default_model_path, inspect_model, make_inputs
    from tests import ocr_inputs as ocr

    def run(path, batches, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in s.get_outputs()]
        return [dict(zip(names, s.run(None, b))) for b in batches]

    from profiler.variants import prepare

    cases = {
        "default": (lambda: default_model_path(), None,
                    lambda n, seed: make_inputs(inspect_model(default_model_path()), {}, seed=seed, count=n)),
        "cls": (lambda: ocr.ocr_model("cls"), {"x": (1, 3, 48, 192)}, lambda n, seed: ocr.cls_batches(n, seed)),
        "det": (lambda: ocr.ocr_model("det"), {"x": (1, 3, 96, 96)}, lambda n, seed: ocr.det_batches(n, seed)),
        "rec": (lambda: ocr.ocr_model("rec"), {"x": (1, 3, 48, 160)}, lambda n, seed: ocr.rec_batches(n, seed)),
    }
    header = (f"{'model':8} {'variant':18} {'prep_s':>7} {'rel_l2':>9} {'cosine':>9} {'top1':>6} {'max_abs':>8} "
              f"{'ort_all_rel_l2':>14}  verdict")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="trtprof-bench-variants.") as tmp:
        for name in args.models:
            get_path, shapes, data = cases[name]
            model = get_path()
            calib = ocr.save_npz(data(args.calib_samples, 1), Path(tmp) / f"{name}.npz")
            evalb = data(args.eval_samples, 2)
            ref = run(model, evalb)
            plan = [("fp16", {}, "fp16")]
            plan += [("int8", {"calib": calib, "calib_method": m}, f"int8 {m}") for m in args.methods]
            plan += [("int8", {"calib_method": "minmax"}, "int8 minmax random")]
            for precision, kw, label in plan:
                t0 = time.perf_counter()
                prepared = prepare(model, precision, shapes=shapes, cache_dir=tmp, **kw)
                prep_s = time.perf_counter() - t0
                metrics = compare_batches(ref, run(prepared.path, evalb))
                fused = compare_batches(ref, run(prepared.path, evalb, ort.GraphOptimizationLevel.ORT_ENABLE_ALL))
                out = next(iter(metrics))
                m = metrics[out]
                passed, _ = evaluate(metrics, precision)
                top1 = "-" if m["top1_agreement"] is None else f"{m['top1_agreement']:.3f}"
                verdict = "pass" if passed else "BREACH"
                if prepared.calibration_meaningless:
                    verdict += " (random calibration: meaningless)"
                print(f"{name:8} {label:18} {prep_s:7.1f} {m['rel_l2']:9.2e} {m['cosine']:9.6f} {top1:>6} "
                      f"{m['max_abs']:8.4f} {fused[out]['rel_l2']:14.2e}  {verdict}", flush=True)


if __name__ == "__main__":
    main()
