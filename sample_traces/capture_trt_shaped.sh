#!/bin/bash
# Capture trt_shaped.py (eager, CUDA-graph and trtexec --useCudaGraph form) under Nsight Systems on the GPU machine and export
# SQLite. Run from the repository root after `source .gpu/env.sh`:  bash sample_traces/capture_trt_shaped.sh
# Writes $OUT/trt_MODE.sqlite for each mode (MODES, default all three), their manifests and environment.txt.
set -u
OUT="${OUT:-/tmp/out}"; W=/tmp/trt-shaped; rm -rf "$W"; mkdir -p "$W" "$OUT"
{ nsys --version; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'; } > "$OUT/environment.txt" 2>&1
for mode in ${MODES:-eager graph trtexec_graph}; do
  t0=$(date +%s)
  nsys profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite true -o "$W/trt_$mode" \
      python3 sample_traces/trt_shaped.py "$mode" --manifest "$OUT/trt_$mode.json" > "$W/$mode.log" 2>&1
  rc=$?
  nsys export --type sqlite --force-overwrite true -o "$OUT/trt_$mode.sqlite" "$W/trt_$mode.nsys-rep" >> "$W/$mode.log" 2>&1
  echo "$mode rc=$rc export=$? $(( $(date +%s) - t0 ))s $(stat -c %s "$OUT/trt_$mode.sqlite" 2>/dev/null) bytes"
  tail -3 "$W/$mode.log"
done
cat "$OUT/environment.txt"
