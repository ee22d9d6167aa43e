"""One task per unit of work, each returning a typed outcome, run where the caller chooses.

    from profiler.pipeline.analyse import AnalyseRequest, analyse     # a capture -> JSON, report, store
    outcome = analyse(AnalyseRequest("run.sqlite", json_path="a.json", report_path="a.html"))

Every entry point calls the same task: ``trtprof analyze CAPTURE``, each capture of ``analyze A B --jobs N``
(or ``--scheduler``) and ``sweep --nsys`` call :func:`.analyse.analyse`; so a feature added to the task is in
all of them. Tasks print nothing; the command line says what their outcome holds.
"""
