#!/usr/bin/env bash
# One GPU lease for issue 45's FP16 (dynamic loss scaling) against bf16: about 4-6 minutes of command
# (at most 480 s) on an H100 or H200, prepared and smoke-tested on the CPU (bench_fp16.py --smoke,
# tests/train/test_fp16.py). Run it as the device tool's command, carrying .gpu and .whl:
#   .gpu/run      the token store of benchmarks/configs/gpu_125m.yaml (tokens/ and config.yaml), built as
#                 the header of benchmarks/lease_issue43.sh says
#   .whl          the pydantic wheels of benchmarks/lease_issue43.sh (the device image has no pydantic)
# and COMMIT=<short hash> in the environment (the device copy may have no .git):
#   run(command="COMMIT=<git rev-parse --short HEAD> bash benchmarks/lease_issue45_fp16.sh",
#       carry=[".gpu", ".whl"], timeout_s=540)
# bf16 then fp16 on the GPT-2-small shape (~125M), batch 32 × 1024 tokens, 300 steps each, compiled,
# the same seed and batches: the final training loss within 1% (fp16_over_bf16.target_loss_within_1pct),
# the overflow steps and the loss scale's trajectory, tokens/s of each. The benchmark writes its JSON
# under $OUT after each arm, so an fp16 arm cut short by the timeout keeps the bf16 figures.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
COMMIT=${COMMIT:-unknown}
echo "commit $COMMIT" | tee "$OUT/device.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | tee -a "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -1 | tee -a "$OUT/device.txt"

timeout 460 python3 benchmarks/bench_fp16.py --run .gpu/run --steps 300 --set train.micro_batch=32 \
    --json "$OUT/fp16.json" --commit "$COMMIT" > "$OUT/fp16.log" 2>&1
echo "fp16 rc=$?"; grep -E "^(bf16|fp16)" "$OUT/fp16.log" | cut -c1-600
