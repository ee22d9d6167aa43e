"""Capture rules: diagnoses of an nsys capture's NVTX range series, GPU gaps and copies.

Each rule is a pure function of a :class:`profiler.capture.context.CaptureContext` and its thresholds and
returns findings whose ``evidence`` carries the numbers and ``threshold`` the limits they were compared
with. One module per rule; its defaults are that module's constants, severity bands included, and
every one can be overridden per run (``AnalysisOptions.thresholds = {"jitter": {"max_cov_pct": 5}}``).
The severity a rule gives is provisional: :mod:`profiler.rules.impact` sets it from the finding's cost where that is known.

Rule ids (scope ``capture``) are public: ``launch_overhead``, ``gpu_idle``, ``jitter``, ``sync_api``,
``pageable_memcpy``, ``transfer_bound``, ``stream_race`` (a correctness warning: it carries no cost),
``repeated_setup``, ``host_sleeps``.

A new capture rule is one module here with one decorated function (``profiler.rules`` finds it).
"""
