"""Whether a run compiles its model with torch.compile, and where compiled graphs are cached.

torch.compile (Inductor) fuses the step's elementwise work (norms, RoPE, SwiGLU, the residual adds,
the attention softmax) into a few kernels: on the demo model on 2 CPU cores in bf16 it takes the
step from 0.54 to 0.40 s (1.37x, BENCHMARKS.md). It costs a compilation before the first step,
~40-60 s cold on 2 cores and a fraction of that when Inductor's FX-graph and AOTAutograd caches
already hold the graphs (the same model shape compiled before on this machine). `train.compile:
auto` compiles when at least `train.compile_min_steps` steps remain, the run length past which the
saved step time repays a cold compilation with margin (break-even ~400 steps on the demo model);
short runs (tests, smoke runs, the demo) stay eager.

The caches live in TORCHINDUCTOR_CACHE_DIR when the user set it, else in
~/.cache/tokenmill/inductor rather than torch's default under /tmp, so they survive a reboot.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from tokenmill.config import TrainConfig

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def compile_decision(tc: TrainConfig, remaining_steps: int) -> tuple[bool, str]:
    """(compile?, why) for a run with `remaining_steps` optimizer steps still to take."""
    if tc.compile is True:
        return True, "train.compile is true"
    if tc.compile is False:
        return False, "train.compile is false"
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
    return torch.compile(model)
