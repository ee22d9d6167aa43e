"""The bundled default model, so ``trtprof sweep`` with no argument works on any machine."""

from __future__ import annotations

from pathlib import Path

from profiler.errors import InputError

DEFAULT_MODEL_NAME = "tiny_convnet.onnx"


def default_model_path() -> Path:
    """Path of the bundled ``tiny_convnet.onnx`` (made by ``profiler/models/make_default.py``)."""
    path = Path(__file__).with_name(DEFAULT_MODEL_NAME)
    if not path.is_file():
        raise InputError(f"the bundled default model {str(path)!r} is missing from this installation; "
                         "recreate it with: python -m profiler.models.make_default")
    return path
