"""Align the layers of two engines of the same model (fp32 vs fp16, fp16 vs int8).

Fusion makes layer lists differ (an int8 engine fuses Q/DQ into convolutions and adds reformats), so
layers are aligned in *groups*, each covering the same part of the model in both engines:

1. Units: every compute layer of an engine, plus the reformat / no-op / stand-alone Q/DQ layers that
   run just before it (their cost belongs to feeding it). Units are kept in execution order.
2. Anchors by ONNX node names: units sharing a node name (TensorRT 10 ``Metadata``, else the tokens of
   the fused layer name, normalized: ``quant_`` prefixes of QAT graphs and copy/transpose wrappers
   dropped) are joined into one group (m:n). Only groups that keep execution order in both engines
   survive (longest increasing chain), and only when they cover at least half of the smaller engine:
   otherwise the names come from different ONNX files (different node numbering) and mean nothing.
3. Between anchors, the remaining units are aligned by their sequence of layer kinds (convolution,
   pooling, ...) with difflib; unequal runs become one m:n group, leftovers one-sided groups.

Every layer lands in exactly one group, so the per-group deltas sum to the difference of the summed
per-layer times. ``delta_ms`` is B minus A (negative: B is faster there).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profiler.layers import frame as lf

_QDQ = re.compile(r"^(QuantizeLinear|DequantizeLinear|QuantLinearNode|DequantLinearNode)", re.I)


def normalize_node(name: str) -> str:
    """Node name without QAT/TensorRT wrappers, so fp32 and QAT graphs of one model compare."""
    n = re.sub(r"(^|/)quant_", r"\1", name)
    n = re.sub(r"^(copied_squeeze_after_|copied_|transpose_before_|reshape_after_|squeeze_after_)", "", n)
    n = re.sub(r"/(BiasAdd|Conv2D|MatMul)(__\d+)?$", lambda m: "/" + m.group(1), n)
    return n


def layer_kind(layer_type: str | None, name: str) -> str:
    """Coarse kind used for sequence alignment: conv, pool, softmax, shape, elementwise, other."""
    t = (layer_type or "").lower()
    if not t:
        nodes = lf_nodes(name)
        t = re.sub(r"[_\d]+$", "", nodes[-1].split("/")[-1]).lower() if nodes else ""
    for key, kind in (("conv", "conv"), ("gemm", "conv"), ("matmul", "conv"), ("matrixmultiply", "conv"),
                      ("fullyconnected", "conv"), ("pool", "pool"), ("softmax", "softmax"),
                      ("shuffle", "shape"), ("slice", "shape"), ("padding", "shape"), ("pad", "shape"),
                      ("elementwise", "elementwise"), ("pointwise", "elementwise"), ("add", "elementwise"),
                      ("reduce", "pool"), ("mean", "pool")):
        if key in t:
            return kind
    return t or "other"


def lf_nodes(name: str) -> list[str]:
    from profiler.layers.trtexec import fused_nodes_from_name

    return fused_nodes_from_name(name)


@dataclass
class _Unit:
    idx: int
    layers: list[str] = field(default_factory=list)
    main: str | None = None
    kind: str = "other"
    nodes: set[str] = field(default_factory=set)
    time_ms: float = 0.0
    reformat_ms: float = 0.0
    precision: dict[str, float] = field(default_factory=dict)  # compute precision -> ms


def _units(frame: pd.DataFrame) -> list[_Unit]:
    units: list[_Unit] = []
    pending: list[tuple[str, float, list[str]]] = []
    for r in frame.to_dict("records"):
        t = float(r.get("time_avg_ms") or 0.0)
        t = 0.0 if np.isnan(t) else t
        nodes = [n for n in (r.get("fused_nodes") or []) if not _QDQ.match(n)]
        if lf.is_reformat(r["name"], r.get("type")):
            pending.append((r["name"], t, nodes))
            continue
        u = _Unit(idx=len(units), main=r["name"], kind=layer_kind(r.get("type"), r["name"]))
        for name, pt, pn in pending:
            u.layers.append(name)
            u.reformat_ms += pt
            u.nodes.update(normalize_node(n) for n in pn)
        pending = []
        u.layers.append(r["name"])
        u.time_ms = t + u.reformat_ms
        u.nodes.update(normalize_node(n) for n in nodes)
        p = lf.compute_precision(r) or "unknown"
        u.precision[p] = u.precision.get(p, 0.0) + t
        units.append(u)
    if pending:  # trailing reformats: attach to the last unit (or make one)
        if not units:
            units.append(_Unit(idx=0, kind="reformat"))
        u = units[-1]
        for name, pt, _ in pending:
            u.layers.append(name)
            u.reformat_ms += pt
            u.time_ms += pt
    return units


def _lis(seq: list[int]) -> set[int]:
    """Indices (into seq) of one longest strictly increasing subsequence."""
    import bisect

    tails: list[int] = []
    tails_idx: list[int] = []
    prev = [-1] * len(seq)
    for i, v in enumerate(seq):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tails_idx.append(i)
        else:
            tails[k] = v
            tails_idx[k] = i
        prev[i] = tails_idx[k - 1] if k else -1
    out, i = set(), tails_idx[-1] if tails_idx else -1
    while i >= 0:
        out.add(i)
        i = prev[i]
    return out


def _anchor_groups(ua: list[_Unit], ub: list[_Unit]) -> list[tuple[list[int], list[int]]]:
    """Connected components of units sharing node names, kept only if they preserve order."""
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[str, tuple[str, int]] = {}
    for side, units in (("a", ua), ("b", ub)):
        for u in units:
            find((side, u.idx))
            for n in u.nodes:
                if n in owner:
                    parent[find((side, u.idx))] = find(owner[n])
                else:
                    owner[n] = (side, u.idx)
    comps: dict[Any, tuple[list[int], list[int]]] = {}
    for key in list(parent):
        root = find(key)
        comps.setdefault(root, ([], []))[0 if key[0] == "a" else 1].append(key[1])
    both = [(sorted(a), sorted(b)) for a, b in comps.values() if a and b]
    both.sort(key=lambda ab: ab[0][0])
    keep = _lis([b[0] for _, b in both])
    chain = [both[i] for i in sorted(keep)]
    # drop chain members that overlap in B range with their neighbours (crossing m:n groups)
    covered_b = sum(len(b) for _, b in chain)
    covered_a = sum(len(a) for a, _ in chain)
    smaller = min(len(ua), len(ub)) or 1
    if min(covered_a, covered_b) < 0.5 * smaller:
        return []
    return chain


def align(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Groups of layers covering the same model part in engines A and B, with times and precisions.

    Columns: group, method (onnx-nodes | sequence | only-a | only-b), kind, layers_a, layers_b, nodes,
    time_a_ms, time_b_ms, delta_ms (B - A, ms per iteration), reformat_a_ms, reformat_b_ms,
    precision_a, precision_b ('int8', or 'int8+fp16' by time when a group mixes precisions).
    """
    ua, ub = _units(a), _units(b)
    anchors = _anchor_groups(ua, ub)
    groups: list[tuple[str, list[int], list[int]]] = []
    ia = ib = 0

    def gap(a_end: int, b_end: int) -> None:
        ga, gb = list(range(ia, a_end)), list(range(ib, b_end))
        sm = difflib.SequenceMatcher(a=[ua[i].kind for i in ga], b=[ub[j].kind for j in gb], autojunk=False)
        for op, i1, i2, j1, j2 in sm.get_opcodes():
            if op == "equal":
                for k in range(i2 - i1):
                    groups.append(("sequence", [ga[i1 + k]], [gb[j1 + k]]))
            elif op == "replace":
                groups.append(("sequence", ga[i1:i2], gb[j1:j2]))
            elif op == "delete":
                groups.extend(("only-a", [i], []) for i in ga[i1:i2])
            else:
                groups.extend(("only-b", [], [j]) for j in gb[j1:j2])

    for ga_, gb_ in anchors:
        if ga_[0] < ia or gb_[0] < ib:
            continue
        gap(ga_[0], gb_[0])
        groups.append(("onnx-nodes", ga_, gb_))
        ia, ib = max(ga_) + 1, max(gb_) + 1
    gap(len(ua), len(ub))
    # anchors may leave holes inside an m:n component range: every unit must appear exactly once
    seen_a = {i for _, ga_, _ in groups for i in ga_}
    seen_b = {j for _, _, gb_ in groups for j in gb_}
    groups += [("only-a", [i], []) for i in range(len(ua)) if i not in seen_a]
    groups += [("only-b", [], [j]) for j in range(len(ub)) if j not in seen_b]

    rows = []
    for gi, (method, ga_, gb_) in enumerate(groups):
        sa, sb = [ua[i] for i in ga_], [ub[j] for j in gb_]
        ta, tb = sum(u.time_ms for u in sa), sum(u.time_ms for u in sb)
        rows.append({
            "group": gi, "method": method,
            "kind": "+".join(dict.fromkeys(u.kind for u in sa + sb)),
            "layers_a": [n for u in sa for n in u.layers], "layers_b": [n for u in sb for n in u.layers],
            "nodes": sorted(set().union(*(u.nodes for u in sa)) & set().union(*(u.nodes for u in sb)))
            if sa and sb else [],
            "time_a_ms": ta, "time_b_ms": tb, "delta_ms": tb - ta,
            "reformat_a_ms": sum(u.reformat_ms for u in sa), "reformat_b_ms": sum(u.reformat_ms for u in sb),
            "precision_a": _mix(sa), "precision_b": _mix(sb),
        })
    return pd.DataFrame(rows, columns=["group", "method", "kind", "layers_a", "layers_b", "nodes", "time_a_ms",
                                       "time_b_ms", "delta_ms", "reformat_a_ms", "reformat_b_ms", "precision_a",
                                       "precision_b"])


def _mix(units: list[_Unit]) -> str | None:
    tot: dict[str, float] = {}
    for u in units:
        for p, t in u.precision.items():
            tot[p] = tot.get(p, 0.0) + t
    if not tot:
        return None
    return "+".join(p for p, _ in sorted(tot.items(), key=lambda kv: -kv[1]))


def summary(groups: pd.DataFrame) -> dict[str, Any]:
    """Totals of an alignment: summed per-layer times, their difference, and how groups were found."""
    return {
        "groups": int(len(groups)),
        "time_a_ms": float(groups["time_a_ms"].sum()),
        "time_b_ms": float(groups["time_b_ms"].sum()),
        "delta_ms": float(groups["delta_ms"].sum()),
        "by_method": {k: int(v) for k, v in groups["method"].value_counts().items()},
        "reformat_delta_ms": float(groups["reformat_b_ms"].sum() - groups["reformat_a_ms"].sum()),
    }
