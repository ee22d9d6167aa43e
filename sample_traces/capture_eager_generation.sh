#!/bin/bash
# Eager generation captures of issue 32 (generate_eager, generate_eager_bare, classify_eager, and one with GPU metrics):
# run on the GPU machine from sample_traces/ after `source .gpu/env.sh`; the exports land in $OUT. The committed
# generate_eager_metrics is the second form below (one request, 200 Hz); the first (3 requests, 1000 Hz) exported
# 3.8 MB and was not committed.
set -u
W=/tmp/dec; mkdir -p $W
P=(nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite true)
{ nsys --version; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,pstate --format=csv;
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; } > $OUT/env.txt 2>&1
for n in generate_eager generate_eager_bare classify_eager; do
  t0=$(date +%s)
  timeout 60 "${P[@]}" -o $W/$n python3 patterns.py $n --manifest $OUT/$n.json > $W/$n.log 2>&1
  echo "$n rc=$? $(( $(date +%s) - t0 ))s" >> $OUT/table.txt
  timeout 40 nsys export --type sqlite --force-overwrite true -o $OUT/$n.sqlite $W/$n.nsys-rep >> $W/$n.log 2>&1
  echo "$n export rc=$? $(stat -c %s $OUT/$n.sqlite 2>/dev/null)" >> $OUT/table.txt
done
n=generate_eager_metrics_1000hz
t0=$(date +%s)
PATTERNS_PROFILER_RANGE=1 timeout 60 "${P[@]}" --gpu-metrics-devices=all --gpu-metrics-frequency=1000 \
  --capture-range=cudaProfilerApi --capture-range-end=stop -o $W/$n python3 patterns.py generate_eager \
  --manifest $OUT/$n.json > $W/$n.log 2>&1
echo "$n rc=$? $(( $(date +%s) - t0 ))s" >> $OUT/table.txt
timeout 40 nsys export --type sqlite --force-overwrite true -o $OUT/$n.sqlite $W/$n.nsys-rep >> $W/$n.log 2>&1
echo "$n export rc=$? $(stat -c %s $OUT/$n.sqlite 2>/dev/null)" >> $OUT/table.txt
nsys profile --help 2>&1 | grep -A12 -i "gpu-metrics-devices" > $OUT/metrics_help.txt
m=generate_eager_metrics  # the committed one: workload generate_eager_one (one request), 200 Hz
PATTERNS_PROFILER_RANGE=1 timeout 60 "${P[@]}" --gpu-metrics-devices=all --gpu-metrics-frequency=200 \
  --capture-range=cudaProfilerApi --capture-range-end=stop -o $W/$m python3 patterns.py generate_eager_one \
  --manifest $OUT/$m.json > $W/$m.log 2>&1
echo "$m rc=$?" >> $OUT/table.txt
timeout 40 nsys export --type sqlite --force-overwrite true -o $OUT/$m.sqlite $W/$m.nsys-rep >> $W/$m.log 2>&1
cat $OUT/table.txt; ls -la $OUT
