#!/usr/bin/env bash
# One GPU lease for issue 43's FP8 option (about 4-6 minutes of command on an H100 or H200; the
# H100/H200 are sm_90, so train.fp8 runs there), prepared and smoke-tested on the CPU. Run it as the
# device tool's command, carrying .gpu and .whl:
#   .gpu/run      the token store of benchmarks/configs/gpu_125m.yaml (tokens/ and config.yaml)
#   .whl          the pydantic wheels of benchmarks/lease_issue43.sh (the device image has no pydantic)
#                 and torchao's, for CPython 3.12 (the image has no torchao). Fetch it here with
#                   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
#                     -d .whl torchao==0.18.0
#                 (0.18.0 imports and converts with torch 2.13 here; the image's torch is 2.11: if
#                 `import torchao.float8` fails there, carry the torchao release built for torch 2.11)
# and COMMIT=<short hash> in the environment. The benchmark writes its JSON under $OUT after each
# arm, so an arm cut short by the timeout keeps what the other measured.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
COMMIT=${COMMIT:-unknown}
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, torchao.float8, torchao; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchao', torchao.__version__)" \
    2>&1 | tail -1 | tee -a "$OUT/device.txt"

# bf16 then fp8 on the GPT-2-small shape (~125M), batch 32 × 1024 tokens, 300 steps each, compiled:
# tokens/s ratio (the speed-up) and final training / held-out loss ratios.
timeout 480 python3 benchmarks/bench_fp8.py --run .gpu/run --steps 300 --set train.micro_batch=32 \
    --json "$OUT/fp8.json" --commit "$COMMIT" > "$OUT/fp8.log" 2>&1
echo "fp8 rc=$?"; grep -E "^(bf16|fp8)" "$OUT/fp8.log" | cut -c1-400
