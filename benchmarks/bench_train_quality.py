"""Quality per compute: after equal CPU time on the same data, held-out bits-per-byte of the default
recipe (RoPE, RMSNorm, SwiGLU, document masking, bf16 autocast where native, the demo's length
curriculum and annealing) against a GPT-2-style baseline (learned positions, LayerNorm, GELU, no
document masking, fp32), everything else equal: model size knobs, optimizer, LR schedule shape,
data, seed.

Equal time: each config first trains a short probe run (all its curriculum phases included) whose
step times, per phase weighted by the phase's share of the run, set its max_steps = seconds /
step time, so both get
the same training seconds and each one's LR schedule spans its whole run. The real train
seconds (sum of the step times) are reported next to the budget. Both final checkpoints are
scored by the eval stage's Evaluator in fp32 on the same held-out documents; bpb per bucket,
byte-weighted overall, and the ratio default / baseline (the issue asks for <= 0.9).

    .venv/bin/python benchmarks/bench_train_quality.py --run runs/demo --seconds 900 --threads 2
--run: a run directory with tokens/ (e.g. after `make demo`); when tokens/ is missing, the
curate, tokenizer and tokenize stages of its config (default: the packaged demo config) are run
there first. `--set` applies an override to both configs (smoke runs: smaller model).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from tokenmill.config import RunConfig, load_config
from tokenmill.runs import RunDir, read_events

BASELINE = ["model.position=learned", "model.norm=layernorm", "model.ffn=gelu", "mixture.doc_masking=false",
            "train.dtype=float32"]
QUIET = ["train.eval_every=0", "train.log_every=0", "train.ckpt_every=0"]


def ensure_tokens(run_dir: Path, config: Path | None) -> Path:
    """`run_dir` with a token store: build curate -> tokenize there when it has none."""
    if (run_dir / "tokens" / "_meta.json").exists():
        return run_dir
    from tokenmill.cli import demo_config_path
    from tokenmill.pipeline import run_stage

    cfg = load_config(config or (run_dir / "config.yaml" if (run_dir / "config.yaml").exists() else demo_config_path()))
    run = RunDir.create(cfg, run_dir)
    for stage in ("curate", "tokenizer", "tokenize"):
        run_stage(run, stage)
    return run_dir


def train(src: Path, overrides: list[str], steps: int, threads: int, work: Path, name: str) -> dict[str, Any]:
    """Train `steps` steps of the config in a fresh run directory under `work` (sharing src's tokens)."""
    from tokenmill.train.trainer import run_train

    cfg: RunConfig = load_config(src / "config.yaml", [*overrides, *QUIET, f"root={work}", f"name={name}",
                                                       f"train.max_steps={steps}", f"train.threads={threads}"])
    if cfg.train.warmup_steps * 5 > steps:  # a short run keeps the same warmup share for both configs
        cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"warmup_steps": max(1, steps // 10)})})
    run = RunDir.create(cfg)
    shutil.copytree(src / "tokens", run.path / "tokens")
    run_train(run, resume=False, progress=False)
    events = [e for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step"]
    return {"run": run, "seconds": [e["seconds"] for e in events], "steps": steps,
            "phases": [e.get("phase") for e in events],
            "tokens": steps * cfg.train.micro_batch * cfg.train.seq_len * cfg.train.grad_accum}


def expected_step_seconds(probe: dict[str, Any]) -> float:
    """Mean step time of a full run: each curriculum phase's mean probe step time (first two steps
    left out: allocation, thread-pool start) weighted by the phase's share of the steps."""
    cfg = probe["run"].config
    fractions = {p.name: p.fraction for p in cfg.mixture.phases} or {None: 1.0}
    by_phase: dict[Any, list[float]] = {}
    for i, (sec, phase) in enumerate(zip(probe["seconds"], probe["phases"])):
        if i >= 2 or phase not in {ph for ph in probe["phases"][2:]}:
            by_phase.setdefault(phase, []).append(sec)
    known = {p: f for p, f in fractions.items() if p in by_phase} or {next(iter(by_phase)): 1.0}
    return sum(f * statistics.fmean(by_phase[p]) for p, f in known.items()) / sum(known.values())


def evaluate(run: RunDir, threads: int, max_docs: int | None) -> dict[str, dict[str, float]]:
    from tokenmill.eval.evaluate import Evaluator
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.restore import load_model

    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model, _ = load_model(run.path / "checkpoints", "cpu")
        cfg = run.config
        ev = Evaluator(TokenStore(run.path / "tokens"), cfg.train.seq_len,
                       max_docs if max_docs is not None else cfg.eval.max_docs, cfg.eval.batch_size)
        return ev.score(model, torch.device("cpu"), "float32")
    finally:
        torch.set_num_threads(prev)


def overall_bpb(scores: dict[str, dict[str, float]]) -> float:
    return sum(s["bpb"] * s["bytes"] for s in scores.values()) / sum(s["bytes"] for s in scores.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--config", type=Path, default=None, help="Config to build tokens/ with when --run has none.")
    ap.add_argument("--seconds", type=float, default=900.0, help="Training seconds per config.")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--probe-steps", type=int, default=10, help="Steps of each probe run (each curriculum phase needs one).")
    ap.add_argument("--eval-docs", type=int, default=None, help="Held-out documents per bucket (default: eval.max_docs).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Override for both configs.")
    args = ap.parse_args()
    src = ensure_tokens(args.run, args.config)
    configs = {"default recipe": list(args.overrides), "GPT-2-style baseline": [*args.overrides, *BASELINE]}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        step_s = {}
        for i, (name, ov) in enumerate(configs.items()):  # probes back to back, same machine state
            probe = train(src, ov, args.probe_steps, args.threads, work, f"probe{i}")
            step_s[name] = expected_step_seconds(probe)
            print(f"{name}: {step_s[name]:.4f} s/step (probe of {args.probe_steps} steps)", flush=True)
        for i, (name, ov) in enumerate(configs.items()):
            steps = max(args.probe_steps, int(args.seconds / step_s[name]))
            res = train(src, ov, steps, args.threads, work, f"full{i}")
            scores = evaluate(res["run"], args.threads, args.eval_docs)
            out[name] = {"steps": steps, "tokens": res["tokens"], "train_seconds": sum(res["seconds"]),
                         "probe_s_per_step": step_s[name], "bpb": {b: s["bpb"] for b, s in scores.items()},
                         "overall_bpb": overall_bpb(scores)}
            print(f"{name}: {steps} steps, {res['tokens']:,} tokens, {sum(res['seconds']):.1f} s of training, "
                  f"overall bpb {out[name]['overall_bpb']:.4f}", flush=True)
    a, b = out["default recipe"], out["GPT-2-style baseline"]
    print(f"\nEqual CPU time: budget {args.seconds:.0f} s per config, {args.threads} threads")
    print("| bucket | default recipe bpb | GPT-2-style bpb | ratio (target <= 0.9) |")
    print("|---|---|---|---|")
    for bucket in a["bpb"]:
        print(f"| {bucket} | {a['bpb'][bucket]:.4f} | {b['bpb'][bucket]:.4f} | {a['bpb'][bucket] / b['bpb'][bucket]:.3f} |")
    print(f"| **all (byte-weighted)** | **{a['overall_bpb']:.4f}** | **{b['overall_bpb']:.4f}** | "
          f"**{a['overall_bpb'] / b['overall_bpb']:.3f}** |")
    print(f"| steps / tokens / train s | {a['steps']} / {a['tokens']:,} / {a['train_seconds']:.0f} | "
          f"{b['steps']} / {b['tokens']:,} / {b['train_seconds']:.0f} | |")
    print(json.dumps({"torch": torch.__version__, "python": platform.python_version(),
                      "cores": len(os.sched_getaffinity(0)), "threads": args.threads, "seconds": args.seconds,
                      "overrides": args.overrides, "baseline_overrides": BASELINE, "results": out,
                      "ratio_overall": a["overall_bpb"] / b["overall_bpb"]}, indent=1))


if __name__ == "__main__":
    main()
