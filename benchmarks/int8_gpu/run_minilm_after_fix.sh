# MiniLM-L3 on the cuda backend after the INT8 recipe's range check (benchmarks/README.md, int8_gpu/).
# Run on the GPU machine from the checkout root, with .dev-final/ holding this checkout's profiler/, reports/,
# restore_fp32.py and models/ (made by make_inputs.py), beside .gpu/ (env.sh and its wheels).
D=$PWD/.dev-final; cd $D; M=$D/models
source ../.gpu/env.sh >/dev/null 2>&1; export PYTHONPATH=$D:$PYTHONPATH PYTHONUNBUFFERED=1 TRTPROF_CACHE_DIR=/tmp/trtprof-cache
python3 -c 'import onnxruntime; print("onnxruntime", onnxruntime.__version__)'
python3 $D/restore_fp32.py $M/minilm_l3_vocab2048_f16store.onnx /tmp/minilm.onnx
LM="/tmp/minilm.onnx --shape input_ids:1x32 --shape attention_mask:1x32 --calib $M/minilm_calib.npz --inputs $M/minilm_inputs.npz"
timeout 250 python3 -m profiler sweep $LM --backend cuda --precision fp32,fp16,int8 --cuda-graph off,on --no-localize \
  --duration 0.5 --warmup 100 --no-store --out /tmp/sw-lm > /tmp/sw-lm.log 2>&1; echo "rc=$?"
grep -E "kept in float32|GATE|fastest|BREACH|variant |wsdefault.*(ok|failed)|cosine|error" /tmp/sw-lm.log | cut -c1-300 | head -30
cp /tmp/sw-lm/summary.json $OUT/sw-lm-summary.json; cp /tmp/sw-lm.log $OUT/
