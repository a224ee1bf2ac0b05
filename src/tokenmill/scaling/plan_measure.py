"""`tokenmill plan --config` on a CPU: the step time measured, not assumed.

A CPU's MFU is not a constant one can carry over from GPUs: on a 2-core machine a small model
reaches a few percent of the matmul peak (its time goes to attention, norms, the optimizer and
the loop around them), and a busy core halves it. So on a CPU the plan times the run itself: the
trainer (train/trainer.py `run_train`, the same loop `tokenmill train` runs) trains the config's
model a few steps in a temporary directory, on a synthetic token store with the config's
vocabulary and batch geometry (seq_len, micro-batch, grad_accum, precision, compile setting,
threads), once per distinct sequence length of the curriculum: WARMUP_STEPS + TIMED_STEPS
steps, fewer where they add up to more than BUDGET_S (a model too large for the CPU is timed in
a minute, not in ten). The warm-up steps are dropped (kernel selection, allocator, compilation:
counted once as start-up), the median of the rest is the step time. MFU is reported against the peak `tokenmill calibrate` stored for this CPU,
dtype and thread count (measured briefly here when there is none), but the prediction does not
go through it: time = Σ phase steps × its measured step time + the start-up + evaluations and
checkpoints at the config's eval_every / ckpt_every, each timed once in the same short run (the
in-training evaluation on the run's own held-out tokens when `tokenize` has written them, else
the held-out loss on synthetic documents, which leaves out tasks, probes and samples: said so).

Step time depends on the token values only through the document mask, so random tokens in
documents of realistic length time the same step as the real data.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

WARMUP_STEPS = 2  # dropped: the first steps pay for kernel selection, allocations and compilation
TIMED_STEPS = 5  # their median is the step time
BUDGET_S = 60.0  # summed step seconds of one eager timing run: a large model on a CPU times fewer steps
TIMING_BUCKET = "timing"


@dataclass
class PhaseTiming:
    """One sequence length's measured steps: `steps` of the real run take `median_s` each."""

    seq_len: int
    rows: int
    steps: int
    seconds: list[float]  # every measured step, warm-up first
    warmup: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds[self.warmup :])

    @property
    def startup_s(self) -> float:
        """What the warm-up steps took beyond steady steps: paid once by the real run."""
        return max(0.0, sum(self.seconds[: self.warmup]) - self.warmup * self.median_s)


@dataclass
class CpuMeasurement:
    """What `plan` measured on this CPU and the training time it predicts from it."""

    threads: int
    dtype: str
    compiled: bool
    compile_reason: str
    peak_flops: float
    peak_origin: str
    flops_per_step: float
    tokens_per_step: int
    phases: list[PhaseTiming]
    setup_s: float  # building the model, optimizer and loader, before the first step
    evals: int
    eval_s: float
    eval_how: str
    checkpoints: int
    checkpoint_s: float
    measured_in_s: float  # what the measurement itself took
    notes: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)

    @property
    def step_s(self) -> float:
        """The steps' mean seconds over the run, each phase at its own measured median."""
        return sum(p.steps * p.median_s for p in self.phases) / max(self.steps, 1)

    @property
    def mfu(self) -> float:
        return self.flops_per_step / self.step_s / self.peak_flops

    @property
    def predicted_s(self) -> float:
        steps = sum(p.steps * p.median_s for p in self.phases)
        startup = self.setup_s + max(p.startup_s for p in self.phases)
        return steps + startup + self.evals * self.eval_s + self.checkpoints * self.checkpoint_s

    def lines(self) -> list[str]:
        """What was measured and how, in sentences for the plan's printout."""
        timed = len(self.phases[0].seconds) - self.phases[0].warmup
        per_phase = ", ".join(f"{p.median_s:.3g} s/step at seq_len {p.seq_len} ({p.steps:,} steps)" for p in self.phases)
        out = [
            f"measured {_n(timed, 'step')} of this config's model after {_n(self.phases[0].warmup, 'warm-up step')} "
            f"(median; {self.threads} threads, {self.dtype}, {'compiled' if self.compiled else 'eager'}): {per_phase}",
            f"MFU {self.mfu:.1%} of {self.peak_origin}",
            f"start-up {self.setup_s + max(p.startup_s for p in self.phases):.1f} s (model, optimizer, data, first steps)",
            f"{self.evals} evaluation(s) × {self.eval_s:.1f} s ({self.eval_how}); "
            f"{self.checkpoints} checkpoint(s) × {self.checkpoint_s:.2f} s",
            f"predicted training time {_duration(self.predicted_s)} (the measurement took {self.measured_in_s:.0f} s)",
        ]
        return out + self.notes

    def as_dict(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "dtype": self.dtype,
            "compiled": self.compiled,
            "compile_reason": self.compile_reason,
            "peak_flops": self.peak_flops,
            "peak_origin": self.peak_origin,
            "mfu": self.mfu,
            "step_seconds": self.step_s,
            "phases": [
                {"seq_len": p.seq_len, "rows": p.rows, "steps": p.steps, "median_s": p.median_s, "seconds": p.seconds}
                for p in self.phases
            ],
            "setup_seconds": self.setup_s,
            "evals": self.evals,
            "eval_seconds": self.eval_s,
            "eval_how": self.eval_how,
            "checkpoints": self.checkpoints,
            "checkpoint_seconds": self.checkpoint_s,
            "predicted_seconds": self.predicted_s,
            "measured_in_seconds": self.measured_in_s,
            "notes": self.notes,
        }


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def cpu_peak(dtype: torch.dtype, threads: int) -> tuple[float, str, list[str]]:
    """(peak FLOP/s, where it came from in words, notes): the `tokenmill calibrate` entry for this
    CPU, dtype and thread count, else a brief calibration now (not stored: a steadier one is
    `tokenmill calibrate`'s)."""
    from tokenmill.scaling.calibrate import calibrate, dtype_name, find_calibration

    entry = find_calibration("cpu", dtype, threads)
    if entry is not None:
        return (
            float(entry["peak_flops"]),
            f"the calibrated {entry['peak_flops'] / 1e9:,.0f} GFLOP/s {dtype_name(dtype)} peak "
            f"(`tokenmill calibrate`, {str(entry.get('date', '?'))[:10]})",
            [],
        )
    measured = calibrate("cpu", threads=threads, seconds=1.0, dtypes=[dtype])[0]["peak_flops"]
    note = (
        f"no `tokenmill calibrate` entry for this CPU at {threads} threads in {dtype_name(dtype)}: its peak was "
        f"measured just now for 1 s; `tokenmill calibrate --threads {threads}` stores a steadier one"
    )
    return float(measured), f"a {measured / 1e9:,.0f} GFLOP/s {dtype_name(dtype)} peak measured now", [note]


def write_synthetic_store(root: Path, vocab_size: int, seq_len: int, n_tokens: int, val_docs: int) -> None:
    """A token store of one bucket, TIMING_BUCKET, of random documents (each ending with EOS id
    0): `n_tokens` of train tokens in documents of seq_len/4 .. 2·seq_len tokens, and `val_docs`
    held-out documents of seq_len tokens (the evaluation's estimate when the run has none yet)."""
    from tokenmill.tokens.store import ShardWriter, token_dtype

    rng = np.random.default_rng(0)
    dtype = token_dtype(vocab_size)
    meta: dict[str, Any] = {
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "eos_id": 0,
        "bos_id": 1,
        "pad_id": 2,
        "buckets": {TIMING_BUCKET: {}},
        "shards": [],
    }
    for split, tokens in (("train", n_tokens), ("val", val_docs * seq_len)):
        rel = f"{TIMING_BUCKET}/{split}-00000"
        writer = ShardWriter(root / rel, dtype)
        written = 0
        while written < tokens:
            n = seq_len if split == "val" else int(rng.integers(max(seq_len // 4, 2), 2 * seq_len + 1))
            doc = rng.integers(3, vocab_size, size=n - 1).tolist() + [0]
            writer.add(f"{split}-{written}", doc, n_bytes=4 * n)
            written += n
        meta["buckets"][TIMING_BUCKET][split] = writer.close()
        meta["shards"].append(rel)
    (root / "_meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")


def phase_geometry(run_cfg: Any, tc: Any) -> list[tuple[int, int, int]]:
    """(seq_len, rows per micro-batch, optimizer steps) for each distinct sequence length of the
    curriculum (mixture.phases; rows keep the tokens per step constant), in order of first use."""
    out: dict[int, list[int]] = {}
    cum, prev_end = 0.0, 0
    phases = list(run_cfg.mixture.phases)
    for k, pc in enumerate(phases or [None]):
        if pc is None:
            end, seq = tc.max_steps, tc.seq_len
        else:
            cum += pc.fraction
            end = tc.max_steps if k == len(phases) - 1 else math.floor(cum * tc.max_steps + 0.5 + 1e-9)
            seq = pc.seq_len or tc.seq_len
        rows = max(1, tc.micro_batch * tc.seq_len // seq)
        out.setdefault(seq, [rows, 0])[1] += max(0, end - prev_end)
        prev_end = max(prev_end, end)
    return [(seq, rows, steps) for seq, (rows, steps) in out.items() if steps > 0]


def _timing_config(run_cfg: Any, run_dir: Path, geometry: tuple[int, int], steps: int, compiled: bool) -> Any:
    """The run config of one timing run in `run_dir`: `run_cfg`'s model and step (its train
    section resolved, threads set) at `geometry` (seq_len, rows per micro-batch) for `steps`
    steps, on one bucket, evaluated and checkpointed once, at the end."""
    seq_len, rows = geometry
    train = run_cfg.train.model_copy(
        update={
            "seq_len": seq_len,
            "micro_batch": rows,
            "max_steps": steps,
            "max_tokens": None,
            # eager: stop near BUDGET_S of steps (a slow model times fewer); compiled: the
            # first step holds the compilation, so the steps are not cut short by it
            "max_seconds": None if compiled else BUDGET_S,
            "global_batch_tokens": None,
            "warmup_steps": 1,
            "eval_every": 0,
            "ckpt_every": 0,
            "log_every": 0,
            "device": "cpu",
            "compile": compiled,
            "init_from": None,
        }
    )
    mixture = run_cfg.mixture.model_copy(update={"weights": None, "phases": [], "replay": None})
    return run_cfg.model_copy(update={"name": run_dir.name, "root": str(run_dir.parent), "train": train, "mixture": mixture})


def _timing_run(
    cfg: Any, vocab_size: int, eval_docs: int, on_eval: Callable[[int, torch.nn.Module], None]
) -> tuple[list[float], float, float]:
    """Train `cfg`'s run on a synthetic store written for it (its held-out split: `eval_docs`
    documents); (every step's seconds, seconds before the first step began, the final
    checkpoint's seconds). The trainer's console lines are kept from the plan's output."""
    from tokenmill.runs import RunDir
    from tokenmill.train.trainer import run_train

    tc = cfg.train
    run = RunDir.create(cfg, Path(cfg.root) / cfg.name)
    step_tokens = tc.micro_batch * tc.seq_len * tc.grad_accum
    write_synthetic_store(run.sub("tokens"), vocab_size, tc.seq_len, step_tokens * (tc.max_steps + 2), eval_docs)
    t0 = time.time()
    with contextlib.redirect_stderr(io.StringIO()):
        run_train(run, on_eval=on_eval, progress=False)
    events = run.events.read()
    steps = [e for e in events if e.get("kind") == "train_step"]
    seconds = [float(e["seconds"]) for e in steps]
    setup = max(0.0, float(steps[0]["t"]) - seconds[0] - t0) if steps else 0.0
    ckpt = [float(e["seconds"]) for e in events if e.get("kind") == "checkpoint" and "seconds" in e]
    return seconds, setup, (ckpt[-1] if ckpt else 0.0)


def _buckets(run_cfg: Any) -> list[str]:
    """The buckets the run will hold out documents of: its sources', else its mixture's."""
    names = [s.bucket for s in run_cfg.curate.sources] or list(run_cfg.mixture.weights or {})
    return list(dict.fromkeys(names)) or [TIMING_BUCKET]


class _EvalClock:
    """The in-training evaluation, timed once: the run's own (held-out buckets, probes, tasks,
    samples) when `tokenize` has written its store, else the held-out loss of one synthetic
    bucket, times the run's buckets."""

    def __init__(self, run_cfg: Any, tmp: Path):
        self.run_cfg = run_cfg
        self.seconds, self.setup = 0.0, 0.0
        self.store_root: Path | None = None
        self.real = (run_cfg.run_dir / "tokens" / "_meta.json").is_file()
        self.buckets = _buckets(run_cfg)
        self.hook: Callable[[int, torch.nn.Module], None] | None = None
        if self.real:
            self.hook = self._real_hook(run_cfg, tmp)
            self.how = "timed once on this run's held-out tokens, as `tokenmill train` evaluates"
        else:
            self.how = (
                f"held-out loss of {run_cfg.train.eval_docs} synthetic documents per bucket × {len(self.buckets)} "
                "bucket(s), timed once; tasks, probes and samples not counted until `tokenize` has run"
            )

    def _real_hook(self, run_cfg: Any, tmp: Path) -> Callable[[int, torch.nn.Module], None]:
        """tokenmill's in-training evaluator on a scratch run whose tokens and tokenizer are this run's."""
        from tokenmill.eval.evaluate import in_training_evaluator
        from tokenmill.runs import RunDir

        cfg = run_cfg.model_copy(update={"name": "plan-eval", "root": str(tmp)})
        run = RunDir.create(cfg, tmp / "plan-eval")
        for part in ("tokens", "tokenizer"):
            if (run_cfg.run_dir / part).exists():
                run.sub(part).symlink_to((run_cfg.run_dir / part).resolve(), target_is_directory=True)
        t0 = time.perf_counter()
        hook = in_training_evaluator(run)
        self.setup = time.perf_counter() - t0
        return hook

    def __call__(self, step: int, model: torch.nn.Module) -> None:
        t0 = time.perf_counter()
        if self.hook is not None:
            self.hook(step, model)
            self.seconds = time.perf_counter() - t0
            return
        self.seconds = len(self.buckets) * self._synthetic(model)

    def _synthetic(self, model: torch.nn.Module) -> float:
        from tokenmill.eval.evaluate import Evaluator
        from tokenmill.tokens.store import TokenStore

        assert self.store_root is not None, "set to the timing run's store before it trains"
        cfg = self.run_cfg
        ev = Evaluator(TokenStore(self.store_root), cfg.train.seq_len, cfg.train.eval_docs, cfg.eval.batch_size)
        t0 = time.perf_counter()
        ev.score(model, torch.device("cpu"), cfg.train.dtype)
        return time.perf_counter() - t0


def _count(every: int, steps: int) -> int:
    """How often a periodic action (every `every` steps, and after the last) runs in `steps` steps."""
    return steps // every + (1 if steps % every else 0) if every > 0 else 1


def measure_cpu_plan(run_cfg: Any, warmup: int = WARMUP_STEPS, timed: int = TIMED_STEPS) -> CpuMeasurement:
    """Time `run_cfg`'s training on this CPU (see the module doc): one short run of the real
    trainer per distinct sequence length, the first also timing one evaluation and checkpoint."""
    from tokenmill.train.budget import resolve_budget
    from tokenmill.train.compilation import compile_decision
    from tokenmill.train.device import resolve_dtype
    from tokenmill.scaling.flops import flops_per_token

    started = time.perf_counter()
    tc = resolve_budget(run_cfg.train, world_size=1)
    threads = tc.threads or torch.get_num_threads()
    dtype = resolve_dtype(torch.device("cpu"), tc.dtype)
    peak, origin, notes = cpu_peak(dtype, threads)
    compiled, why = compile_decision(tc, tc.max_steps)
    vocab = run_cfg.model.vocab_size or run_cfg.tokenizer.vocab_size
    mcfg = run_cfg.model.model_copy(update={"vocab_size": vocab})
    tokens_per_step = tc.micro_batch * tc.seq_len * tc.grad_accum
    phases: list[PhaseTiming] = []
    setup = ckpt = 0.0
    with tempfile.TemporaryDirectory(prefix="tokenmill-plan-") as tmp:
        clock = _EvalClock(run_cfg, Path(tmp))
        for k, (seq, rows, steps) in enumerate(phase_geometry(run_cfg, tc)):
            resolved = run_cfg.model_copy(update={"train": tc.model_copy(update={"threads": threads})})
            cfg = _timing_config(resolved, Path(tmp) / f"plan-timing-{k}", (seq, rows), warmup + timed, compiled)
            clock.store_root = Path(tmp) / cfg.name / "tokens"
            seconds, first_setup, first_ckpt = _timing_run(cfg, vocab, tc.eval_docs, clock if k == 0 else _skip)
            if k == 0:
                setup, ckpt = first_setup + clock.setup, first_ckpt
            phases.append(PhaseTiming(seq, rows, steps, seconds, min(warmup, len(seconds) - 1)))
    flops = sum(flops_per_token(mcfg, p.seq_len) * p.steps for p in phases) / max(tc.max_steps, 1) * tokens_per_step
    notes += _load_note(threads)
    return CpuMeasurement(
        threads=threads,
        dtype=str(dtype).replace("torch.", ""),
        compiled=compiled,
        compile_reason=why,
        peak_flops=peak,
        peak_origin=origin,
        flops_per_step=flops,
        tokens_per_step=tokens_per_step,
        phases=phases,
        setup_s=setup,
        evals=_count(tc.eval_every, tc.max_steps),
        eval_s=clock.seconds,
        eval_how=clock.how,
        checkpoints=_count(tc.ckpt_every, tc.max_steps),
        checkpoint_s=ckpt,
        measured_in_s=time.perf_counter() - started,
        notes=notes,
    )


def _load_note(threads: int) -> list[str]:
    """A sentence when other processes kept the cores busy while the steps were timed: the
    prediction holds for a run under the same load (on a shared 2-core machine, a plan timed while
    other jobs were heavier than during its run predicted 2.3× the run's time)."""
    cores, load = os.cpu_count() or 1, os.getloadavg()[0]
    if load <= max(cores, threads) + 0.5:
        return []
    return [
        f"the load average was {load:.1f} on {cores} cores while the steps were timed: other jobs shared the CPU, "
        "and the prediction holds for a run under the same load"
    ]


def _skip(step: int, model: torch.nn.Module) -> None:
    """The later timing runs' evaluation: timed once already."""
