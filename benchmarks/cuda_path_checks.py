"""Issue 43: the CUDA paths of the trainer that had only run on a CPU, each checked on a GPU.

Three parts, each in its own try (a part that fails records its error; the JSON is rewritten after
every part, so a part cut short by a timeout keeps the others' results):

forward_clock  per-rank forward timing by CUDA events (train/trainer.py `_ForwardClock`, the
               seconds the slow-rank detector gathers). (1) Two short real trainings (`run_train`,
               rank_stats_every 5, train.host_reads deferred and immediate: the clock handed over
               unread or read in the step): every train_step event's forward_s is positive, finite
               and below the step's seconds. (2) The same clock around --repeats forwards, each also
               timed by the wall clock between two `torch.cuda.synchronize()`: the medians agree
               within FORWARD_REL of the wall time plus FORWARD_ABS_S (events see the GPU's span
               only; the wall clock adds a launch and a synchronize, tens of microseconds).
probe_cost     the activation probe (train/activation_stats.py) on a GPU step at the GPT-2-small
               shape (the run's config: d 768 x 12 layers, micro-batch 16 x 1024, compiled, bf16):
               steps with and without one probe call, interleaved ABBA (drift cancels), each
               timed between synchronizes; medians, the cost of a call and its share per step at
               health.activation_stats_every. Then as the real trainer pays it: two short runs
               (probe every step, never), wall seconds per step from the events' times.
rope_phase     RoPE tables rebuilt at a phase boundary under torch.compile: the real trainer with
               two curriculum phases (seq_len doubled and rope_theta x4 at the second), compiled
               and eager from the same init and batches: Dynamo's graph count before and after
               the boundary (the recompiles it caused: at most ROPE_MAX_RECOMPILES) and within each
               phase (none: a graph per phase, not per step), the rope_changed events, and
               every step's loss compiled against eager within ROPE_LOSS_REL (bf16 autocast:
               Inductor reorders sums; fp32 on a CPU: 1e-4).

    python benchmarks/cuda_path_checks.py --run .gpu/run --json $OUT/cuda_checks.json --commit <hash>

--smoke runs every part on the CPU with tiny shapes (the tests' synthetic token store when --run is
not given), fp32, compiled with Dynamo's eager backend instead of Inductor (seconds, not a
minute of C++ builds; the guards and recompiles are Dynamo's either way): the plumbing and the
checks' logic, not GPU figures.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
FORWARD_REL, FORWARD_ABS_S = 0.05, 3e-4  # event vs synchronised wall time of one forward
ROPE_LOSS_REL = {"bfloat16": 2e-2, "float32": 1e-4}  # compiled vs eager, per step
ROPE_MAX_RECOMPILES = 3  # the model's graph at the new length; a mask builder's may follow it
QUIET = ["train.log_every=0", "train.ckpt_every=0", "train.eval_every=0", "eval.num_samples=0"]
SMOKE = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_hidden=64",
         "model.max_seq_len=32", "train.seq_len=32", "train.micro_batch=4", "train.dtype=float32",
         "train.device=cpu", "train.threads=1"]


def cuda_sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def load(args: argparse.Namespace, extra: list[str]) -> Any:
    """The run's config with the overrides of this check (tiny shapes in --smoke)."""
    from tokenmill.config import load_config

    sets = [*QUIET, *(SMOKE if args.smoke else ["train.device=cuda", "train.dtype=bfloat16"]), *args.overrides, *extra]
    return load_config(args.run / "config.yaml", sets)


def train(args: argparse.Namespace, sets: list[str], on_eval: Callable[[int, Any], None] | None = None) -> list[dict]:
    """A real training run (run_train) in a scratch directory on the run's tokens; its events."""
    import shutil

    from tokenmill.runs import RunDir, read_events
    from tokenmill.train.trainer import run_train

    with tempfile.TemporaryDirectory(prefix="tm-cudacheck-") as tmp:
        rd = RunDir.create(load(args, [f"root={tmp}", "name=c", *sets]))
        shutil.copytree(args.run / "tokens", rd.path / "tokens")
        run_train(rd, resume=False, on_eval=on_eval, progress=False)
        return list(read_events(rd.path / "events.jsonl"))


def model_and_loader(args: argparse.Namespace, sets: list[str]) -> tuple[Any, Any, Any, torch.device, torch.dtype]:
    """(config, model, loader, device, dtype) as the trainer builds them, outside its loop."""
    from tokenmill.mixture.loader import Loader
    from tokenmill.model.transformer import Transformer
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.device import resolve_dtype
    from tokenmill.train.trainer import resolve_model_config

    cfg = load(args, ["mixture.phases=[]", *sets])
    tc, store = cfg.train, TokenStore(args.run / "tokens")
    device = torch.device(tc.device)
    model = Transformer(resolve_model_config(cfg.model, store, tc.seq_len), generator=torch.Generator().manual_seed(0))
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, cfg.train_seed)
    return cfg, model.to(device).train(), loader, device, resolve_dtype(device, tc.dtype)


def trainer_forward(args: argparse.Namespace, size: list[str], mode: str) -> dict[str, Any]:
    """A short real training with train.host_reads `mode`: the forward seconds of every step (CUDA
    events, handed over unread when deferred, read in the step when immediate) must be positive,
    finite and below the step's seconds (CUDA events when deferred, a synchronised wall clock when
    immediate: their medians side by side are events against wall time for whole steps, though the
    two modes' host work differs, so the ratio is recorded, not judged)."""
    steps = 4 if args.smoke else 15
    events = train(args, [*size, f"train.max_steps={steps}", "train.compile=false", "train.rank_stats_every=5",
                          f"train.host_reads={mode}"])
    rows = [e for e in events if e["kind"] == "train_step"]
    fwd = [e.get("forward_s") for e in rows]
    ok = bool(rows) and all(f is not None and math.isfinite(f) and 0 < f < e["seconds"] for f, e in zip(fwd, rows))
    return {"steps": len(rows), "forward_s": fwd, "step_s": [e["seconds"] for e in rows], "forward_within_step": ok,
            "step_median_s": statistics.median(e["seconds"] for e in rows[2:] or rows)}


def forward_clock(args: argparse.Namespace) -> dict[str, Any]:
    """Part forward_clock (module docstring)."""
    from tokenmill.model.objectives import token_nll_batch
    from tokenmill.train.device import autocast
    from tokenmill.train.trainer import _ForwardClock

    size = [] if args.smoke else ["model.d_model=512", "model.n_layers=8", "model.n_heads=8", "train.micro_batch=8"]
    runs = {mode: trainer_forward(args, size, mode) for mode in ("deferred", "immediate")}
    trainer_ok = all(r["forward_within_step"] for r in runs.values())
    _, model, loader, device, dtype = model_and_loader(args, size)
    clocked, wall = [], []
    with torch.no_grad():
        for i in range(args.repeats + 3):
            batch = loader.batch(1 + i % 4, 0).to(device)
            clock = _ForwardClock(device)
            cuda_sync()
            t0 = time.perf_counter()
            with autocast(device, dtype), clock:
                token_nll_batch(model, batch).sum()
            cuda_sync()
            if i >= 3:  # the first forwards load kernels and build handles
                wall.append(time.perf_counter() - t0)
                clocked.append(clock.seconds())
    med_c, med_w = statistics.median(clocked), statistics.median(wall)
    agree = abs(med_c - med_w) <= FORWARD_REL * med_w + FORWARD_ABS_S
    finite = all(math.isfinite(c) and c > 0 for c in clocked)
    return {"ok": trainer_ok and agree and finite, "trainer": runs, "trainer_forward_within_step": trainer_ok,
            "step_events_over_synchronised_wall": runs["deferred"]["step_median_s"] / runs["immediate"]["step_median_s"],
            "events_median_s": med_c, "wall_median_s": med_w, "events_over_wall": med_c / med_w,
            "tolerance": f"|events - wall| <= {FORWARD_REL} * wall + {FORWARD_ABS_S} s", "agree": agree,
            "all_positive_finite": finite, "repeats": len(clocked)}


def trainer_probe_cost(args: argparse.Namespace) -> dict[str, Any]:
    """The probe's cost as the real trainer pays it (default host reads: deferred on CUDA, where a
    step's event-timed seconds leave the probe out, but its host read stalls the queued next step):
    wall seconds per step between train_step events after the first `warm`, probe every step
    against never, two runs (the second compiles from the first's warm cache)."""
    steps, warm = (4, 2) if args.smoke else (40, 10)
    out: dict[str, Any] = {"steps": steps, "from_step": warm}
    for every in (1, 0):
        rows = [e for e in train(args, [f"train.max_steps={steps}", f"train.compile={str(not args.smoke).lower()}",
                                        f"train.health.activation_stats_every={every}"]) if e["kind"] == "train_step"]
        out[f"every_{every}_wall_s_per_step"] = (rows[-1]["t"] - rows[warm - 1]["t"]) / (len(rows) - warm)
        out[f"every_{every}_probed_steps"] = sum("act_rms" in e for e in rows)
    out["probe_call_s"] = out["every_1_wall_s_per_step"] - out["every_0_wall_s_per_step"]
    return out


def probe_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Part probe_cost (module docstring)."""
    from tokenmill.train.activation_stats import ActivationProbe
    from tokenmill.train.compilation import compile_model
    from tokenmill.train.device import autocast
    from tokenmill.train.optimizer import build_optimizer
    from tokenmill.train.trainer import compute_update

    cfg, model, loader, device, dtype = model_and_loader(args, ["train.max_steps=1000"])
    tc, hc = cfg.train, cfg.train.health
    stepper = model if args.smoke else compile_model(model)  # the trainer compiles the step, probes the plain model
    optimizer = build_optimizer(model, tc, device)
    probe = ActivationProbe(model, hc.activation_rows, hc.attn_logit_queries)
    step = 0

    def one(with_probe: bool) -> float:
        nonlocal step
        step += 1
        cuda_sync()
        t0 = time.perf_counter()
        compute_update(stepper, optimizer, loader, step, tc, device, dtype, None, {})
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if with_probe:  # as the trainer's _timing does, after the update
            with autocast(device, dtype):
                probe.measure(loader.rebuild(step, 0).to(device))
        cuda_sync()
        return time.perf_counter() - t0

    for _ in range(args.warmup):  # compilation, and the probe's first (eager) forward
        one(True)
    off: list[float] = []
    on: list[float] = []
    for r in range(args.repeats):
        for with_probe in ((False, True) if r % 2 == 0 else (True, False)):  # ABBA
            (on if with_probe else off).append(one(with_probe))
    m_off, m_on = statistics.median(off), statistics.median(on)
    every = hc.activation_stats_every
    return {"ok": m_off > 0 and m_on > 0, "shape": {"d_model": model.config.d_model, "n_layers": model.config.n_layers,
            "micro_batch": tc.micro_batch, "seq_len": tc.seq_len, "grad_accum": tc.grad_accum,
            "probe_rows": hc.activation_rows, "probe_queries": hc.attn_logit_queries},
            "compiled": not args.smoke, "dtype": str(dtype).replace("torch.", ""), "repeats": args.repeats,
            "step_off_median_s": m_off, "step_on_median_s": m_on, "probe_call_s": m_on - m_off,
            "probe_share_per_call": (m_on - m_off) / m_off, "activation_stats_every": every,
            "probe_share_amortized": (m_on - m_off) / m_off / every if every else 0.0,
            "step_off_s": off, "step_on_s": on, "trainer": trainer_probe_cost(args)}


def rope_phase(args: argparse.Namespace) -> dict[str, Any]:
    """Part rope_phase (module docstring)."""
    from torch._dynamo.utils import counters

    import tokenmill.train.trainer as trainer_mod

    half = 16 if args.smoke else 256
    steps = 8 if args.smoke else 24
    size = [] if args.smoke else ["model.d_model=512", "model.n_layers=4", "model.n_heads=8", "train.micro_batch=8"]
    phases = (f"mixture.phases=[{{name: short, fraction: 0.5, seq_len: {half}}}, "
              f"{{name: long, fraction: 0.5, seq_len: {2 * half}, rope: {{rope_theta: 40000.0}}}}]")
    sets = [*size, phases, f"model.max_seq_len={half}", f"train.seq_len={half}", f"train.max_steps={steps}",
            f"train.eval_every={steps // 4}", "train.eval_docs=1"]
    graphs: list[tuple[int, int]] = []

    def count(step: int, model: Any) -> None:  # twice in each phase, the second time at its last step
        graphs.append((step, int(counters["stats"]["unique_graphs"])))

    original = trainer_mod.compile_model
    if args.smoke:  # Dynamo's guards and recompiles without Inductor's C++ builds
        trainer_mod.compile_model = lambda m: torch.compile(m, backend="eager")  # type: ignore[assignment]
    try:
        torch._dynamo.reset()
        counters.clear()
        compiled = train(args, [*sets, "train.compile=true"], on_eval=count)
    finally:
        trainer_mod.compile_model = original
    eager = train(args, [*sets, "train.compile=false"])
    loss_c = {e["step"]: e["loss"] for e in compiled if e["kind"] == "train_step"}
    loss_e = {e["step"]: e["loss"] for e in eager if e["kind"] == "train_step"}
    rel = max(abs(loss_c[s] - loss_e[s]) / abs(loss_e[s]) for s in loss_e)
    dtype = "float32" if args.smoke else "bfloat16"
    changed = [(e["step"], e["max_seq_len"], e["rope_theta"]) for e in compiled if e["kind"] == "rope_changed"]
    before, after = graphs[1][1], graphs[-1][1]
    steady = graphs[0][1] == graphs[1][1] and graphs[2][1] == graphs[3][1]  # no recompile from step to step
    ok = (loss_c.keys() == loss_e.keys() and rel <= ROPE_LOSS_REL[dtype] and len(changed) == 1 and steady
          and after - before <= ROPE_MAX_RECOMPILES)
    return {"ok": ok, "steps": steps, "boundary_step": changed[0][0] if changed else None, "rope_changed": changed,
            "graphs_at_eval_steps": graphs, "graphs_before_boundary": before, "recompiles_at_boundary": after - before,
            "no_recompiles_within_phases": steady,
            "max_rel_loss_diff": rel, "tolerance": ROPE_LOSS_REL[dtype], "dtype": dtype,
            "backend": "eager (smoke: Dynamo only)" if args.smoke else "inductor",
            "losses_compiled": [loss_c[s] for s in sorted(loss_c)], "losses_eager": [loss_e[s] for s in sorted(loss_e)]}


PARTS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "forward_clock": forward_clock, "probe_cost": probe_cost, "rope_phase": rope_phase}


def environment(args: argparse.Namespace) -> dict[str, Any]:
    cuda = torch.cuda.is_available() and not args.smoke
    return {"commit": args.commit, "smoke": args.smoke, "torch": torch.__version__, "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
            "python": platform.python_version(), "parts": {}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="Directory with config.yaml and tokens/ (gpu_125m.yaml's store).")
    ap.add_argument("--parts", default=",".join(PARTS), help="Comma-separated parts to run, in order.")
    ap.add_argument("--repeats", type=int, default=None, help="Timed repeats (default 20 on CUDA, 3 in --smoke).")
    ap.add_argument("--warmup", type=int, default=None, help="Untimed probe_cost steps (default 5, 1 in --smoke).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (every part).")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--commit", default="unknown", help="The tokenmill commit that ran (recorded).")
    ap.add_argument("--smoke", action="store_true", help="Tiny shapes on the CPU: the plumbing, not a figure.")
    args = ap.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        ap.error("no CUDA device here (--smoke runs the plumbing on a CPU)")
    args.repeats = args.repeats or (3 if args.smoke else 20)
    args.warmup = args.warmup or (1 if args.smoke else 5)
    result = environment(args)
    with tempfile.TemporaryDirectory() as scratch:
        if args.run is None:
            if not args.smoke:
                ap.error("--run is required on CUDA")
            args.run = tiny_run(Path(scratch))
        for name in args.parts.split(","):
            t0 = time.perf_counter()
            try:
                result["parts"][name] = PARTS[name](args)
            except Exception as exc:  # one broken part must not lose the others' results
                result["parts"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500],
                                         "traceback": traceback.format_exc()[-3000:]}
            result["parts"][name]["wall_s"] = time.perf_counter() - t0
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1))
            print(f"{name}: ok={result['parts'][name]['ok']} ({result['parts'][name]['wall_s']:.1f} s) "
                  f"{summary(result['parts'][name])}", flush=True)
    return result


def summary(part: dict[str, Any]) -> str:
    """The one line a reader needs from a part (its JSON has the rest)."""
    if "error" in part:
        return part["error"]
    keys = ("events_over_wall", "probe_call_s", "probe_share_per_call", "probe_share_amortized",
            "recompiles_at_boundary", "max_rel_loss_diff")
    return " ".join(f"{k}={part[k]:.4g}" for k in keys if k in part)


def tiny_run(root: Path) -> Path:
    """A run directory for --smoke: the tests' synthetic token store and a config naming nothing else."""
    sys.path.insert(0, str(ROOT))
    from tests.conftest import write_tiny_store

    write_tiny_store(root / "tokens")
    (root / "config.yaml").write_text("name: smoke\nmodel: {d_model: 32, n_layers: 2, n_heads: 4, max_seq_len: 32}\n"
                                      "train: {seq_len: 32, micro_batch: 4, max_steps: 8, lr: 0.01, warmup_steps: 2}\n")
    return root


if __name__ == "__main__":
    main()
