"""Curation that shows in the model: raw vs tokenmill's defaults vs datatrove's filters vs the
oracle, trained at two sizes with three seeds and scored on held-out clean text (issue 41).

The data is the dirty-web corpus of benchmarks/dirty_web.py (real clean prose and documentation,
mojibake'd documentation, ten kinds of web junk, every document labelled), its held-out clean
text (more passages and pages from the same pools, in no arm's sources) and its reference (other
files of the same kinds, for the perplexity gate and the classifier). One `tokenmill ablate`
experiment, so every arm has the same sources, tokenizer, model sizes, token budgets and seeds:

  raw        extract + normalize (mojibake repaired, nothing removed)
  default    `tokenmill curate`'s default steps with the reference given (what a newcomer runs)
  datatrove  datatrove 0.10.1's FineWeb recipe (benchmarks/peer_datatrove.py: its language filter
             with the offline lid.176 model, FTFY, per-language stop words, Gopher, C4, FineWeb)
             run over the corpus, and the documents it keeps *as it outputs them* (FTFY's repairs
             included) written to a source of their own, which the arm only extracts: it trains on
             datatrove's output text (issue 55; results recorded before trained on the original
             text of the records the four quality filters alone kept)
  oracle     the records labelled clean, then extract + normalize

Evaluation: only the held-out clean text (`eval.fraction: 0`, `eval.files`), decontaminated out
of every arm. The headline is the share of the raw -> oracle gap the default pipeline recovers,
(raw - default) / (raw - oracle) in bits per byte, per seed, with its Student-t interval over
the seeds; and default - datatrove, paired by seed.

    .venv/bin/python benchmarks/record.py benchmarks/results/dirty_web_model.json --result /tmp/dwm.json -- \\
        benchmarks/bench_dirty_web_model.py --corpora ../real_corpora --work /tmp/dwm --json /tmp/dwm.json
The bigger result (`--preset big`: 4.3 M parameters and 5 M tokens per run beside the small size, bf16
and compiled; its power and decision rule frozen in benchmarks/frozen/dirty_web_model_big.json first):

    .venv/bin/python benchmarks/record.py benchmarks/results/dirty_web_model_big.json --result /tmp/dwmb.json -- \\
        benchmarks/bench_dirty_web_model.py --corpora ../real_corpora --work /tmp/dwmb --json /tmp/dwmb.json \\
        --preset big --lr 0.002
Needs `pip install datatrove==0.10.1 orjson spacy` (benchmark-only).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_dirty_web  # noqa: E402
import dirty_web  # noqa: E402
from peer_datatrove import fineweb_recipe  # noqa: E402

from tokenmill.decisions.ablate_stats import overall, paired_ci  # noqa: E402

ARMS = ("default", "raw", "datatrove", "oracle")
DATATROVE_PREFIX = "dt-"  # ids of datatrove's output documents, apart from the corpus's


def write_data(args: argparse.Namespace) -> dict[str, Any]:
    """The corpus, datatrove's output, held-out text, reference and the id lists under args.work; their counts."""
    rows, held = dirty_web.build(args.corpora, args.per_kind, args.seed, args.heldout)
    dirty_web.write_jsonl(rows, args.work / "dirty.jsonl")
    dirty_web.write_jsonl(held, args.work / "heldout.jsonl")
    ref = dirty_web.write_reference(args.corpora, args.work / "reference")
    oracle = [r["id"] for r in rows if r["clean"]]
    (args.work / "oracle_ids.txt").write_text("\n".join(oracle) + "\n")
    (args.work / "corpus_ids.txt").write_text("\n".join(r["id"] for r in rows) + "\n")
    judged = fineweb_recipe([{"id": r["id"], "text": r["text"]} for r in rows], "text", bench_dirty_web.DIRTY_WEB_LANGUAGES)
    kept = [r for r in rows if judged[r["id"]]["outcome"] == "kept"]
    # The datatrove arm trains on what the recipe outputs (its kept documents, FTFY's repairs and
    # C4's line edits in them), a second source whose ids no other arm selects.
    out = [{"id": DATATROVE_PREFIX + r["id"], "text": judged[r["id"]].get("text", r["text"])} for r in kept]
    dirty_web.write_jsonl(out, args.work / "datatrove_out.jsonl")
    (args.work / "datatrove_ids.txt").write_text("\n".join(o["id"] for o in out) + "\n")
    return {"docs": len(rows), "heldout_docs": len(held), "heldout_bytes": sum(len(h["text"].encode()) for h in held),
            "reference_files": len(ref), "oracle_docs": len(oracle), "datatrove_kept": len(kept),
            "datatrove_junk_kept": sum(1 for r in kept if not r["clean"]),
            "datatrove_edited": sum(1 for r in kept if "text" in judged[r["id"]])}


def base_config(args: argparse.Namespace) -> dict[str, Any]:
    w = str(args.work.resolve())
    return {
        "name": "dirty-web-base", "root": "out", "seed": 1234,
        "curate": {"sources": [{"kind": "files", "path": f"{w}/dirty.jsonl", "bucket": "web"},
                               {"kind": "files", "path": f"{w}/datatrove_out.jsonl", "bucket": "web"}],
                   "workers": args.threads, "model_quality": {"reference": f"{w}/reference"}},
        "tokenizer": {"vocab_size": args.vocab},
        "tokenize": {"val_fraction": 0.02, "min_val_docs": 2},
        "model": {"d_model": 64, "n_layers": 2, "n_heads": 2, "max_seq_len": 256},
        "train": {"seq_len": 256, "micro_batch": 16, "global_batch_tokens": 4096, "lr": args.lr, "device": "cpu",
                  "dtype": "float32", "threads": args.threads, "eval_docs": 4, "ckpt_every": 100, "log_every": 0,
                  **PRESET_TRAIN[args.preset]},
        "eval": {"num_samples": 0, "memorization_docs": 0},
    }


# The `big` preset (issue 55): the demo's width or more, >= 4 M parameters and 5 M tokens per run.
# Every arm runs the same precision: bf16 autocast (fp32 master weights) on the CPU's AMX units and
# a compiled model, about 2x the fp32 eager tokens/s here, so the 12 runs fit one quiet session.
PRESET_TRAIN: dict[str, dict[str, Any]] = {
    "tiny": {},
    "big": {"dtype": "bfloat16", "compile": True, "ckpt_every": 200},
}


def preset_sizes(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The experiment's sizes. `big` keeps the small size beside it because ablate draws its
    loss-vs-compute lines through at least two sizes; it costs about a tenth of the big runs."""
    small = {"name": "small", "d_model": 64, "n_layers": 2, "n_heads": 2, "tokens": args.small_tokens}
    if args.preset == "big":
        return [small, {"name": "big", "d_model": 256, "n_layers": 4, "n_heads": 4, "tokens": args.big_tokens}]
    return [small, {"name": "large", "d_model": 128, "n_layers": 3, "n_heads": 4, "tokens": args.large_tokens}]


def ablate_config(args: argparse.Namespace) -> dict[str, Any]:
    w = str(args.work.resolve())
    select = lambda f: {"steps": ["select", "extract", "normalize"], "set": [f"select.ids={w}/{f}"]}  # noqa: E731
    return {
        "name": "dirty-web", "root": "out", "base": "base.yaml", "reference": "default", "baseline": "raw",
        # Every arm reads both sources (ablate keeps sources the experiment's) and selects its own
        # documents first: the corpus's, the clean ones, or datatrove's output.
        "arms": {"default": {"set": [f"select.ids={w}/corpus_ids.txt"], "note": "tokenmill curate's defaults, the reference given"},
                 "raw": {**select("corpus_ids.txt"), "note": "extract + normalize only"},
                 "datatrove": {"steps": ["select", "extract"], "set": [f"select.ids={w}/datatrove_ids.txt"],
                               "note": "datatrove's FineWeb recipe: the documents it keeps, as it outputs them"},
                 "oracle": {**select("oracle_ids.txt"), "note": "the documents labelled clean"}},
        "sizes": preset_sizes(args),
        "seeds": args.seeds,
        "eval": {"fraction": 0, "files": {"heldout": f"{w}/heldout.jsonl"}},
    }


def gap_recovered(runs: list[dict[str, Any]], sizes: list[str], seeds: list[int], confidence: float) -> dict[str, Any]:
    """Per size: bpb of each arm per seed, the share of the raw -> oracle gap each arm recovers
    ((raw - arm) / (raw - oracle), per seed, then its t interval), and default - datatrove."""
    bpb = {(r["arm"], r["size"], r["seed"]): overall(r["slices"]) for r in runs}
    out: dict[str, Any] = {}
    for size in sizes:
        per = {a: [bpb[(a, size, s)] for s in seeds] for a in ARMS}
        gap = [r - o for r, o in zip(per["raw"], per["oracle"])]
        out[size] = {"bpb": per, "raw_minus_oracle": paired_ci(gap, confidence),
                     "default_minus_datatrove": paired_ci([d - t for d, t in zip(per["default"], per["datatrove"])], confidence),
                     "recovered": {a: paired_ci([(r - x) / g for r, x, g in zip(per["raw"], per[a], gap)], confidence)
                                   for a in ("default", "datatrove")}}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--per-kind", type=int, default=300)
    ap.add_argument("--seed", type=int, default=41, help="Seed of the corpus build.")
    ap.add_argument("--heldout", type=int, default=100, help="Held-out clean passages and pages, each.")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--small-tokens", type=int, default=600_000)
    ap.add_argument("--large-tokens", type=int, default=1_200_000)
    ap.add_argument("--preset", choices=sorted(PRESET_TRAIN), default="tiny",
                    help="tiny: the small and large sizes in fp32; big: the small size and d_model 256 x 4 layers (4.3 M parameters), bf16, compiled.")
    ap.add_argument("--big-tokens", type=int, default=5_000_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    data = write_data(args)
    (args.work / "base.yaml").write_text(yaml.safe_dump(base_config(args)))
    (args.work / "ablate.yaml").write_text(yaml.safe_dump(ablate_config(args)))
    subprocess.run([sys.executable, "-m", "tokenmill", "ablate", "ablate.yaml"], cwd=args.work, check=True)
    result = json.loads((args.work / "out" / "dirty-web" / "ablate.json").read_text())
    sizes = [s["name"] for s in result["sizes"]]
    out = {"benchmark": "dirty_web_model", "preset": args.preset, "wall_seconds": round(time.time() - t0, 1), "threads": args.threads,
           "corpus": {"per_kind": args.per_kind, "seed": args.seed, **data},
           "configs": {"base": base_config(args), "ablate": ablate_config(args)},
           "gap": gap_recovered(result["runs"], sizes, result["seeds"], result["confidence"]),
           "ablate": result}
    args.json.write_text(json.dumps(out, indent=1))
    print(json.dumps(out["gap"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
