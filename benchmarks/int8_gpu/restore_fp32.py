"""The MiniLM-L3 transformer as carried (float16-stored weights, vocabulary cut to 2048 rows) -> float32 ONNX."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

m = onnx.load(sys.argv[1])
for init in m.graph.initializer:
    a = numpy_helper.to_array(init)
    if a.dtype == np.float16:
        init.CopyFrom(numpy_helper.from_array(a.astype(np.float32), init.name))
onnx.save(m, sys.argv[2])
