"""Host–device synchronisations per training step on a CUDA GPU, per `train.host_reads` mode.

torch.cuda.set_sync_debug_mode("warn") makes every synchronising CUDA call warn; the real trainer
(`run_train`) runs N1 and then N2 steps in fresh run directories, and the warnings counted in
each give the per-step rate by difference, (count(N2) − count(N1)) / (N2 − N1), so the run's
setup, first steps and end (checkpoint, final evaluation) cancel out. The warnings' source lines
(file:line of the call that synchronised) are tallied, so what still syncs is named.

    python benchmarks/probe_host_syncs.py --run .gpu/run --json $OUT/host_syncs.json
`--smoke-cpu` runs the plumbing on a CPU (no synchronisation exists there: every count is 0).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from tokenmill.config import load_config  # noqa: E402
from tokenmill.runs import RunDir  # noqa: E402

QUIET = ["mixture.phases=[]", "train.eval_every=0", "train.ckpt_every=0", "train.log_every=0", "train.compile=false"]


def count_syncs(src: Path, steps: int, mode: str, overrides: list[str], cuda: bool) -> tuple[int, collections.Counter]:
    """Synchronising calls of a `steps`-step run, and where they came from."""
    from tokenmill.train.trainer import run_train

    root = Path(tempfile.mkdtemp(prefix="syncs-"))
    try:
        cfg = load_config(src / "config.yaml", [*QUIET, *overrides, f"root={root}", "name=s", f"train.max_steps={steps}",
                                                f"train.warmup_steps={max(1, steps // 10)}", f"train.host_reads={mode}"])
        run = RunDir.create(cfg)
        shutil.copytree(src / "tokens", run.path / "tokens")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                run_train(run, resume=False, progress=False)
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
        return len(syncs), collections.Counter(f"{Path(w.filename).name}:{w.lineno}" for w in syncs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="Run directory with tokens/ and config.yaml.")
    ap.add_argument("--steps", type=int, nargs=2, default=[10, 30], metavar=("N1", "N2"))
    ap.add_argument("--modes", nargs="+", default=["immediate", "deferred"])
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override.")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke-cpu", action="store_true")
    args = ap.parse_args()
    cuda = torch.cuda.is_available() and not args.smoke_cpu
    if not cuda and not args.smoke_cpu:
        ap.error("no CUDA device (--smoke-cpu checks the plumbing)")
    overrides = [*args.overrides, *([] if cuda else ["train.device=cpu"])]
    n1, n2 = args.steps
    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "device": torch.cuda.get_device_name() if cuda else "cpu (smoke)", "steps": [n1, n2],
                           "overrides": overrides, "modes": {}}
    for mode in args.modes:
        c1, where1 = count_syncs(args.run, n1, mode, overrides, cuda)
        c2, where2 = count_syncs(args.run, n2, mode, overrides, cuda)
        per_step = {k: (where2[k] - where1.get(k, 0)) / (n2 - n1) for k in where2 if where2[k] != where1.get(k, 0)}
        out["modes"][mode] = {"syncs": [c1, c2], "per_step": (c2 - c1) / (n2 - n1),
                              "per_step_by_site": dict(sorted(per_step.items(), key=lambda kv: -kv[1]))}
        print(f"{mode}: {(c2 - c1) / (n2 - n1):.2f} synchronisations per step; by site: {out['modes'][mode]['per_step_by_site']}",
              flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
