# Sourced by the lease scripts (lease_issue43_fp8_1b.sh, lease_issue43_checks.sh) on the device
# machine, after `set -euo pipefail`: installs the carried wheels (.whl: the image has no pydantic
# or torchao), puts the worktree's source first on the path, and writes $OUT/device.txt with the
# commit (COMMIT, else "unknown"), the GPU and the torch / CUDA (and torchao, when carried) versions.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
COMMIT=${COMMIT:-unknown}
echo "commit $COMMIT" | tee "$OUT/device.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | tee -a "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/device.txt"
python3 -c "import torchao.float8, torchao; print('torchao', torchao.__version__)" 2>&1 | tail -1 | tee -a "$OUT/device.txt" || true
