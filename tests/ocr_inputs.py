"""Real pretrained OCR models (rapidocr-onnxruntime's) and real-looking inputs for them.

The models ship inside the ``rapidocr-onnxruntime`` wheel (a test dependency; located by
``tests.conftest.rapidocr_model_path`` without importing the package). Inputs are
rendered text lines and small pages, normalized as rapidocr does ((pixel / 255 - 0.5) / 0.5, CHW).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

CLS, DET, REC = "cls", "det", "rec"  # keys of tests.conftest.rapidocr_model_path

WORDS = ("invoice", "total", "TensorRT", "2024-06-11", "latency", "GPU", "engine", "batch", "Qty 12",
         "$48.50", "profile", "stream", "ONNX", "order #4471", "kernel", "cache", "warm-up", "INT8")


def ocr_model(name: str) -> Path:
    """Path of one of rapidocr's bundled models (conftest locates it); skips when not installed."""
    from tests.conftest import rapidocr_model_path

    path = rapidocr_model_path(name)
    if path is None:
        pytest.skip("rapidocr-onnxruntime (real pretrained ONNX models) is not installed")
    return path


def _normalize(img) -> np.ndarray:
    a = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    return ((a - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)


def text_line(rng: np.random.Generator, height: int, width: int, *, flipped: bool = False) -> np.ndarray:
    """A 1x3xHxW text-line crop (dark words on a light, slightly noisy background)."""
    Image = pytest.importorskip("PIL.Image")
    from PIL import ImageDraw, ImageFont

    bg = int(rng.integers(200, 256))
    img = Image.new("RGB", (width, height), (bg, bg, int(rng.integers(200, 256))))
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=int(height * 0.6))
    words = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 4))))
    ink = tuple(int(v) for v in rng.integers(0, 80, size=3))
    draw.text((int(rng.integers(2, 10)), int(height * 0.15)), words, fill=ink, font=font)
    if flipped:
        img = img.rotate(180)
    a = _normalize(img)
    return (a + rng.normal(0, 0.03, size=a.shape)).astype(np.float32)


def page(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A 1x3xHxW page with a few lines of text (input for the text detector)."""
    Image = pytest.importorskip("PIL.Image")
    from PIL import ImageDraw, ImageFont

    img = Image.new("RGB", (width, height), (245, 245, 240))
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=max(10, height // 10))
    y = int(rng.integers(4, 12))
    while y < height - height // 8:
        words = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 3))))
        draw.text((int(rng.integers(4, 20)), y), words, fill=(20, 20, 30), font=font)
        y += height // 6 + int(rng.integers(0, 8))
    return _normalize(img)


def cls_batches(n: int, seed: int = 0, shape=(48, 192)) -> list[dict[str, np.ndarray]]:
    """n text-line crops for the direction classifier; every other one upside down."""
    rng = np.random.default_rng(seed)
    return [{"x": text_line(rng, *shape, flipped=bool(i % 2))} for i in range(n)]


def rec_batches(n: int, seed: int = 0, shape=(48, 160)) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": text_line(rng, *shape)} for _ in range(n)]


def det_batches(n: int, seed: int = 0, shape=(96, 96)) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": page(rng, *shape)} for _ in range(n)]


def save_npz(batches: list[dict[str, np.ndarray]], path: Path) -> Path:
    """All batches in one .npz (arrays stacked on a new leading axis, the N-samples layout)."""
    np.savez(path, **{k: np.stack([b[k] for b in batches]) for k in batches[0]})
    return path
