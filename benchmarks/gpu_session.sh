#!/usr/bin/env bash
# One lease of a GPU machine, every check in one call (benchmarks/README: "GPU sessions").
# Writes under $OUT: env.txt, log.txt, fp8_gemm.json, campaign.jsonl, bench_resnet50.json, profile.yaml.
# Wheels of the packages the machine's image lacks travel in .whl/ (carried); LIMIT: seconds this script may run.
# STEPS: which checks, in this order (default: all but host and profile): fp8 bench profile pytest host campaign
# calibrate kernels. kernels: benchmarks/gpu_kernels.py (depthwise convolutions, attention by backend; KERNELS_S
# seconds, default 200; KERNELS_ARGS: more options, e.g. "--variants 4,5 --no-attention") -> kernels.jsonl. profile: `traincast bench model` breakdowns of ConvNeXt-T and MobileNet v2 in FP32.
# host: `traincast calibrate --device cuda --host-only` -> host_profile.yaml. FP8_REPS: replays per FP8 GEMM.
set -u
STEPS=" ${STEPS:-fp8 bench pytest campaign calibrate} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1
LIMIT=${LIMIT:-520}
OUT=${OUT:-/tmp/gpu_session}; mkdir -p "$OUT"
L=$OUT/log.txt
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed" >> "$L"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
export TRAINCAST_DB=/tmp/traincast.db
left() { echo $(( LIMIT - SECONDS )); }
step() { echo "=== $(date +%T) [${SECONDS}s] $*" >> "$L"; }
{ nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE; python3 -c "import torch,torchvision,transformers; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), \
'torchvision', torchvision.__version__, 'transformers', transformers.__version__); \
p=torch.cuda.get_device_properties(0); print(p.name, p.multi_processor_count, 'SMs', p.total_memory)"; } > "$OUT/env.txt" 2>&1
if want kernels; then
  step "kernels: depthwise convolutions and attention"
  timeout $(( ${KERNELS_S:-200} + 60 )) python3 benchmarks/gpu_kernels.py --out "$OUT/kernels.jsonl" \
    --deadline "${KERNELS_S:-200}" ${KERNELS_ARGS:-} >> "$L" 2>&1
  echo "kernels rc=$?" >> "$L"
fi
if want fp8; then
  step fp8 gemms
  timeout 90 python3 benchmarks/fp8_gemm_bench.py --reps "${FP8_REPS:-20}" --out "$OUT/fp8_gemm.json" >> "$L" 2>&1
  echo "fp8 rc=$?" >> "$L"
fi
if want bench; then
  step "bench model (CLI, CUDA events + profiler breakdown)"
  timeout 75 python3 -m traincast bench model resnet50 -b 128 --device cuda --precision amp-bf16 --no-save \
    --out "$OUT/bench_resnet50.json" >> "$L" 2>&1; echo "bench rc=$?" >> "$L"
fi
if want profile; then
  # the native depthwise kernels (docs/gpu-accuracy.md, the H200 lease): per-op breakdown of two FP32 steps
  for m in convnext_tiny mobilenet_v2; do
    step "bench model $m fp32 (profiler breakdown)"
    timeout 75 python3 -m traincast bench model $m -b 64 --device cuda --precision fp32 --no-save \
      --out "$OUT/bench_${m}_fp32.json" >> "$L" 2>&1; echo "profile $m rc=$?" >> "$L"
  done
fi
if want pytest; then
  step "pytest: the CUDA autocast test"
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_autocast.py -k cuda >> "$L" 2>&1; echo "pytest rc=$?" >> "$L"
fi
if want host; then
  step "calibrate --device cuda --host-only"
  timeout 90 python3 -m traincast calibrate --device cuda --host-only --out "$OUT/host_profile.yaml" --name host-lease \
    >> "$L" 2>&1; echo "host rc=$?" >> "$L"
fi
if want campaign; then
  step campaign
  want calibrate && D=$(( $(left) - 110 )) || D=$(( $(left) - 30 ))
  timeout $(( D + 25 )) python3 benchmarks/gpu_campaign.py --device cuda --out "$OUT/campaign.jsonl" --deadline $D >> "$L" 2>&1
  echo "campaign rc=$?" >> "$L"
fi
if want calibrate; then
  step "calibrate --device cuda"
  T=$(( $(left) - 5 ))
  [ "$T" -gt 30 ] && timeout $T python3 -m traincast calibrate --device cuda --batch-sizes 32,128 --layer-samples 0 \
    --budget $(( T - 25 ))s --in-process --out "$OUT/profile.yaml" --name h100-lease >> "$L" 2>&1; echo "calibrate rc=$?" >> "$L"
fi
step done
