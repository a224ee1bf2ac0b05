#!/usr/bin/env bash
# One GPU lease for issue 43 (at most 550 s of command on an H100 or H200), prepared and smoke-tested on the
# CPU. Run it as the device tool's command, carrying .gpu and .whl:
#   .gpu/run      the token store of benchmarks/configs/gpu_125m.yaml (tokens/ and config.yaml)
#   .gpu/nanogpt  model.py, train.py, configurator.py and COMMIT of ../shared/peers/nanogpt
#   .whl          pydantic, pydantic-core, annotated-types, typing-inspection, typing-extensions
#                 wheels for CPython 3.12 (the device image has no pydantic)
# and COMMIT=<short hash> in the environment. Building them here (about 90 s; .gpu and .whl are
# listed in .git/info/exclude):
#   .venv/bin/tokenmill curate --config benchmarks/configs/gpu_125m.yaml -w 2
#   .venv/bin/tokenmill tokenizer train benchmarks/configs/gpu_125m.yaml
#   .venv/bin/tokenmill tokenize benchmarks/configs/gpu_125m.yaml
#   mkdir -p .gpu/run .gpu/nanogpt && cp runs/gpu-125m/config.yaml .gpu/run/ && cp -r runs/gpu-125m/tokens .gpu/run/
#   cp ../shared/peers/nanogpt/{model.py,train.py,configurator.py,COMMIT} .gpu/nanogpt/
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
# and the device call, with the hash written out here (the device copy may have no .git):
#   run(command="COMMIT=<git rev-parse --short HEAD> bash benchmarks/lease_issue43.sh",
# carry=[".gpu", ".whl"], timeout_s=580). Each part writes its JSON under $OUT as it goes, so
# a part cut short by its timeout keeps what it measured; the parts run in order of what issue 43
# most needs: tokens/s against nanoGPT, host synchronisations per step, time to loss with Muon.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
COMMIT=${COMMIT:-unknown}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/device.txt"

# 1. GPT-2-small shape, batch 32: nanoGPT compiled, tokenmill's default recipe (document masking),
#    tokenmill compiled with plain causal attention (the third arm starts only within the budget);
#    deferred host reads and fused projections are the defaults on one GPU.
timeout 210 python3 benchmarks/bench_train_cuda.py --run .gpu/run --peer .gpu/nanogpt --steps 30 --repeats 1 \
    --arms 2,6,3 --budget 150 --arm-timeout 90 --set train.micro_batch=32 \
    --json "$OUT/train_cuda.json" --commit "$COMMIT" > "$OUT/train_cuda.log" 2>&1
echo "train_cuda rc=$?"; grep -E "^\|" "$OUT/train_cuda.log" | tail -6

# 2. Host synchronisations per step, immediate against deferred (a small model, eager).
timeout 60 python3 benchmarks/probe_host_syncs.py --run .gpu/run --set model.d_model=256 --set model.n_layers=4 \
    --set model.n_heads=4 --json "$OUT/host_syncs.json" > "$OUT/host_syncs.log" 2>&1
echo "host_syncs rc=$?"; tail -2 "$OUT/host_syncs.log"

# 3. Time to loss: the LR grid's low edge (3e-4, both sides; 6e-4 won at the edge of the last
#    lease's grid) with Muon beside AdamW, 40 s per run as in the last lease.
timeout 280 python3 benchmarks/bench_time_to_loss.py --run .gpu/run --peer .gpu/nanogpt --seconds 40 \
    --lr-grid 3e-4 --peer-lr-grid 3e-4 --arm muon train.optimizer=muon --budget 245 --arm-timeout 120 \
    --json "$OUT/time_to_loss_edge.json" --commit "$COMMIT" > "$OUT/time_to_loss.log" 2>&1
echo "time_to_loss rc=$?"; grep -E "^seed" "$OUT/time_to_loss.log" | tail -4
