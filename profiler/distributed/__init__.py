"""Past one process: many captures analysed at once, and sweep variants spread over GPUs or a Dask cluster.

    from profiler.distributed.captures import analyze_many       # trtprof analyze a.sqlite b.sqlite --jobs 4
    from profiler.distributed.sweep import run_parallel           # trtprof sweep model.onnx --devices 0,1

Each capture is the pipeline's analyse task (:mod:`profiler.pipeline.analyse`) and each variant its measure
task (:mod:`profiler.pipeline.measure`), merged into the run with ``Sweep.merge``; the runners
(:mod:`profiler.pipeline.runners`) decide where they run. The command-line options live in
:mod:`profiler.cli.batch` and :mod:`profiler.cli.devices`. Two ways to run the tasks:

- local processes (``--jobs N`` for captures, ``--devices 0,1`` for a sweep): ``concurrent.futures``
  process pools, so these work on a base install without Dask. A capture runs in a fresh process of its own
  (its memory goes back to the system when it is done, and a per-process limit makes an oversized capture
  fail alone); a sweep has one long-lived process per GPU, started with ``CUDA_VISIBLE_DEVICES`` set to that
  GPU, which measures one variant at a time.
- a Dask distributed cluster (``--scheduler tcp://HOST:8786``): the same task functions as Dask tasks; a
  sweep's tasks ask for one ``GPU`` resource each, so a worker started with ``--resources GPU=1`` measures
  one variant at a time. Dask is imported only in this mode (``pip install 'trtprof[dask]'``).

Every task writes its own results into the run store (a PostgreSQL server that every worker reaches, or a
SQLite file on a filesystem they share) and returns a small record; a task whose worker dies is reported as
lost with the reason, and the rest go on.
"""
