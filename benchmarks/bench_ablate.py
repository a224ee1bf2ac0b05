"""What each curation step buys, measured on real data with `tokenmill ablate` (issue 28).

Sources (shared/corpora/fetch_real_corpora.sh): English web HTML with its real boilerplate
(Debian installation guides for amd64 and i386 — near-copies of each other — the Debian
handbook, developers' reference, maintainers' guide and reference, trafilatura's test pages),
a WARC sample, books (Austen, Shakespeare, two editions of the English Bible: KJV and WEB) and
Python code. Arms: raw (extract + normalize), the full pipeline, and one step off at a time:
heuristic quality rules, the model-based quality step (a classifier cut), near-duplicate
removal, line dedup. Two model sizes, three seeds each, equal tokens per size.

    .venv/bin/python benchmarks/record.py benchmarks/results/ablate.json --result /tmp/ablate.json -- \\
        benchmarks/bench_ablate.py --corpora ../real_corpora --work /tmp/ablate-bench --json /tmp/ablate.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

WEB = ["installation-guide-amd64/en", "installation-guide-i386/en", "debian-handbook/en", "developers-reference/en",
       "maint-guide/en", "debian-reference/en", "trafilatura-tests"]
BOOKS = ["austen", "shakespeare", "bible-en-kjv", "bible-en-web"]


def base_config(corpora: Path, threads: int) -> dict:
    sources = [{"kind": "files", "path": str(corpora / "web_html" / d), "bucket": "web"} for d in WEB]
    sources.append({"kind": "files", "path": str(corpora / "web_warc"), "bucket": "web"})
    sources += [{"kind": "files", "path": str(corpora / "books" / b), "bucket": "books"} for b in BOOKS]
    sources.append({"kind": "files", "path": str(corpora / "code" / "python" / "cpython3.11-stdlib"), "bucket": "code",
                    "max_bytes": 3_000_000})
    return {
        "name": "ablate-base", "seed": 1234,
        "curate": {"sources": sources, "workers": threads,
                   "quality": {"kinds": {"books": "books", "code": "code"}},
                   # the classifier learns "good" from Python's reST documentation (not a source here);
                   # 0.002 is about the 30th percentile of the web pages' scores (measured on these
                   # sources before the run: the cut removes a share like DCLM-style filters, milder)
                   "model_quality": {"reference": str(corpora / "reference" / "doc-sources" / "python3.11-rst"),
                                     "min_classifier_score": 0.002, "skip_buckets": ["code", "books"]}},
        "tokenizer": {"vocab_size": 8192},
        "tokenize": {"val_fraction": 0.02, "min_val_docs": 2},
        "model": {"d_model": 64, "n_layers": 2, "n_heads": 2, "max_seq_len": 256},
        "train": {"seq_len": 256, "micro_batch": 8, "global_batch_tokens": 4096, "lr": 0.003, "device": "cpu",
                  "dtype": "float32", "threads": threads, "eval_docs": 4, "ckpt_every": 50, "log_every": 0},
        "eval": {"num_samples": 0, "memorization_docs": 0},
    }


def ablate_config(small_tokens: int, large_tokens: int, seeds: list[int]) -> dict:
    return {
        "name": "ablate", "root": "out", "base": "base.yaml", "reference": "full", "baseline": "raw",
        "arms": {"full": {"note": "the default pipeline"},
                 "raw": {"steps": ["extract", "normalize"], "note": "extract + normalize only"},
                 "no-quality": {"without": ["quality"], "note": "heuristic quality rules off"},
                 "no-model-quality": {"without": ["model_quality"], "note": "classifier cut off"},
                 "no-minhash": {"without": ["minhash_dedup"], "note": "near-duplicate removal off"},
                 "no-line-dedup": {"without": ["line_dedup"], "note": "boilerplate line removal off"}},
        "sizes": [{"name": "d64", "d_model": 64, "n_layers": 2, "n_heads": 2, "tokens": small_tokens},
                  {"name": "d128", "d_model": 128, "n_layers": 3, "n_heads": 4, "tokens": large_tokens}],
        "seeds": seeds,
        "eval": {"fraction": 0.1, "max_docs": 60},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--small-tokens", type=int, default=400_000)
    ap.add_argument("--large-tokens", type=int, default=800_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "base.yaml").write_text(yaml.safe_dump(base_config(args.corpora.resolve(), args.threads)))
    (args.work / "ablate.yaml").write_text(yaml.safe_dump(ablate_config(args.small_tokens, args.large_tokens, args.seeds)))
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "tokenmill", "ablate", "ablate.yaml"], cwd=args.work, check=True)
    result = json.loads((args.work / "out" / "ablate" / "ablate.json").read_text())
    out = {"benchmark": "ablate", "wall_seconds_this_call": time.time() - t0, "threads": args.threads,
           "sources": {"web": WEB + ["web_warc"], "books": BOOKS, "code": "code/python/cpython3.11-stdlib (3 MB)"},
           "ablate": result}
    args.json.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "ablate"}))


if __name__ == "__main__":
    main()
