"""Precision localization: where in the network an FP16 or INT8 variant starts to diverge from FP32.

Both models are run by ONNX Runtime on the same inputs with every intermediate tensor exposed as an
output. Tensors are matched by name (the FP16 converter and the Q/DQ quantizer keep the names of the
original node outputs), compared in the FP32 model's topological order, and each node gets its
*amplification*: its output error over the largest error of its inputs. The first nodes whose error
jumps (amplification >= ``jump_factor`` with an error above ``floor``) are where precision is lost.

``verify`` then rebuilds the variant with those nodes kept in FP32 (for a strongly typed engine that
means editing the ONNX model) and measures the accuracy and latency that buys.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from profiler.backends.ort_guard import ORT_LOG_SEVERITY
from profiler.models.intermediates import run_all
from profiler.variants.fp16 import FP16_MAX

#: An error below this relative L2 is treated as rounding noise.
DEFAULT_FLOOR = 1e-3
#: A node whose error is this many times its inputs' worst error is where precision is lost.
DEFAULT_JUMP = 4.0


def faithful_outputs(model_path: str | Path, feeds: list[dict[str, np.ndarray]],
                     work_dir: str | Path | None = None) -> list[dict[str, np.ndarray]]:
    """The model's graph outputs with every intermediate stored in its declared precision (see
    ``run_all``): the accuracy of a float16 or Q/DQ model as a GPU engine would compute it."""
    import onnx

    names = [o.name for o in onnx.load(str(model_path), load_external_data=False).graph.output]
    with tempfile.TemporaryDirectory(dir=work_dir) as d:
        runs = run_all(model_path, feeds, Path(d))
    return [{n: r[n] for n in names if n in r} for r in runs]


def _producers(model_path: str | Path) -> dict[str, str]:
    """Tensor name -> name of the node that produces it in this model (Q/DQ nodes skipped)."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    out = {}
    for i, node in enumerate(model.graph.node):
        if node.op_type in ("QuantizeLinear", "DequantizeLinear", "Cast"):
            continue
        for t in node.output:
            out[t] = node.name or f"{node.op_type}_{i}"
    return out



def keep_candidates(result: dict[str, Any], top: int = 3) -> list[str]:
    """Node names to keep in FP32 for ``verify``: the variant's own node at each first jump (after
    fusion that is the fused node, e.g. the Conv that absorbed a BatchNormalization). When the jump is
    a float16 overflow (the FP32 tensor exceeds float16's range), the consumers of that tensor are kept
    too, down to where the values fit float16 again: a float32 producer alone would still hand an
    out-of-range tensor to a float16 consumer."""
    by_node = {c["node"]: c for c in result.get("curve", [])}
    names: list[str] = []

    def add(name: str) -> None:
        if name not in names:
            names.append(name)

    for c in result.get("first_jumps", [])[:top]:
        add(c.get("variant_node") or c["node"])
        frontier = [c] if c.get("ref_max_abs", 0.0) > FP16_MAX else []
        while frontier:
            cur = frontier.pop()
            for consumer in cur.get("consumers", []):
                if consumer in names:
                    continue
                add(consumer)
                nxt = by_node.get(consumer)
                if nxt is not None and nxt.get("ref_max_abs", 0.0) > FP16_MAX:
                    frontier.append(nxt)
    return names


def _rel_l2(ref: np.ndarray, cand: np.ndarray) -> tuple[float, float]:
    r = ref.astype(np.float64).ravel()
    c = cand.astype(np.float64).ravel()
    if not np.all(np.isfinite(c)):
        return float("inf"), float("nan")
    nr = np.linalg.norm(r)
    err = float(np.linalg.norm(c - r) / nr) if nr > 0 else float(np.linalg.norm(c - r))
    nc = np.linalg.norm(c)
    cos = float(r @ c / (nr * nc)) if nr > 0 and nc > 0 else float("nan")
    return err, cos


def localize(reference_model: str | Path, variant_model: str | Path, feeds: list[dict[str, np.ndarray]], *,
             jump_factor: float = DEFAULT_JUMP, floor: float = DEFAULT_FLOOR, top: int = 5,
             progress: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic
             ) -> dict[str, Any]:
    """The error curve through the network and the first nodes where the error jumps.

    ``progress`` hears each step, and "node k of n" at most once a second while nodes are compared."""
    import onnx

    say = progress or (lambda _m: None)
    model = onnx.load(str(reference_model), load_external_data=False)
    producer = _producers(variant_model)
    nodes = list(model.graph.node)
    with tempfile.TemporaryDirectory() as d:
        say(f"running the fp32 model with all {len(nodes)} node outputs exposed ({len(feeds)} input(s))")
        ref_runs = run_all(reference_model, feeds, Path(d))
        say("running the variant the same way")
        var_runs = run_all(variant_model, feeds, Path(d))
    consumers: dict[str, list[str]] = {}
    for j, c in enumerate(nodes):
        for name in dict.fromkeys(c.input):  # a node reading a tensor twice is one consumer
            consumers.setdefault(name, []).append(c.name or f"{c.op_type}_{j}")
    err: dict[str, float] = {}
    curve: list[dict[str, Any]] = []
    last_said = clock()
    for index, node in enumerate(nodes):
        if clock() - last_said >= 1.0:
            say(f"comparing node {index + 1} of {len(nodes)}")
            last_said = clock()
        if node.op_type == "Constant":
            continue
        in_errs = [err[i] for i in node.input if i in err]
        worst_in = max(in_errs) if in_errs else 0.0
        compared = False
        for out in node.output:
            pairs = [(r[out], v[out]) for r, v in zip(ref_runs, var_runs) if out in r and out in v
                     and r[out].shape == v[out].shape]
            if not pairs or compared:
                # not in the variant (fused away, e.g. a Conv whose BatchNormalization was folded into
                # it): it inherits its inputs' error, so the fused unit's jump shows at its last node
                err.setdefault(out, worst_in)
                continue
            errs = [_rel_l2(r, v) for r, v in pairs]
            e = float(max(x[0] for x in errs))
            cos = float(min(x[1] for x in errs))
            ref_max = float(max(np.max(np.abs(r)) if r.size else 0.0 for r, _ in pairs))
            err[out] = e
            if np.isfinite(e):
                amp = e / max(worst_in, floor)
            else:  # overflow or NaN: a jump where it first appears, inherited after
                amp = float("inf") if np.isfinite(worst_in) else 1.0
            # unnamed nodes are named "{op}_{index}", as the fp16 converter names them, so verify() can keep them
            curve.append({"index": index, "node": node.name or f"{node.op_type}_{index}", "op": node.op_type,
                          "tensor": out, "variant_node": producer.get(out), "rel_l2": e, "cosine": cos,
                          "input_rel_l2": worst_in, "amplification": amp, "ref_max_abs": ref_max,
                          "consumers": consumers.get(out, [])})
            compared = True  # one point per node: its first float output
    jumps = [c for c in curve if c["rel_l2"] > floor and c["amplification"] >= jump_factor]
    largest = sorted(jumps, key=lambda c: -c["amplification"])[:top]
    final = curve[-1]["rel_l2"] if curve else float("nan")
    return {"nodes_compared": len(curve), "final_rel_l2": final, "curve": curve, "first_jumps": jumps[:top],
            "largest_jumps": largest, "jump_factor": jump_factor, "floor": floor}


def interleaved_latency_ms(model_paths: dict[str, str | Path], feeds: dict[str, np.ndarray], *, rounds: int = 5,
                           runs: int = 10) -> dict[str, dict[str, Any]]:
    """Median latency of each model (ONNX Runtime CPU), measured as the harness compares variants: after a
    warm-up, ``rounds`` rounds that each time every model ``runs`` times in turn, so a drift of the
    machine lands on all of them. Per model: the median over all runs and the median of each round."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = ORT_LOG_SEVERITY  # errors come back as exceptions, never raw on stderr
    sessions = {k: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"])
                for k, p in model_paths.items()}
    for sess in sessions.values():
        sess.run(None, feeds)
    times: dict[str, list[list[float]]] = {k: [] for k in sessions}
    for _ in range(rounds):
        for k, sess in sessions.items():
            one = []
            for _ in range(runs):
                t0 = time.perf_counter_ns()
                sess.run(None, feeds)
                one.append((time.perf_counter_ns() - t0) / 1e6)
            times[k].append(one)
    return {k: {"median_ms": float(np.median(np.concatenate(t))), "round_medians_ms": [float(np.median(x)) for x in t],
                "rounds": rounds, "runs_per_round": runs} for k, t in times.items()}


def verify(reference_model: str | Path, precision: str, keep_nodes: list[str], feeds: list[dict[str, np.ndarray]],
           *, variant_model: str | Path | None = None, work_dir: str | Path | None = None,
           latency_rounds: int = 5, calib_samples: list[dict[str, np.ndarray]] | None = None,
           calib_method: str = "minmax") -> dict[str, Any]:
    """Rebuild the variant with ``keep_nodes`` in FP32 and measure accuracy and latency against the
    plain variant (ONNX Runtime on this machine; the accuracy numbers carry over to any backend)."""
    from profiler.accuracy import compare_batches

    work = Path(work_dir or tempfile.mkdtemp(prefix="trtprof-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    kept_path = work / f"{Path(reference_model).stem}.{precision}.kept.onnx"
    if precision == "fp16":
        from profiler.variants.fp16 import convert_fp16

        convert_fp16(Path(reference_model), kept_path, keep_fp32_nodes=keep_nodes)
        if variant_model is None:
            variant_model = work / f"{Path(reference_model).stem}.fp16.onnx"
            convert_fp16(Path(reference_model), Path(variant_model))
    elif precision == "int8":
        from profiler.variants.int8 import quantize_int8

        samples = calib_samples or feeds
        quantize_int8(Path(reference_model), kept_path, samples, method=calib_method, keep_fp32=list(keep_nodes),
                      work_dir=work, progress=None)
        if variant_model is None:
            variant_model = work / f"{Path(reference_model).stem}.int8.onnx"
            quantize_int8(Path(reference_model), Path(variant_model), samples, method=calib_method, keep_fp32=[],
                          work_dir=work, progress=None)
    else:
        raise ValueError(f"precision localization is for fp16 and int8, not {precision}")

    def outputs(path):
        return faithful_outputs(path, feeds, work)

    ref = outputs(reference_model)
    paths = {"fp32": reference_model, precision: variant_model, f"{precision}+kept": kept_path}
    latency = interleaved_latency_ms(paths, feeds[0], rounds=latency_rounds) if latency_rounds else {}
    rows = {}
    for label, path in paths.items():
        acc = compare_batches(ref, outputs(path)) if label != "fp32" else None
        lat = latency.get(label) or {}
        rows[label] = {"model": str(path), "accuracy": acc, "latency_ms": lat.get("median_ms"),
                       "latency_round_medians_ms": lat.get("round_medians_ms")}
    return {"precision": precision, "kept_fp32": list(keep_nodes), "variants": rows,
            "conclusion": _conclude(rows, precision, keep_nodes)}


def _conclude(rows: dict[str, Any], precision: str, keep_nodes: list[str]) -> dict[str, Any]:
    """How much of the error keeping ``keep_nodes`` in FP32 removed, per output (worst output wins)."""
    plain, kept = rows[precision]["accuracy"] or {}, rows[f"{precision}+kept"]["accuracy"] or {}
    recovered = []
    for name, m in plain.items():
        k = kept.get(name) or {}
        a, b = m.get("rel_l2"), k.get("rel_l2")
        plain_broken = a is None or not np.isfinite(a) or (m.get("nan_count") or 0) + (m.get("inf_count") or 0) > 0
        kept_broken = b is None or not np.isfinite(b) or (k.get("nan_count") or 0) + (k.get("inf_count") or 0) > 0
        if plain_broken:  # NaN/Inf in the variant: recovered only if the kept version is finite
            recovered.append(0.0 if kept_broken else 1.0)
        elif kept_broken:
            recovered.append(0.0)
        elif a > 0:
            recovered.append(max(0.0, 1.0 - b / a))
    share = min(recovered) if recovered else 0.0
    kept_rounds = rows[f"{precision}+kept"].get("latency_round_medians_ms") or []
    plain_rounds = rows[precision].get("latency_round_medians_ms") or []
    ratios = [k / p - 1.0 for k, p in zip(kept_rounds, plain_rounds) if p]
    cost = float(np.median(ratios)) if ratios else None
    if cost is None:
        cost_text = "latency not measured"
    elif min(ratios) <= 0.0 <= max(ratios):
        cost_text = (f"no latency change beyond noise ({min(ratios) * 100:+.0f}% to {max(ratios) * 100:+.0f}% over "
                     f"{len(ratios)} interleaved rounds, ONNX Runtime CPU)")
    else:
        cost_text = (f"{cost * 100:+.0f}% latency (median of {len(ratios)} interleaved rounds, "
                     f"{min(ratios) * 100:+.0f}% to {max(ratios) * 100:+.0f}%, ONNX Runtime CPU)")
    if share >= 0.5:
        text = (f"keeping {', '.join(keep_nodes)} in FP32 removes {share * 100:.0f}% of the {precision} error "
                f"for {cost_text}: the loss is localized there")
    else:
        text = (f"keeping {', '.join(keep_nodes) or 'nothing'} in FP32 removes only {share * 100:.0f}% of the "
                f"{precision} error: the loss is spread through the network, not in a few layers; "
                + ("try another calibration method or representative calibration data"
                   if precision == "int8" else "consider keeping whole blocks in FP32 or BF16"))
    return {"error_removed": share, "latency_change": cost, "localized": share >= 0.5, "text": text}
