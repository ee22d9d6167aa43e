"""The guard that keeps CI honest about optional packages (torch, cuda-python, TensorRT, nvtx)."""

from __future__ import annotations

import os
import sys

import pytest

from profiler.errors import MissingExtra, require
from tests.conftest import OPTIONAL_EXTRAS, HiddenExtras


def test_hidden_extras_cannot_be_imported_and_require_names_the_extra():
    finder = HiddenExtras(("json",))  # a module that is certainly installed
    sys.meta_path.insert(0, finder)
    saved = sys.modules.pop("json")
    try:
        with pytest.raises(MissingExtra, match=r"pip install 'trtprof\[x\]'"):
            require("json", "x", "a test")
    finally:
        sys.meta_path.remove(finder)
        sys.modules["json"] = saved
    assert require("json", "x") is saved


@pytest.mark.skipif(os.environ.get("TRTPROF_HIDE_EXTRAS") != "1", reason="only meaningful under .ci/run's guard")
def test_under_the_ci_guard_no_optional_extra_is_importable():
    for name in OPTIONAL_EXTRAS:
        with pytest.raises(ImportError):
            __import__(name)

