#!/bin/bash
# The GPU-path proof in one device call (after `source .gpu/env.sh`): real models on the cuda backend,
# harness overhead, the sweep under nsys (with its report), small harness captures to commit, the
# multistream sample workload, and (when present) benchmarks/bench_analyze.py. Everything lands in
# $OUT as three archives plus the log; each step's output tail is printed.
# For bench_analyze, carry ADBC's SQLite driver (../shared/gpu/prepare.sh adbc-driver-sqlite adbc-driver-manager),
# else the loader and the floor fall back to sqlite3 and the comparison with nsys is not the real one.
set -u
OUT="${OUT:-/tmp/out}"; W=/tmp/trtprof-gpu; L=$W/logs; mkdir -p "$W" "$L" "$OUT"
M=.gpu/models
step() { local name=$1; shift; local t0=$(date +%s); timeout "${LIMIT:-240}" "$@" > "$L/$name.txt" 2>&1; local rc=$?;
         echo "== $name rc=$rc $(( $(date +%s) - t0 ))s"; grep -v '^\s*\[' "$L/$name.txt" | tail -n "${TAILN:-14}"; }
LIMIT=150 TAILN=9 step models python3 benchmarks/bench_gpu_path.py models --models-dir $M --out $W/models
LIMIT=150 TAILN=40 step overhead python3 benchmarks/bench_gpu_overhead.py --models-dir $M --iterations 200 --rounds 10 --json $W/overhead.json
LIMIT=200 TAILN=30 step nsys_sweep python3 benchmarks/bench_gpu_path.py nsys-sweep --model $M/ch_PP-OCRv4_rec_infer.onnx --out $W/nsys --iterations 30 --duration 0.4 --report $W/nsys/report.html
LIMIT=90 TAILN=8 step harness_cls python3 benchmarks/bench_gpu_path.py nsys-sweep --model $M/ch_ppocr_mobile_v2.0_cls_infer.onnx --out $W/small --precisions fp32 --streams 1 --graphs off,on --iterations 40 --duration 0 --capture-name harness_cls --label harness-cls
LIMIT=90 TAILN=8 step harness_streams python3 benchmarks/bench_gpu_path.py nsys-sweep --model $M/ch_ppocr_mobile_v2.0_cls_infer.onnx --out $W/streams --precisions fp32 --streams 1,2 --graphs on --iterations 100 --duration 0 --capture-name harness_cls_streams --label harness-cls-streams
LIMIT=60 TAILN=3 step multistream bash sample_traces/capture_all.sh multistream
if [ -f benchmarks/bench_analyze.py ]; then
  LIMIT=${ANALYZE_LIMIT:-200} TAILN=25 step bench_analyze python3 benchmarks/bench_analyze.py --no-10x --json $W/bench_analyze.json
fi
cp /tmp/trtprof-captures/captures/multistream.* $W/ 2>/dev/null; cp -r /tmp/trtprof-captures/reference $W/ms_reference 2>/dev/null
(cd $W && tar czf $OUT/results.tar.gz logs overhead.json models/models.json nsys/summary_nsys.json nsys/report.html \
   small/summary_nsys.json streams/summary_nsys.json bench_analyze.json ms_reference 2>/dev/null)
(cd $W && tar czf $OUT/captures.tar.gz small/harness_cls.sqlite streams/harness_cls_streams.sqlite multistream.sqlite multistream.json 2>/dev/null)
ls -la $OUT
