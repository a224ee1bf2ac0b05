"""How wide is the 95% interval of a bucket's held-out bits-per-byte, against its number of
documents? The measurement behind the held-out size floors of tokens/heldout_size.py.

A trained run's model (the demo's, by default) scores, document by document: every held-out
document of each of its buckets, and `--files` documents drawn (fixed seed) from each of a few
collections of the real corpora it never saw, each cut to its first `--max-tokens` tokens. For
each pool of documents:

  spread      c = relative standard error · √n of the whole pool's bits-per-byte (the
              between-document spread the floors are derived from; eval/perplexity.py
              `bpb_interval` is the interval);
  by n        over `--draws` random subsets of n documents: the median relative half-width of
              the subset's 95% interval, and how often it holds the pool's bits-per-byte
              (coverage; the pool stands in for the population, so n stays at most half of it);
  tokens      on the run's own held-out documents: the coefficient of variation of per-token
              NLL and the design effect of 64-token blocks (how much more a block's mean varies
              than if its tokens were independent).

    .venv/bin/python benchmarks/record.py benchmarks/results/heldout_interval.json -- \\
        benchmarks/bench_heldout_interval.py --run runs/demo --corpora /work/real_corpora

Results: benchmarks/results/heldout_interval.json; docs/evaluation.md, "How many held-out documents".
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

from tokenmill.config import load_config
from tokenmill.eval.evaluate import Evaluator
from tokenmill.eval.perplexity import _Windows, bpb_interval, doc_windows, windows_nll_each
from tokenmill.model.objectives import token_nll_batch
from tokenmill.tokenizer.bpe import load_tokenizer
from tokenmill.tokenizer.special import EOS_ID, PAD_ID
from tokenmill.tokens.store import TokenStore
from tokenmill.train.checkpoint import latest_checkpoint
from tokenmill.train.restore import load_model

COLLECTIONS = ("reference/doc-sources/python3.11-rst", "reference/doc-sources/linux-doc-rst", "code/python/cpython3.11-stdlib")
SIZES = (2, 3, 5, 8, 12, 20, 30, 50)
DEVICE = torch.device("cpu")


def seq_len(run: Path) -> int:
    """The context the run was trained and evaluated at."""
    return load_config(run / "config.yaml").train.seq_len


def run_pools(run: Path, model: torch.nn.Module) -> tuple[dict[str, dict[str, list]], dict[str, Any]]:
    """Per-document NLL, bytes and tokens of every held-out document of the run, by bucket; and
    the per-token statistics of those documents."""
    store = TokenStore(run / "tokens")
    ev = Evaluator(store, seq_len(run), None, 8)
    pools, tokens = {}, {}
    for bucket, windows in ev.windows.items():
        each = windows_nll_each(model, windows, 8, DEVICE, store.pad_id)
        lengths = np.array([len(w) - 1 for w in windows], dtype=np.float64)
        pools[f"{run.name}/{bucket}"] = {
            "nll": np.bincount(ev.owners[bucket], weights=each).tolist(),
            "bytes": ev.doc_bytes[bucket].tolist(),
            "tokens": np.bincount(ev.owners[bucket], weights=lengths).astype(int).tolist(),
        }
        tokens[bucket] = token_stats(model, windows)
    return pools, tokens


@torch.no_grad()
def token_stats(model: torch.nn.Module, windows: list[np.ndarray]) -> dict[str, float]:
    """Coefficient of variation of per-token NLL, and the design effect of 64-token blocks."""
    values = []
    for w in windows:
        mask = torch.ones(1, len(w) - 1, dtype=torch.bool)
        values.append(token_nll_batch(model, _Windows(torch.from_numpy(w)[None], mask))[0].double().numpy())
    v = np.concatenate(values)
    blocks = [x[i : i + 64].mean() for x in values for i in range(0, len(x) - 63, 64)]
    return {"tokens": int(v.size), "cv": float(v.std() / v.mean()), "design_effect_64": float(np.var(blocks) / (v.var() / 64))}


def corpus_pools(corpora: Path, run: Path, model: torch.nn.Module, files: int, max_tokens: int) -> dict[str, dict[str, list]]:
    """Per-document NLL of `files` English (or language-less) files of each collection."""
    tok = load_tokenizer(run / "tokenizer" / "tokenizer.json")
    with open(corpora / "FILES.tsv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    pools = {}
    for coll in COLLECTIONS:
        paths = sorted(r["path"] for r in rows if r["collection"] == coll and r["lang"] in ("en", ""))
        random.Random(54).shuffle(paths)
        pool: dict[str, list] = {"nll": [], "bytes": [], "tokens": []}
        for path in paths[:files]:
            ids = tok.encode((corpora / path).read_text(encoding="utf-8", errors="replace")).ids[:max_tokens]
            if len(ids) < 2:
                continue
            doc = np.asarray([*ids, EOS_ID], dtype=np.int64)
            windows = doc_windows(doc, seq_len(run), EOS_ID)
            pool["nll"].append(float(windows_nll_each(model, windows, 16, DEVICE, PAD_ID).sum()))
            pool["bytes"].append(len(tok.decode(ids).encode("utf-8")))  # the bytes of the tokens scored
            pool["tokens"].append(len(ids))
        pools[coll] = pool
        print(f"{coll}: {len(pool['nll'])} documents scored", flush=True)
    return pools


def by_size(pool: dict[str, list], draws: int, seed: int) -> dict[str, Any]:
    """The pool's spread, and the median relative half-width and coverage of subsets of n documents."""
    nll, nbytes, ntok = (np.asarray(pool[k], dtype=np.float64) for k in ("nll", "bytes", "tokens"))
    n_all = len(nll)
    truth = float(nll.sum()) / math.log(2) / float(nbytes.sum())
    ci = bpb_interval(nll, nbytes)
    assert ci is not None
    spread = (ci[1] - ci[0]) / 2 / truth / float(stats.t.ppf(0.975, n_all - 1)) * math.sqrt(n_all)
    rng = np.random.default_rng(seed)
    rows = []
    for n in (s for s in SIZES if s <= n_all // 2):
        widths, hits, toks = [], 0, []
        for _ in range(draws):
            idx = rng.choice(n_all, n, replace=False)
            low, high = bpb_interval(nll[idx], nbytes[idx]) or (math.nan, math.nan)
            widths.append((high - low) / 2 / (float(nll[idx].sum()) / math.log(2) / float(nbytes[idx].sum())))
            hits += low <= truth <= high
            toks.append(int(ntok[idx].sum()))
        rows.append(
            {
                "docs": n,
                "median_rel_half_width": float(np.median(widths)),
                "coverage": hits / draws,
                "median_tokens": int(np.median(toks)),
            }
        )
    return {"docs": n_all, "tokens": int(ntok.sum()), "bpb": truth, "spread": spread, "by_docs": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, default=Path("runs/demo"), help="a trained run (its newest checkpoint scores)")
    ap.add_argument("--corpora", type=Path, default=None, help="the real corpora (FILES.tsv); left out: the run's buckets only")
    ap.add_argument("--files", type=int, default=100, help="documents per real-corpus collection")
    ap.add_argument("--max-tokens", type=int, default=4096, help="tokens scored per real-corpus document (its start)")
    ap.add_argument("--draws", type=int, default=400, help="random subsets per size")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ckpt = latest_checkpoint(args.run / "checkpoints")
    if ckpt is None:
        raise SystemExit(f"{args.run / 'checkpoints'}: no checkpoint (run `tokenmill demo` first)")
    model, step = load_model(Path(ckpt), DEVICE)
    model.eval()
    pools, tokens = run_pools(args.run, model)
    if args.corpora is not None:
        pools.update(corpus_pools(args.corpora, args.run, model, args.files, args.max_tokens))
    result = {
        "run": str(args.run),
        "step": step,
        "max_tokens_per_corpus_doc": args.max_tokens,
        "pools": {name: by_size(pool, args.draws, 54) for name, pool in pools.items()},
        "token_noise": tokens,
    }
    for name, p in result["pools"].items():
        cells = "  ".join(f"n={r['docs']}: ±{r['median_rel_half_width']:.1%} ({r['coverage']:.0%})" for r in p["by_docs"])
        print(f"{name}: {p['docs']} docs, bpb {p['bpb']:.3f}, spread {p['spread']:.3f}  {cells}", flush=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
