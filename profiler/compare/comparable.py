"""Whether two stored runs measure the same thing: same kind of run, same model interface, same input shapes.

A comparison of a classifier with a detector, or of a batch-1 run with a batch-8 run, produces a
"regression" that is no regression: the gate refuses it (``trtprof compare`` exits 2 with the reason)
unless ``--force`` is given, and then the comparison says it was forced.

Two sweeps of one model whose weights changed (a new export, a fine-tune) remain comparable: the model
*interface* (input and output names, element types, declared shapes) is what must match, and the
changed hash is reported as an environment change.
"""

from __future__ import annotations

from typing import Any


def _a(word: object) -> str:
    """'a sweep', 'an analyze'."""
    w = str(word)
    return f"{'an' if w[:1].lower() in 'aeiou' else 'a'} {w}"


def _interface(run: dict[str, Any]) -> dict[str, Any] | None:
    """{"inputs": [(name, dtype, shape)], "outputs": [(name, dtype)]} from the run's stored model info."""
    info = ((run.get("summary") or {}).get("run") or {}).get("model_info")
    if not isinstance(info, dict):
        return None
    return {"inputs": [(t.get("name"), t.get("dtype"), tuple(t.get("shape") or ())) for t in info.get("inputs") or []],
            "outputs": [(t.get("name"), t.get("dtype")) for t in info.get("outputs") or []]}


def _variant_shapes(run: dict[str, Any]) -> dict[str, Any] | None:
    """The concrete input shapes the run's variants ran with (the first variant that recorded them)."""
    for v in run.get("variants") or []:
        shapes = (v.get("metrics") or {}).get("shapes") or v.get("shapes")
        if shapes:
            return {k: list(s) for k, s in sorted(shapes.items())}
    shapes = (run.get("config") or {}).get("shapes")
    return {k: list(s) for k, s in sorted(shapes.items())} if shapes else None


def _names(items: list[tuple]) -> str:
    return ", ".join(f"{t[0]}:{t[1]}" + (f"{list(t[2])}" if len(t) > 2 else "") for t in items) or "none"


def _bindings(run: dict[str, Any]) -> dict[str, Any] | None:
    """The network inputs and outputs the run's first variant recorded (trtexec layer info), None if none."""
    for v in run.get("variants") or []:
        b = (v.get("metrics") or {}).get("bindings")
        if b:
            return b
    return None


def _import_models_differ(base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """Two trtexec imports of different networks (a PyTorch ResNet with input 'input.1' against a TensorFlow
    ResNet-50 with 'input_1'): their engines' input names differ. Output names are no evidence (exporters number
    them: the same ResNet's FP16 and QAT exports end in '191' and '422'). Unknown bindings decide nothing."""
    bb, cb = _bindings(base), _bindings(cand)
    if not bb or not cb or not bb.get("inputs") or bb.get("inputs") == cb.get("inputs"):
        return []
    return [f"the runs measured different models ({base.get('model')}: inputs {', '.join(bb.get('inputs') or [])}, "
            f"outputs {', '.join(bb.get('outputs') or [])}; {cand.get('model')}: inputs "
            f"{', '.join(cb.get('inputs') or [])}, outputs {', '.join(cb.get('outputs') or [])})"]


def incomparable(base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """Why the two runs (``Store.run_dict``) cannot be compared; empty when they can."""
    why: list[str] = []
    bk, ck = base.get("kind"), cand.get("kind")
    if bk != ck:
        why.append(f"run {base.get('id')} is {_a(bk)} run and run {cand.get('id')} is {_a(ck)} run")
        return why
    if bk == "import":
        return why + _import_models_differ(base, cand)
    if bk != "sweep":
        return why
    bi, ci = _interface(base), _interface(cand)
    if bi is not None and ci is not None:
        if [t[:2] for t in bi["inputs"]] != [t[:2] for t in ci["inputs"]] or bi["outputs"] != ci["outputs"]:
            why.append(f"the runs measured different models ({base.get('model')}: inputs {_names(bi['inputs'])}, "
                       f"outputs {_names(bi['outputs'])}; {cand.get('model')}: inputs {_names(ci['inputs'])}, "
                       f"outputs {_names(ci['outputs'])})")
            return why
    elif base.get("model") != cand.get("model") and base.get("source_hash") != cand.get("source_hash"):
        why.append(f"the runs measured different models ({base.get('model')} and {cand.get('model')})")
        return why
    bs, cs = _variant_shapes(base), _variant_shapes(cand)
    if bs is not None and cs is not None and bs != cs:
        why.append(f"the runs used different input shapes ({bs} and {cs})")
    return why
