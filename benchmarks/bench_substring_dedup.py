"""substring_dedup vs the reference exact-substring logic (Lee et al. 2022), and 1 shard vs many.

The peer: google-research/deduplicate-text-datasets (Rust). datatrove's exact-substring path
(ESDatasetToSequence / ESMergeSequences / ESRangeRemover) prepares the byte sequence and
removes the ranges, but the suffix array, `self-similar` and `collect` between them are that
Rust tool, which is not on PyPI, so neither runs here. What is compared instead is the
reference's logic, re-stated independently over the same bytes:
  - every document's UTF-8 bytes, each followed by b"\\xff\\xff" + its 4-byte index (0xFF never
    occurs in UTF-8), concatenated into one byte string;
  - one suffix array over those bytes (libdivsufsort via pydivsufsort, on uint8 directly, no
    ranks, no shards) and its LCP array;
  - `self-similar`: suffixes i, i+1 of the array sharing >= k bytes both mark [start, start+k);
  - `collect`: the union of those ranges, mapped back to each document's bytes.
tokenmill's side is `substring_dedup` with unit="byte" and the same k, at 1, 4 and 16
suffix-array shards; its `all_copies_mask` is the reference's removal set (the reference strikes
every copy; tokenmill keeps the first copy, whose removal is reported beside it).

Each measurement runs in a fresh subprocess (peak RSS = its ru_maxrss), from the texts in memory
to the per-document masks. A second table runs unit="word" (k=50, the default) at 1 and 4 shards.

    .venv/bin/python benchmarks/bench_substring_dedup.py                # ~12 MB of books + code
    .venv/bin/python benchmarks/bench_substring_dedup.py --smoke        # seconds
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CORPORA = Path(os.environ.get("TOKENMILL_REAL_CORPORA", "/work/real_corpora"))
SOURCES = ["books/austen", "books/bible-en-kjv", "books/shakespeare", "code/python/cpython3.11-stdlib"]


def load_texts(mb_per_source: float) -> list[str]:
    """Whole files in sorted order from each source until its byte budget is spent."""
    texts = []
    for src in SOURCES:
        used = 0
        for path in sorted(p for p in (CORPORA / src).rglob("*") if p.is_file()):
            if path.suffix not in (".txt", ".md", ".py"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            texts.append(text)
            used += len(text.encode())
            if used >= mb_per_source * 1e6:
                break
    return texts


def ours(texts: list[str], unit: str, k: int, shards: int, work: Path) -> dict:
    from tokenmill.data.dedup.substring import all_copies_mask, find_repeats, later_copies_mask, tokenize

    t0 = time.perf_counter()
    docs = [tokenize(t, unit).values for t in texts]
    total = sum(len(d) for d in docs)
    first, bases = find_repeats(docs, k, -(-total // shards), work)
    seconds = time.perf_counter() - t0
    every = np.concatenate([all_copies_mask(first[bases[d]:bases[d + 1]], k) for d in range(len(docs))])
    later = np.concatenate([later_copies_mask(first[bases[d]:bases[d + 1]], int(bases[d]), k) for d in range(len(docs))])
    np.save(work / "every.npy", every)
    return {"seconds": round(seconds, 2), "units": int(total), "all_copies_units": int(every.sum()),
            "later_copies_units": int(later.sum()), "first_sha256": hashlib.sha256(first.tobytes()).hexdigest()[:16]}


def reference(texts: list[str], k: int, work: Path) -> dict:
    from pydivsufsort import divsufsort, kasai

    t0 = time.perf_counter()
    raw = [t.encode("utf-8", "surrogatepass") for t in texts]
    stream = b"".join(r + b"\xff\xff" + i.to_bytes(4, "big") for i, r in enumerate(raw))
    data = np.frombuffer(stream, dtype=np.uint8).copy()
    sa = divsufsort(data)
    lcp = kasai(data, sa)
    hit = np.flatnonzero(lcp[:-1] >= k)
    starts = np.unique(np.concatenate([sa[hit], sa[hit + 1]]).astype(np.int64))
    diff = np.zeros(len(data) + 1, dtype=np.int64)
    np.add.at(diff, starts, 1)
    np.add.at(diff, np.minimum(starts + k, len(data)), -1)
    marked = np.cumsum(diff[:-1]) > 0
    seconds = time.perf_counter() - t0
    # Back to document bytes (separators dropped), and the same with only the windows that end
    # inside their document, to explain any difference.
    is_text = np.ones(len(data), dtype=bool)
    ends = np.cumsum([len(r) + 6 for r in raw])
    for e in ends:
        is_text[e - 6:e] = False
    doc_end = np.repeat(ends - 6, [len(r) + 6 for r in raw])
    inside = starts[starts + k <= doc_end[starts]]
    diff[:] = 0
    np.add.at(diff, inside, 1)
    np.add.at(diff, np.minimum(inside + k, len(data)), -1)
    marked_inside = np.cumsum(diff[:-1]) > 0
    np.save(work / "ref.npy", marked[is_text])
    np.save(work / "ref_inside.npy", marked_inside[is_text])
    return {"seconds": round(seconds, 2), "bytes": int(is_text.sum()), "marked_bytes": int(marked[is_text].sum()),
            "marked_bytes_windows_inside_docs": int(marked_inside[is_text].sum())}


def child(args: argparse.Namespace) -> None:
    texts = load_texts(args.mb_per_source)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out = reference(texts, args.k, work) if args.side == "reference" else ours(texts, args.unit, args.k, args.shards, work)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))


def measure(base: argparse.Namespace, work: Path, **kw) -> dict:
    cmd = [sys.executable, __file__, "--child", "--work", str(work), "--mb-per-source", str(base.mb_per_source)]
    for key, val in kw.items():
        cmd += [f"--{key.replace('_', '-')}", str(val)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb-per-source", type=float, default=3.0)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--k-words", type=int, default=50)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default="benchmarks/results/substring_dedup.json")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--side", default="ours")
    ap.add_argument("--unit", default="byte")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--work", default="")
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.smoke:
        args.mb_per_source = 0.1
    texts = load_texts(args.mb_per_source)
    result: dict = {"data": {"sources": SOURCES, "docs": len(texts), "bytes": sum(len(t.encode()) for t in texts),
                             "mb_per_source": args.mb_per_source},
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                                "pydivsufsort": _version("pydivsufsort"), "cpu": platform.processor() or platform.machine()},
                    "k_bytes": args.k, "k_words": args.k_words}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ref = measure(args, root / "ref", side="reference", k=args.k)
        ref_mask, ref_inside = np.load(root / "ref" / "ref.npy"), np.load(root / "ref" / "ref_inside.npy")
        rows = []
        for shards in (1, 4, 16):
            r = measure(args, root / f"byte{shards}", side="ours", unit="byte", k=args.k, shards=shards)
            mine = np.load(root / f"byte{shards}" / "every.npy")
            r |= {"shards": shards, "differs_from_reference_bytes": int((mine != ref_mask).sum()),
                  "extra_in_reference_bytes": int((ref_mask & ~mine).sum()),
                  "extra_in_ours_bytes": int((mine & ~ref_mask).sum()),
                  "differs_from_reference_windows_inside_docs": int((mine != ref_inside).sum())}
            rows.append(r)
            print(json.dumps(r), flush=True)
        words = []
        for shards in (1, 4):
            r = measure(args, root / f"word{shards}", side="ours", unit="word", k=args.k_words, shards=shards)
            words.append(r | {"shards": shards})
            print(json.dumps(words[-1]), flush=True)
    result |= {"reference": ref, "ours_byte": rows, "ours_word": words}
    print(json.dumps(ref))
    if not args.smoke:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print("wrote", args.out)


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
