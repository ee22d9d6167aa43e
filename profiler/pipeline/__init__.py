"""One task per unit of work, each returning a typed outcome, run where the caller chooses.

    from profiler.pipeline.analyse import AnalyseRequest, analyse     # a capture -> JSON, report, store
    outcome = analyse(AnalyseRequest("run.sqlite", json_path="a.json", report_path="a.html"))

- :mod:`.analyse`: a capture read, analysed, written (JSON, report with its timeline, Chrome trace) and
  stored -> ``AnalyseOutcome``. ``trtprof analyze CAPTURE``, each capture of ``analyze A B --jobs N`` (or
  ``--scheduler``) and ``sweep --nsys`` call it, so a feature added to it is in all of them.
- :mod:`.measure`: one sweep variant measured and stored in a worker process -> ``profiler.sweep.VariantOutcome``,
  which the coordinator adds to its run with ``Sweep.merge`` (the serial sweep merges its own the same way).
- :mod:`.imports`: trtexec export sets -> the import document, stored and written -> ``ImportOutcome``.
- :mod:`.runners`: where tasks run, one interface (``map(fn, items)`` yielding ``(item, Outcome)``, ``close``):
  this process, local processes (``--jobs``), one process per GPU (``--devices``), a Dask cluster; over
  :mod:`.pools` (process pools and the Dask client).

Tasks print nothing; the command line (``profiler.cli``) says what their outcome holds.
"""
