# INT8 on the GPU path (issue 35): the executor's tests, then FP32/FP16/INT8 sweeps of a CNN and a
# transformer on the cuda backend, eager and CUDA graph. Run on the GPU machine from a folder D holding
# this checkout's profiler/, pyproject.toml, the tests named below, these scripts and models/ (made by
# make_inputs.py, plus rapidocr's ch_ppocr_mobile_v2.0_cls_infer.onnx), beside .gpu/whl's wheels.
D=$PWD/.dev-int8; M=$D/models; cd $D  # this checkout's profiler, not the one at the root
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.gpu/whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$D:/tmp/site PYTHONUNBUFFERED=1 TRTPROF_CACHE_DIR=/tmp/trtprof-cache
python3 -c 'import profiler, torch; print(profiler.__file__, torch.__version__, torch.cuda.get_device_name())'
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 $D/restore_fp32.py $M/minilm_l3_vocab2048_f16store.onnx /tmp/minilm.onnx
[ -n "$SKIP_TESTS" ] || (cd $D && timeout 120 python3 -m pytest -p no:xdist -p no:cacheprovider -q -rs \
  tests/test_cuda_ref_qdq.py tests/test_cuda_ref_quant.py tests/test_cuda_ref_ops.py tests/test_backend_cuda_torch.py \
  2>&1 | tail -25)
rm -rf /tmp/sw-*; common="--duration 0.5 --warmup 100 --no-store"
sweep() {  # name model args...
  name=$1; model=$2; shift 2
  timeout 150 python3 -m profiler sweep $model "$@" $common --out /tmp/sw-$name > /tmp/sw-$name.log 2>&1
  echo "== $name rc=$?"; grep -E "GATE|fastest|note:|error" /tmp/sw-$name.log | head -8
  mkdir -p $OUT/$name; cp /tmp/sw-$name/summary.json /tmp/sw-$name.log $OUT/$name/ 2>/dev/null
}
CLS="$M/ch_ppocr_mobile_v2.0_cls_infer.onnx --shape x:1x3x48x192 --calib $M/cls_calib.npz --inputs $M/cls_inputs.npz"
LM="/tmp/minilm.onnx --shape input_ids:1x32 --shape attention_mask:1x32 --calib $M/minilm_calib.npz --inputs $M/minilm_inputs.npz"
sweep cls-cuda $CLS --backend cuda --precision fp32,fp16,int8 --cuda-graph off,on
sweep lm-cuda $LM --backend cuda --precision fp32,fp16,int8 --cuda-graph off,on --no-localize
python3 $D/digest.py $OUT/*/summary.json 2>&1 | tee $OUT/digest.txt
