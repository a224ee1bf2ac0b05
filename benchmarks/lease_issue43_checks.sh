#!/usr/bin/env bash
# One GPU lease for issue 43's "CUDA paths that have only run on the CPU" (about 4-5 minutes of
# command on an H100 or H200, at most ~475 s; run it with timeout_s=540), prepared and smoke-tested on the CPU
# (cuda_path_checks.py --smoke, tests/test_benchmark_cuda_checks.py). Run it as the device tool's
# command, carrying .gpu (.gpu/run: gpu_125m.yaml's token store and config.yaml, the GPT-2-small
# shape; benchmarks/lease_issue43.sh's header says how to build it) and .whl (pydantic's wheels: the
# image has none; torchao's may be there too, unused), with COMMIT=<short hash> in the environment:
#   run(command="COMMIT=<git rev-parse --short HEAD> bash benchmarks/lease_issue43_checks.sh",
#       carry=[".gpu", ".whl"], timeout_s=540)
# Each part in its own process under its own timeout, writing its own JSON under $OUT:
#   forward_clock  (~40 s)  forward seconds by CUDA events: positive, finite, within the step (host
#                           reads deferred and immediate), and against the wall time of synchronised forwards
#   probe_cost     (~130 s) the activation probe's cost on a compiled GPT-2-small step (ABBA, medians),
#                           and as the real trainer pays it (40-step runs, probe every step / never)
#   rope_phase     (~100 s) RoPE rebuilt at a phase boundary under torch.compile: recompiles, losses
#                           against eager in bf16
set -euo pipefail
source benchmarks/lease_common.sh  # wheels, PYTHONPATH, COMMIT, $OUT/device.txt

# A part that fails or runs out of time says so and leaves the next part its turn.
part() {
    local name=$1 secs=$2 rc=0
    timeout "$secs" python3 benchmarks/cuda_path_checks.py --run .gpu/run --parts "$name" \
        --json "$OUT/checks_$name.json" --commit "$COMMIT" >> "$OUT/checks.log" 2>&1 || rc=$?
    echo "$name rc=$rc"
}
part forward_clock 80
part probe_cost 210
part rope_phase 170
grep -E "^(forward_clock|probe_cost|rope_phase):" "$OUT/checks.log" | cut -c1-400 || true
