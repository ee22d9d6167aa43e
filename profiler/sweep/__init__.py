"""``trtprof sweep`` as a library: engine variants of one ONNX model, timed, checked against FP32, stored.

    from profiler.sweep import SweepConfig, run_sweep
    summary = run_sweep(SweepConfig(model="model.onnx", precisions=["fp32", "fp16"], streams=[1, 2]),
                        store=Store.open("trtprof.db"), progress=print)

The sweep is the product of the axes (precision x workspace x streams x CUDA graph); combinations the
backend cannot run are listed as ``skipped`` with the reason. Each variant runs as a pipeline of steps
(:mod:`.steps`): prepare the model (fp16 conversion, int8 calibration) -> build (a ``BuildError`` marks
it ``failed`` and the sweep goes on) -> bind -> CUDA graph -> time it with the harness -> memory ->
compare its outputs with the FP32 reference on the same inputs -> localize a breach -> per-layer profile
in a separate pass. Every finished variant is stored at once, so Ctrl-C loses nothing already measured:
the run is marked ``interrupted`` and ``resume_sweep`` (``--resume RUN``) runs only the variants not yet done.

The returned summary is summary.json, a :class:`profiler.documents.SweepDocument`:
``{"kind": "sweep", "run": {...}, "variants": [...], "findings": [...]}``.

Modules, in the order of the flow: :mod:`.config` (SweepConfig, the plan), :mod:`.run` (the Sweep: what
every variant shares, the loop, storing, the summary), :mod:`.steps` (one variant), :mod:`.accuracy_check`
and :mod:`.localize` (against FP32), :mod:`.records` (summary.json's variant records and the gate),
:mod:`.repeat` (``--repeat``), :mod:`.resume` (``--resume``), :mod:`.options` (the command line's option
strings into a SweepConfig), :mod:`.outputs` (summary.json and report.html, the table, the gate's sentence).
What the sweep does differently per backend it asks the backend's capabilities
(:class:`profiler.backends.base.Backend`), never its name.
"""

from profiler.sweep.accuracy_check import CPU_FAITHFUL_NOTES, stored_accuracy_checks, stored_accuracy_findings
from profiler.sweep.config import (ACCURACY_SAMPLES, BUSY_HOST_SHARE, HOLDOUT_FRACTION, PlannedVariant, SweepConfig,
                                   plan_variants)
from profiler.sweep.records import VARIANT_KEYS, gate_failures, stored_variant_record, variant_line
from profiler.sweep.resume import open_resume, resume_sweep
from profiler.sweep.run import Prepared, Progress, Sweep, VariantOutcome, run_sweep
from profiler.sweep.steps import STEPS, Step, VariantState

__all__ = ["ACCURACY_SAMPLES", "BUSY_HOST_SHARE", "CPU_FAITHFUL_NOTES", "HOLDOUT_FRACTION", "PlannedVariant",
           "Prepared", "Progress", "STEPS", "Step", "Sweep", "SweepConfig", "VARIANT_KEYS", "VariantOutcome", "VariantState",
           "gate_failures", "open_resume", "plan_variants", "resume_sweep", "run_sweep", "stored_accuracy_checks",
           "stored_accuracy_findings", "stored_variant_record", "variant_line"]
