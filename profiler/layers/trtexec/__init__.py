"""trtexec exports: per-layer profile, engine layer info, per-query times, logs and summaries.

Files of one engine are found by name prefix (``resnet.onnx.engine.profile.json``,
``resnet.onnx.engine.graph.json``, ``resnet.onnx.engine.timing.json``...) or given explicitly;
:func:`find_export_sets` groups them, :func:`load_export` reads one group into an :class:`EngineExport`.

Timing statistics follow trtexec exactly (``profiler.stats``): queries whose compute starts inside
the warm-up are dropped, and each duration is rebuilt as the float32 difference trtexec computed
(see :func:`exact_duration_ms`) so min/max/median/percentiles/mean equal trtexec's printed summary.

Modules: ``common`` (file suffixes, bounds on numbers, JSON reading), ``layer_files`` (profile and layer
info), ``timing`` (per-query times, run metadata, logs) and ``exports`` (one engine's files found and read
together). Their names are this package's.
"""

from profiler.layers.trtexec.common import (
    DEFAULT_WARMUP_MS, DETAILED_HINT, MAX_COUNT, MAX_MS, SUFFIXES, _strip_profile, number, read_json,
)
from profiler.layers.trtexec.exports import (
    EngineExport, ExportSet, classify, find_export_sets, load_export, merge_profile_and_info, model_key,
)
from profiler.layers.trtexec.layer_files import (
    fused_nodes_from_metadata, fused_nodes_from_name, parse_layer_info, parse_profile,
)
from profiler.layers.trtexec.timing import (
    compare_with_trtexec, exact_duration_ms, parse_log, parse_run_metadata, parse_times, timing_summary,
)

__all__ = [
    "DEFAULT_WARMUP_MS", "DETAILED_HINT", "MAX_COUNT", "MAX_MS", "SUFFIXES", "EngineExport", "ExportSet",
    "_strip_profile", "classify", "compare_with_trtexec", "exact_duration_ms", "find_export_sets",
    "fused_nodes_from_metadata", "fused_nodes_from_name", "load_export", "merge_profile_and_info", "model_key",
    "number", "parse_layer_info", "parse_log", "parse_profile", "parse_run_metadata", "parse_times", "read_json",
    "timing_summary",
]
