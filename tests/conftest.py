"""Shared test fixtures.

Real data first: ``../shared/fixtures`` (nsys exports, trtexec exports) when it sits beside the
checkout (tests using it skip cleanly when it does not), and ``sample_traces/`` (our own H200 captures).
"""

from __future__ import annotations

import atexit
import importlib.abc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Optional packages that CI never installs (the extras `torch`, `cuda`, `tensorrt`). With
# TRTPROF_HIDE_EXTRAS=1 (set by .ci/run) they cannot be imported even where someone installed them by
# hand, so a test that reaches one without `pytest.importorskip` fails on every machine, not only on a
# fresh one.
OPTIONAL_EXTRAS = ("torch", "cuda", "tensorrt", "nvtx", "cupy")


class HiddenExtras(importlib.abc.MetaPathFinder):
    """Refuses to import the optional extras, as if they were not installed."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden by TRTPROF_HIDE_EXTRAS)",
                                      name=fullname)
        return None


def hide_extras(names: tuple[str, ...] = OPTIONAL_EXTRAS) -> HiddenExtras:
    finder = HiddenExtras(names)
    sys.meta_path.insert(0, finder)
    for name in list(sys.modules):  # anything already imported goes too
        if name.split(".", 1)[0] in names:
            del sys.modules[name]
    return finder


if os.environ.get("TRTPROF_HIDE_EXTRAS") == "1":
    hide_extras()

# Caches (transformed models, loaded captures) go to a folder of this test session, never the user's.
if "TRTPROF_CACHE_DIR" not in os.environ:
    os.environ["TRTPROF_CACHE_DIR"] = tempfile.mkdtemp(prefix="trtprof-test-cache-")
    atexit.register(shutil.rmtree, os.environ["TRTPROF_CACHE_DIR"], True)

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRTPROF_SHARED", ROOT.parent / "shared"))
NSYS_FIXTURES = SHARED / "fixtures" / "nsys"
TRTEXEC_FIXTURES = SHARED / "fixtures" / "trtexec"
SAMPLE_TRACES = ROOT / "sample_traces"


def nsys_fixture_files() -> list[Path]:
    return sorted(NSYS_FIXTURES.glob("*.sqlite")) if NSYS_FIXTURES.is_dir() else []


@pytest.fixture(scope="session")
def nsys_fixtures() -> Path:
    if not NSYS_FIXTURES.is_dir():
        pytest.skip(f"real nsys exports not found at {NSYS_FIXTURES} (../shared is absent)")
    return NSYS_FIXTURES


@pytest.fixture(scope="session")
def trtexec_fixtures() -> Path:
    if not TRTEXEC_FIXTURES.is_dir():
        pytest.skip(f"real trtexec exports not found at {TRTEXEC_FIXTURES} (../shared is absent)")
    return TRTEXEC_FIXTURES


def _db_params() -> list:
    return [
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ]


@pytest.fixture(params=_db_params())
def db_url(request, tmp_path) -> str:
    """A fresh, empty store URL: a SQLite file, or a new database on the PostgreSQL server that
    .ci/run starts (TRTPROF_TEST_PG_URL, a URL of a database whose user may CREATE DATABASE)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'trtprof.db'}"
    base = os.environ.get("TRTPROF_TEST_PG_URL")
    if not base:
        pytest.skip("PostgreSQL not available: set TRTPROF_TEST_PG_URL (.ci/run starts a server and sets it)")
    from tests.pg import fresh_database

    return fresh_database(base)


def rapidocr_model_path(name: str) -> Path | None:
    """Path of a real pretrained ONNX model shipped in the rapidocr-onnxruntime wheel, found without
    importing the package (its __init__ needs OpenCV): 'cls', 'det' (dynamic H/W) or 'rec'."""
    import importlib.util

    files = {"cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx", "det": "ch_PP-OCRv4_det_infer.onnx",
             "rec": "ch_PP-OCRv4_rec_infer.onnx"}
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / files[name]
    return path if path.exists() else None


@pytest.fixture(params=["cls", "det", "rec"])
def real_model(request) -> Path:
    path = rapidocr_model_path(request.param)
    if path is None:
        pytest.skip("rapidocr-onnxruntime (real pretrained ONNX models) is not installed")
    return path


@pytest.fixture
def cls_model() -> Path:
    path = rapidocr_model_path("cls")
    if path is None:
        pytest.skip("rapidocr-onnxruntime (real pretrained ONNX models) is not installed")
    return path
