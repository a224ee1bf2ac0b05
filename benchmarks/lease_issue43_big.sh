#!/usr/bin/env bash
# Issue 43, "bigger models on one chip" and the staged document mask: a later GPU lease part (at most 450 s of command on an H100
# or H200), prepared and smoke-tested on the CPU (bench_big_models.py --smoke-cpu). Same conventions
# as lease_issue43.sh: run it as the device tool's command, carrying
#   .gpu/run      the token store of benchmarks/configs/gpu_125m.yaml (tokens/; the 350M and 1B
#                 configs use the same data and 32,768-token vocabulary)
#   .whl          pydantic, pydantic-core, annotated-types, typing-inspection, typing-extensions
#                 wheels for CPython 3.12 (the device image has no pydantic)
# and COMMIT=<short hash> in the environment. Trains gpu_350m.yaml and gpu_1b.yaml (selective
# activation checkpointing) for 20 steps each, compiled, each in its own process: tokens/s, MFU
# against the measured bf16 peak, the measured peak memory beside the memory model's estimate.
# The JSON is rewritten after each config, so a config cut short by its timeout keeps the other's.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
COMMIT=${COMMIT:-unknown}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"

timeout 285 python3 benchmarks/bench_big_models.py --run .gpu/run --steps 20 --config-timeout 135 --budget 150 \
    --json "$OUT/big_models.json" --commit "$COMMIT" > "$OUT/big_models.log" 2>&1
echo "big_models rc=$?"; grep -E "^\||TFLOP" "$OUT/big_models.log" | tail -5

# The document mask built when the batch is staged (train/staging.py) vs inside the forward, eager
# and compiled, flex and SDPA arms (about 100 s together on an H100); the JSON is the script's stdout.
for c in "" "--compile"; do
  name=doc_mask${c:+_compiled}
  TORCH_LOGS=recompiles timeout 75 python3 benchmarks/bench_doc_mask.py --device cuda --batch 16 --seq-len 1024 \
      --steps 20 --repeats 3 $c > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "$name rc=$?"; grep -c -i recompil "$OUT/$name.log" || true
done
