#!/bin/bash
# The GPU-path proof in one device call (after `source .gpu/env.sh`): real models on the cuda backend,
# harness overhead, a sweep with its report, the same sweep under nsys, a small harness capture to
# commit, and the multistream sample workload. Results land in $OUT; a short log of each step in $OUT/*.txt.
set -u
OUT="${OUT:-/tmp/out}"; W=/tmp/trtprof-gpu; mkdir -p "$W" "$OUT"
M=.gpu/models
step() { local name=$1; shift; local t0=$(date +%s); timeout "${LIMIT:-240}" "$@" > "$OUT/$name.txt" 2>&1; local rc=$?;
         echo "== $name rc=$rc $(( $(date +%s) - t0 ))s"; tail -n "${TAILN:-14}" "$OUT/$name.txt"; }
LIMIT=150 step models python3 benchmarks/bench_gpu_path.py models --models-dir $M --out $W/models
cp $W/models/models.json $OUT/ 2>/dev/null
LIMIT=90 step overhead python3 benchmarks/bench_gpu_overhead.py --models-dir $M --iterations 2000 --repeats 5 --json $W/overhead.json
LIMIT=200 TAILN=22 step nsys_sweep python3 benchmarks/bench_gpu_path.py nsys-sweep --model $M/ch_PP-OCRv4_rec_infer.onnx --out $W/nsys --iterations 30 --duration 0.4
cp $W/nsys/summary_nsys.json $OUT/ 2>/dev/null
LIMIT=90 step harness_capture python3 benchmarks/bench_gpu_path.py nsys-sweep --model $M/ch_ppocr_mobile_v2.0_cls_infer.onnx --out $W/small --precisions fp32 --streams 1 --graphs off,on --iterations 40 --duration 0 --capture-name harness_cls --label harness-cls
LIMIT=60 step multistream bash sample_traces/capture_all.sh multistream
LIMIT=150 TAILN=12 step sweep python3 benchmarks/bench_gpu_path.py sweep --model $M/ch_PP-OCRv4_rec_infer.onnx --out $W/sweep --iterations 30 --duration 0.5 --report $W/sweep/report.html
cp $W/sweep/summary.json $OUT/summary_sweep.json 2>/dev/null
(cd $W && tar czf $OUT/gpu_results.tar.gz overhead.json sweep/report.html sweep/summary.json nsys/summary_nsys.json small/summary_nsys.json small/harness_cls.sqlite models/models.json 2>/dev/null)
ls -la $OUT
