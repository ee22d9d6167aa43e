#!/bin/bash
# Capture the workloads of patterns.py under Nsight Systems on the GPU machine, export SQLite and record nsys's own
# summaries. Run from the repository root after `source .gpu/env.sh`:
#     bash sample_traces/capture_patterns.sh GROUP:NAME ... (default: every capture, grouped as issue 29 / issue 32)
# Each group's exports, manifests and nsys logs go to $OUT/GROUP.tar.gz as soon as the group is done, the nsys stats
# references (cuda_gpu_kern_sum, cuda_api_sum, nvtx_sum) and versions to $OUT/reference.tar.gz.
set -u
OUT="${OUT:-/tmp/out}"
W=/tmp/trtprof-patterns
REF="$W/reference"
rm -rf "$W"; mkdir -p "$REF" "$OUT"
export SPIN_CUBIN=/tmp/trtprof-spin.cubin
nvcc -cubin -arch=sm_90 -o "$SPIN_CUBIN" sample_traces/spin.cu || echo "nvcc failed" >&2
{
  echo "# nsys"; nsys --version
  echo "# nvidia-smi query"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,pstate --format=csv
  echo "# python / torch"
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  echo "# nvcc"; nvcc --version | tail -1
  echo "# uname"; uname -r
} > "$REF/patterns_environment.txt" 2>&1
nsys profile --help > "$REF/nsys_profile_help.txt" 2>&1
NSYS_PROFILE=(nsys profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite true)
ALL=(i29:numbered_eager i29:numbered_graph i29:numbered_eager_again i29:stages i29:chained_enqueues
     i29:killed i29:killed_partial i29:tiny_buffer i29:launcher
     i32:race i32:race_fixed i32:pipelined i32:rebuild i32:rebuild_fixed i32:two_contexts
     i32:one_context_two_streams i32:generate_graph i32:generate_drift i32:fp32_conv i32:fp16_conv
     i32:sleeps i32:gpu_wait)
[ $# -gt 0 ] && ALL=("$@")

finish_group() {  # tar a finished group's files into $OUT at once, so a later timeout loses nothing of it
  wait
  (cd "$W" && tar czf "$OUT/$1.tar.gz" "$1")
}

group=""
for item in "${ALL[@]}"; do
  g="${item%%:*}"; name="${item#*:}"
  if [ "$g" != "$group" ]; then [ -n "$group" ] && finish_group "$group"; group="$g"; mkdir -p "$W/$g"; fi
  CAP="$W/$g"; wl="$name"; extra=()
  case "$name" in
    numbered_eager_again) wl=numbered_eager ;;
    tiny_buffer) extra=(--cuda-flush-interval=1) ;;
    killed_partial) wl=killed; extra=(--cuda-flush-interval=100) ;;
    truncated) extra=(--duration=7) ;;
  esac
  t0=$(date +%s.%N)
  timeout "${PROFILE_TIMEOUT:-100}" "${NSYS_PROFILE[@]}" "${extra[@]}" -o "$W/$name" \
      python3 sample_traces/patterns.py "$wl" --manifest "$CAP/$name.json" > "$CAP/${name}_profile.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "$name rc=$rc $(python3 -c "print(f'{$t1-$t0:.1f}')")s" | tee -a "$W/table.txt"
  (  # export and nsys stats in the background while the next workload runs
    nsys export --type sqlite --force-overwrite true -o "$CAP/$name.sqlite" "$W/$name.nsys-rep" \
        > "$CAP/${name}_export.log" 2>&1
    echo "$name export rc=$? $(stat -c %s "$CAP/$name.sqlite" 2>/dev/null) bytes" >> "$W/table.txt"
    nsys stats -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum --format csv --force-export false \
        --output "$REF/${name}_stats" "$CAP/$name.sqlite" > "$REF/${name}_stats.log" 2>&1 \
        || echo "nsys stats failed ($?)" >> "$REF/${name}_stats.log"
  ) &
done
[ -n "$group" ] && finish_group "$group"
cp "$W/table.txt" "$REF/patterns_table.txt"
(cd "$W" && tar czf "$OUT/reference.tar.gz" reference)
ls -la "$OUT"
cat "$W/table.txt"
