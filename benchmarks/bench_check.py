"""`make bench-check`: rerun the quick benchmarks and flag every ratio more than 15% below the
value recorded for it, so a regression (or an entry measured on another CPU) is noticed the day
it happens instead of by the next careful reader.

Each check runs one benchmark script at short settings and reads ratios from its JSON (peer
against tokenmill in the same run, so machine speed cancels out): the tokenize stage vs bare HF
`encode_batch` on 1 and 2 cores, the loader vs the trainer's consumption, MinHash signatures vs
datasketch, a training-speed probe vs HF Llama, curation per core vs datatrove. The recorded
values live in benchmarks/results/bench_check.json with the provenance of the run that made them
(`--record` rewrites them, which is a decision to make in a commit, not in passing).

    .venv/bin/python benchmarks/bench_check.py            # compare; exit 1 when a ratio fell > 15%
    .venv/bin/python benchmarks/bench_check.py --record   # measure and record the reference
    .venv/bin/python benchmarks/bench_check.py --only tokenize minhash
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from provenance import LoadSampler, provenance  # noqa: E402
from record import run_recorded  # noqa: E402

REFERENCE = HERE / "results" / "bench_check.json"
TOLERANCE = 0.15


@dataclass(frozen=True)
class Check:
    """One benchmark at short settings and the ratios (higher is better for tokenmill) it yields."""

    name: str
    args: tuple[str, ...]  # the script and its arguments; {run} and {corpus} are filled in
    ratios: Callable[[dict[str, Any]], dict[str, float]]
    json_flag: str | None = None  # the script writes its JSON to this flag's path instead of stdout


def _tokenize(r: dict[str, Any]) -> dict[str, float]:
    return {f"tokenize {c} core(s) × HF encode_batch": v["speedup"] for c, v in r["by_cores"].items()}


def _loader(r: dict[str, Any]) -> dict[str, float]:
    return {f"loader {m} × trainer": v["x_trainer_sync"] for m, v in r["modes"].items()}


def _train(r: dict[str, Any]) -> dict[str, float]:
    return {"train step fp32: HF s/step ÷ tokenmill's": r["tokenmill_over_hf_fp32"]}


CHECKS = (
    Check("tokenize", ("bench_tokenize.py", "--run", "{run}", "--cores", "1", "2", "--repeats", "3"), _tokenize),
    Check("loader", ("bench_loader.py", "--run", "{run}", "--steps", "200", "--repeats", "3"), _loader),
    Check("minhash", ("bench_minhash.py", "--only", "speed", "--speed-docs", "2000", "--repeats", "3"),
          lambda r: {"MinHash signatures × datasketch": r["speed"]["speedup"]}),
    Check("train", ("bench_train_speed.py", "--run", "{run}", "--steps", "12", "--repeats", "2", "--threads", "2",
                    "--fp32-only", "--set", "train.micro_batch=16", "--set", "train.grad_accum=1"), _train),
    Check("curate", ("bench_curate_vs_datatrove.py", "--corpus", "{corpus}/web_html/python3.11-doc", "--limit", "300"),
          lambda r: {"curation per core × datatrove (default extractor)": r["speedup_vs_datatrove_default"],
                     "curation per core × datatrove (same extractor)": r["speedup_vs_datatrove_same_extractor"]},
          json_flag="--json"),
)


def run_check(check: Check, run: Path, corpus: Path) -> dict[str, Any]:
    """The check's script in a process of its own (benchmarks/record.py): its ratios, seconds,
    command and the others' load while it ran."""
    argv = [a.format(run=run, corpus=corpus) for a in check.args]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        script = [str(HERE / argv[0]), *argv[1:], *([check.json_flag, str(out)] if check.json_flag else [])]
        try:
            rec = run_recorded(script, out if check.json_flag else None, echo=False)
        except (RuntimeError, ValueError) as exc:
            raise SystemExit(f"{check.name}: {exc}") from exc
    return {"command": rec["command"], "seconds": rec["seconds"], "load": rec["load"]["others_cpu_share"],
            "ratios": check.ratios(rec["result"])}


def compare(measured: dict[str, float], recorded: dict[str, float], tolerance: float = TOLERANCE) -> list[dict[str, Any]]:
    """One row per ratio: recorded, measured, measured / recorded and whether it fell too far."""
    rows = []
    for key, value in measured.items():
        ref = recorded.get(key)
        rel = value / ref if ref else None
        rows.append({"ratio": key, "recorded": ref, "measured": value, "measured_over_recorded": rel,
                     "flag": rel is not None and rel < 1 - tolerance})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"), help="the demo's run directory (make demo)")
    ap.add_argument("--corpus", type=Path, default=Path("../real_corpora"), help="fetch_real_corpora.sh's output")
    ap.add_argument("--only", nargs="+", choices=[c.name for c in CHECKS])
    ap.add_argument("--record", action="store_true", help="write the measured ratios as the new reference")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    args = ap.parse_args()
    recorded = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {"checks": {}}
    checks = [c for c in CHECKS if args.only is None or c.name in args.only]
    prov = provenance()
    measured: dict[str, Any] = {}
    with LoadSampler(interval=2.0) as load:
        for check in checks:
            measured[check.name] = run_check(check, args.run, args.corpus)
            print(f"{check.name}: {measured[check.name]['seconds']:.0f} s", flush=True)
    if args.record:
        recorded = {**prov, "load": load.summary(), "checks": {**recorded.get("checks", {}), **measured}}
        REFERENCE.write_text(json.dumps(recorded, indent=1))
        print(f"recorded {REFERENCE}")
        return
    flagged = 0
    print(f"\n| ratio | recorded | now | now / recorded |\n|---|---|---|---|")
    for name, m in measured.items():
        ref = recorded["checks"].get(name, {}).get("ratios", {})
        for row in compare(m["ratios"], ref, args.tolerance):
            flagged += row["flag"]
            rel = f"{row['measured_over_recorded']:.2f}" if row["measured_over_recorded"] else "no reference"
            print(f"| {row['ratio']} | {row['recorded'] or float('nan'):.2f} | {row['measured']:.2f} | "
                  f"{rel}{' **below −15%**' if row['flag'] else ''} |")
    share = load.summary()["others_cpu_share"]
    print(f"\nother processes' share of the cores during the checks: {share}")
    if flagged:
        print(f"{flagged} ratio(s) more than {args.tolerance:.0%} below the recorded value "
              f"(recorded at {recorded.get('commit', '?')[:10]} on {recorded.get('machine', {}).get('cpu', '?')})")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
