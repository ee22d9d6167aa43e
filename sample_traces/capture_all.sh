#!/bin/bash
# Capture every workload of workloads.py under Nsight Systems on the GPU machine, export SQLite,
# and record nsys's own summaries (nsys stats / nsys analyze) as the reference our analysis is
# compared against. Run from the repository root after `source .gpu/env.sh`:
#     bash sample_traces/capture_all.sh [WORKLOAD ...]
# Writes $OUT/captures.tar.gz (the .sqlite exports and manifests) and $OUT/reference.tar.gz
# (CSV/text from nsys stats and nsys analyze, versions, nvidia-smi), and prints a short table.
set -u
OUT="${OUT:-/tmp/out}"
WORK=/tmp/trtprof-captures
CAP="$WORK/captures"
REF="$WORK/reference"
rm -rf "$WORK"; mkdir -p "$CAP" "$REF" "$OUT"
NSYS_PROFILE=(nsys profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite true)
ALL=(launch_bound graph graph_node host_stall pageable_vs_pinned multistream multistream_saturated no_nvtx sync_heavy transfer_bound)
[ $# -gt 0 ] && ALL=("$@")

{
  echo "# nsys"; nsys --version
  echo "# nvidia-smi"; nvidia-smi
  echo "# nvidia-smi query"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,pstate --format=csv
  echo "# python / torch"
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  echo "# uname"; uname -r
} > "$REF/environment.txt" 2>&1
nsys stats --help > "$REF/nsys_stats_help.txt" 2>&1
nsys analyze --help > "$REF/nsys_analyze_help.txt" 2>&1

printf "%-20s %6s %9s %10s %s\n" workload rc wall_s sqlite_kB note > "$WORK/table.txt"
for name in "${ALL[@]}"; do
  wl="$name"; extra=()
  if [ "$name" = graph_node ]; then wl=graph; extra=(--cuda-graph-trace=node); fi
  t0=$(date +%s.%N)
  "${NSYS_PROFILE[@]}" "${extra[@]}" -o "$WORK/$name" \
      python3 sample_traces/workloads.py "$wl" --manifest "$CAP/$name.json" > "$WORK/$name.profile.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  nsys export --type sqlite --force-overwrite true -o "$CAP/$name.sqlite" "$WORK/$name.nsys-rep" \
      >> "$WORK/$name.profile.log" 2>&1 || rc=$((rc + 100))
  # nsys's own summaries, for side-by-side comparison
  nsys stats -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum,nvtx_gpu_proj_sum,cuda_gpu_mem_time_sum \
      --format csv --force-export false --output "$REF/${name}_stats" "$CAP/$name.sqlite" \
      > "$REF/${name}_stats.log" 2>&1 || echo "nsys stats failed ($?)" >> "$REF/${name}_stats.log"
  nsys analyze -r gpu_gaps,cuda_api_sync,cuda_memcpy_async,cuda_memcpy_sync \
      --format csv --force-export false --output "$REF/${name}_analyze" "$CAP/$name.sqlite" \
      > "$REF/${name}_analyze.log" 2>&1 || echo "nsys analyze failed ($?)" >> "$REF/${name}_analyze.log"
  # a human-readable copy of the analysis too (stdout)
  nsys analyze -r gpu_gaps,cuda_api_sync,cuda_memcpy_async,cuda_memcpy_sync \
      --force-export false "$CAP/$name.sqlite" > "$REF/${name}_analyze.txt" 2>&1 || true
  cp "$WORK/$name.profile.log" "$REF/${name}_profile.log"
  kb=$(( $(stat -c %s "$CAP/$name.sqlite" 2>/dev/null || echo 0) / 1024 ))
  wall=$(python3 -c "print(f'{$t1-$t0:.1f}')")
  note=$(python3 -c "import json,sys; d=json.load(open('$CAP/$name.json')); print('wall', d.get('wall_s'), 'ranges', d.get('ranges'))" 2>/dev/null)
  printf "%-20s %6s %9s %10s %s\n" "$name" "$rc" "$wall" "$kb" "$note" >> "$WORK/table.txt"
done
cp "$WORK/table.txt" "$REF/table.txt"
(cd "$WORK" && tar czf "$OUT/captures.tar.gz" captures && tar czf "$OUT/reference.tar.gz" reference)
ls -la "$OUT"
cat "$WORK/table.txt"
