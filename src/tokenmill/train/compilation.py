"""Whether a run compiles its model with torch.compile, and where compiled graphs are cached.

torch.compile (Inductor) fuses the step's elementwise work (norms, RoPE, SwiGLU, the residual adds,
the attention softmax) into fewer kernels. On the demo model on 2 CPU cores it made steps 1.04-1.37x
faster in bf16 and 1.06-1.11x in fp32 (benchmarks/bench_compile.py and bench_train_speed.py,
BENCHMARKS.md; the spread is this machine's run-to-run noise), for a compilation before the first
step of 30-40 s with an empty cache and 4-9 s when Inductor's FX-graph and AOTAutograd caches
already hold the graphs (the same model shape compiled before on this machine). A cold compile
breaks even after ~600-1000 demo steps, a warm one after ~50-450 (larger models should save more
per step; not measured here). So `train.compile: auto` compiles when at least
`train.compile_min_steps` (1000) steps remain; short runs (tests, smoke runs, the demo) stay eager.

The caches live in TORCHINDUCTOR_CACHE_DIR when the user set it, else in
~/.cache/tokenmill/inductor rather than torch's default under /tmp, so they survive a reboot.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import torch

from tokenmill.train.config import TrainConfig

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def compile_decision(tc: TrainConfig, remaining_steps: int, model_parallel: bool = False) -> tuple[bool, str]:
    """(compile?, why) for a run with `remaining_steps` optimizer steps still to take.

    Tensor- and pipeline-parallel runs stay eager under 'auto': compiling DTensor plans and
    pipeline stages is not measured here (an explicit `true` still compiles)."""
    if model_parallel and tc.compile == "auto":
        return False, "auto: tensor/pipeline-parallel runs stay eager"
    if tc.compile is True:
        return True, "train.compile is true"
    if tc.compile is False:
        return False, "train.compile is false"
    if tc.fp8:  # eager, each FP8 cast is its own kernels: torchao fuses them only under torch.compile
        return True, "auto: train.fp8 needs torch.compile to fuse its casts"
    if remaining_steps >= tc.compile_min_steps:
        return True, f"auto: {remaining_steps} steps to run >= train.compile_min_steps ({tc.compile_min_steps})"
    return False, f"auto: {remaining_steps} steps to run < train.compile_min_steps ({tc.compile_min_steps})"


def compile_cache_dir() -> Path:
    """The directory Inductor caches compiled graphs in (set for this process if the user did not)."""
    if not os.environ.get(CACHE_ENV):
        os.environ[CACHE_ENV] = str(Path.home() / ".cache" / "tokenmill" / "inductor")
    return Path(os.environ[CACHE_ENV])


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """torch.compile(model), its graphs cached in `compile_cache_dir()` (Inductor's FX-graph and
    AOTAutograd caches are on by default in torch 2.13)."""
    compile_cache_dir()
    # compiling a Module returns an OptimizedModule (a Module); the stub types only the callable case
    return cast(torch.nn.Module, torch.compile(model))
