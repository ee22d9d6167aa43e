"""TensorRT's Python API, checked without TensorRT: the names trtprof and its test double use must exist.

``../shared/fixtures/tensorrt-python-api/`` holds the pybind11 binding sources of TensorRT 10.16 and 11.1
(see its SOURCES.md): they define every class, method, property and enum value of the ``tensorrt``
module. This test reads the API surface out of them, reads the names our code uses out of
``profiler/backends/tensorrt.py``, ``profiler/layers/trt_profiler.py`` and ``tests/fake_tensorrt.py``
(with ``ast``), and asserts that every one exists in both releases, or, where our code reaches it through
``getattr``/``hasattr`` (a version guard), in at least one. So neither the backend nor the double can
drift from the real API unnoticed.

What is checked:
* ``trt.X`` and ``trt.X.Y`` chains (classes, enums and their values, ``trt.ILogger.__init__``);
* methods our subclasses of ``trt.X`` define and our code never calls (callbacks TensorRT makes:
  ``ILogger.log``, ``IProfiler.report_layer_time``) on ``X``;
* every public member of a test-double class that declares ``stands_for = "X"`` and that our code
  uses (as an attribute or a guarded name), on ``X``;
* every value of the double's enums, on the real enum of the same name.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT, SHARED

API_DIR = SHARED / "fixtures" / "tensorrt-python-api"
RELEASES = ("v10.16", "v11.1")
OUR_CODE = [ROOT / "profiler" / "backends" / "tensorrt.py", ROOT / "profiler" / "layers" / "trt_profiler.py"]
DOUBLE = ROOT / "tests" / "fake_tensorrt.py"
#: set by the ``tensorrt`` package's Python layer, not by the bindings
PACKAGE_ATTRIBUTES = {"__version__"}

pytestmark = pytest.mark.skipif(not all((API_DIR / r).is_dir() for r in RELEASES),
                                reason=f"TensorRT binding sources not found at {API_DIR} (../shared is absent)")


# -- the API surface of one release, from its binding sources ------------------------------------------
_TOKEN = re.compile(r'py::(?:class_|enum_)<|\bm\s*\.\s*(?:def|attr)\s*\(\s*"(\w+)"|\b(\w+)\s*\.\s*def\s*\('
                    r'|\.(?:def\w*|value)\s*\(\s*(?:"(\w+)"|(py::init))|\.export_values\s*\(')
_DECL_TAIL = re.compile(r'\s*(\w*)\s*[({]\s*(\w+)\s*,\s*"(\w+)"')


def _skip_template(text: str, i: int) -> int:
    """Index just past the ``>`` closing the template argument list that starts before ``i``."""
    depth = 1
    while depth:
        depth += {"<": 1, ">": -1}.get(text[i], 0)
        i += 1
    return i


def binding_surface(release: Path) -> dict[str, set[str]]:
    """Python class name (nested: ``ILogger.Severity``) -> member names; ``""`` -> module-level names."""
    api: dict[str, set[str]] = {"": set()}
    for path in sorted(release.rglob("*.cpp")):
        text = re.sub(r"//[^\n]*", "", path.read_text(errors="replace"))
        variables: dict[str, str] = {"m": ""}  # C++ variable -> the Python class it binds
        parent: dict[str, str] = {}
        current = ""
        for mt in _TOKEN.finditer(text):
            if mt.group(0).startswith("py::"):
                tail = _DECL_TAIL.match(text, _skip_template(text, mt.end()))
                if not tail:
                    continue
                var, scope, name = tail.groups()
                outer = variables.get(scope, "")
                current = f"{outer}.{name}" if outer else name
                parent[current] = outer
                api.setdefault(current, set())
                api.setdefault(outer, set()).add(name)  # a nested class is a member of its class
                if var:
                    variables[var] = current
            elif mt.group(1):  # m.def("f") / m.attr("x"): module level
                api[""].add(mt.group(1))
            elif mt.group(2):  # var.def(...): back on that variable's class
                current = variables.get(mt.group(2), current)
                if "py::init" in text[mt.end():mt.end() + 9]:
                    api.setdefault(current, set()).add("__init__")
            elif mt.group(3) or mt.group(4):
                api.setdefault(current, set()).add(mt.group(3) or "__init__")
            elif "export_values" in mt.group(0):  # enum values also in the enclosing scope
                api.setdefault(parent.get(current, ""), set()).update(api.get(current, set()))
    api[""] |= PACKAGE_ATTRIBUTES
    return api


@pytest.fixture(scope="module")
def surfaces() -> dict[str, dict[str, set[str]]]:
    return {r: binding_surface(API_DIR / r) for r in RELEASES}


# -- the names our code uses --------------------------------------------------------------------------
@dataclass
class Used:
    chains: set[tuple[str, ...]] = field(default_factory=set)  # trt.X.Y -> ("X", "Y")
    guarded_chains: set[tuple[str, ...]] = field(default_factory=set)  # getattr(trt.X, "Y", ...)
    attributes: set[str] = field(default_factory=set)  # every obj.name our code reads or calls
    guarded: set[str] = field(default_factory=set)  # names our code reaches through getattr/hasattr/_call
    callbacks: set[tuple[str, str]] = field(default_factory=set)  # (trt class, method TensorRT calls)


def _trt_chain(node: ast.AST) -> tuple[str, ...] | None:
    """``trt.A.B`` (or ``self.trt.A.B``) -> ("A", "B"); None when the chain is not rooted at a ``trt``."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        if node.attr == "trt":
            return tuple(reversed(names)) or None
        names.append(node.attr)
        node = node.value
    return tuple(reversed(names)) or None if isinstance(node, ast.Name) and node.id == "trt" else None


def used_names(paths: list[Path]) -> Used:
    used = Used()
    defined_by_subclass: list[tuple[str, str]] = []
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                used.attributes.add(node.attr)
                chain = _trt_chain(node)
                if chain:
                    used.chains.add(chain)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2 \
                    and node.func.id in ("getattr", "hasattr", "_call") and isinstance(node.args[1], ast.Constant):
                used.guarded.add(node.args[1].value)
                chain = _trt_chain(node.args[0])
                if chain:
                    used.guarded_chains.add((*chain, node.args[1].value))
            elif isinstance(node, ast.ClassDef):
                for base in node.bases:
                    chain = _trt_chain(base)
                    if chain and len(chain) == 1:
                        defined_by_subclass += [(chain[0], f.name) for f in node.body
                                                if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")]
    # a method of our subclass that our code never calls is one TensorRT calls: it must be the base's
    used.callbacks = {(cls, name) for cls, name in defined_by_subclass if name not in used.attributes}
    # chains are maximal attribute chains; their prefixes are the shorter chains ast.walk also visits
    return used


@dataclass
class DoubleClass:
    name: str
    stands_for: str
    members: set[str]
    enum_values: set[str]


def double_classes(path: Path) -> list[DoubleClass]:
    """The double's classes that declare ``stands_for``, and its enums (their real name is their own,
    nested ones qualified: ``ILogger.Severity``)."""
    out: list[DoubleClass] = []

    def visit(node: ast.ClassDef, outer: str) -> None:
        qualified = f"{outer}.{node.name}" if outer else node.name
        stands_for, members, values = None, set(), set()
        is_enum = any(isinstance(b, ast.Name) and b.id == "_Enum" for b in node.bases)
        for item in node.body:
            if isinstance(item, ast.ClassDef):
                visit(item, qualified)
            elif isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                target = item.targets[0].id
                if target == "stands_for":
                    stands_for = item.value.value
                elif is_enum:
                    values.add(target)
                else:
                    members.add(target)
            elif isinstance(item, ast.FunctionDef):
                members.add(item.name)
                for sub in ast.walk(item):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) \
                            and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                        members.add(sub.attr)
        if is_enum:
            out.append(DoubleClass(qualified, qualified, set(), values))
        elif stands_for:
            out.append(DoubleClass(qualified, stands_for, {m for m in members if not m.startswith("_")}, set()))

    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            visit(node, "")
    return out


# -- the contract -------------------------------------------------------------------------------------
def _missing(surfaces, cls: str, member: str | None, guarded: bool) -> str | None:
    """Why ``cls.member`` (or the class ``cls``) breaks the contract, or None."""
    where = [r for r, api in surfaces.items()
             if (cls in api[""] or "." in cls and cls in api) and (member is None or member in api.get(cls, ()))]
    name = f"{cls}.{member}" if member else cls
    if not where:
        return f"{name} exists in neither TensorRT {' nor '.join(surfaces)}"
    if len(where) < len(surfaces) and not guarded:
        return f"{name} exists only in TensorRT {where[0]} and is not guarded by version (getattr/hasattr)"
    return None


def _chain_problems(surfaces, used: Used) -> list[str]:
    problems = []
    for chain in used.chains | used.guarded_chains:
        guarded = chain in used.guarded_chains
        if chain[0] in PACKAGE_ATTRIBUTES:
            continue
        problems.append(_missing(surfaces, chain[0], None, guarded))
        if len(chain) > 1:
            problems.append(_missing(surfaces, chain[0], chain[1], guarded))
    return [p for p in problems if p]


def test_the_binding_sources_parse_into_the_api_we_know(surfaces):
    """The extraction itself: known members of both releases are found, and names that are not, are not."""
    for api in surfaces.values():
        assert {"execute_async_v3", "set_tensor_address", "profiler"} <= api["IExecutionContext"]
        assert {"INTERNAL_ERROR", "ERROR", "WARNING"} <= api["ILogger.Severity"]
        assert "ERROR" in api["ILogger"]  # export_values() puts Severity's values on ILogger
        assert {"log", "__init__"} <= api["ILogger"] and "node_operator" in api["ParserError"]
        assert "execute_async_v2" not in api["IExecutionContext"]  # removed in TensorRT 10
        assert {"ITensor", "Builder", "OnnxParser", "EngineInspector"} <= api[""]
    # a real difference between the releases: 11 dropped the precision builder flags
    assert "FP16" in surfaces["v10.16"]["BuilderFlag"] and "FP16" not in surfaces["v11.1"]["BuilderFlag"]


def test_what_the_backend_uses_from_tensorrt_exists_in_both_releases(surfaces):
    used = used_names(OUR_CODE)
    assert ("MemoryPoolType", "WORKSPACE") in used.chains  # the extraction found the chains
    assert ("IProfiler", "report_layer_time") in used.callbacks and ("ILogger", "log") in used.callbacks
    problems = _chain_problems(surfaces, used)
    problems += [p for cls, name in used.callbacks if (p := _missing(surfaces, cls, name, False))]
    assert problems == []


def test_the_test_double_does_not_drift_from_the_real_api(surfaces):
    used = used_names(OUR_CODE)
    classes = double_classes(DOUBLE)
    assert {c.stands_for for c in classes if c.members} >= {"Builder", "IExecutionContext", "ICudaEngine",
                                                            "OnnxParser", "IBuilderConfig"}
    problems, checked = [], 0
    for c in classes:
        for name in sorted(c.members & (used.attributes | used.guarded)):
            checked += 1
            problems.append(_missing(surfaces, c.stands_for, name, guarded=name in used.guarded))
        for value in sorted(c.enum_values):  # the double's enum values exist in some release
            checked += 1
            problems.append(_missing(surfaces, c.stands_for, value, guarded=True))
    assert checked > 40
    assert [p for p in problems if p] == []


def test_the_contract_catches_a_renamed_method(surfaces, tmp_path):
    """The check can fail: a backend calling a method TensorRT 10 removed is reported."""
    code = tmp_path / "backend.py"
    code.write_text("def run(trt, context):\n    trt.IExecutionContext.execute_async_v2\n"
                    "    return getattr(trt.NetworkDefinitionCreationFlag, 'STRONGLY_TYPED', None)\n")
    problems = _chain_problems(surfaces, used_names([code]))
    assert problems == ["IExecutionContext.execute_async_v2 exists in neither TensorRT v10.16 nor v11.1"]
