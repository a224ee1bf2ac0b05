"""MinHash dedup vs datasketch: signature speed, LSH index memory, near-duplicate recall/precision.

Issue 3 targets, each measured here on one core (the process pins itself to one CPU):
1. speed   — signatures at >= 5x datasketch's MB/s with the same shingles and 128 permutations.
             Both sides start from the text and get the same shingle set (word 5-grams of
             tokenmill's normalized words; datasketch hashes the 5-gram strings with its default
             SHA-1, tokenmill with its own vectorised hash), datasketch's affine32 scheme with
             the permutations shared across documents (its fastest documented use). Interleaved
             repeats, medians. A second line times the permutation step alone: both given the
             same 32-bit shingle hashes, and the signatures are checked bit-identical.
2. memory  — peak RSS of a 1M-document LSH index (synthetic signatures with 5% planted
             near-duplicates): band keys, candidate pairs, clusters; target < 2 GB. Each side
             runs in a fresh subprocess; datasketch's MinHashLSH is measured at --ds-docs and
             scaled linearly to 1M.
3. quality — recall and precision for pairs at word-5-gram Jaccard >= 0.8, on passages of real
             books and documentation (/work/real_corpora) plus mutated copies (word substitutions,
             deletions, insertions at controlled rates) and the natural near-duplicates already in
             the text. The truth is exact: every pair sharing a shingle of document frequency
             <= 200 gets its exact Jaccard, and the script asserts that no document has 80% of its
             shingles above that frequency, so no pair at J >= 0.8 can be missed. tokenmill
             (candidates + exact verification) at several (bands, rows) vs datasketch MinHashLSH
             (threshold 0.8, 128 permutations, no verification). Pair level = the verified pairs /
             the LSH query results; cluster level = pairs that end in one cluster (transitivity).

    .venv/bin/python benchmarks/bench_minhash.py                      # full run (quiet machine)
    .venv/bin/python benchmarks/bench_minhash.py --smoke              # seconds, tiny inputs
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tokenmill.config import MinHashConfig
from tokenmill.data.dedup import minhash as mh

CORPORA = Path(os.environ.get("TOKENMILL_REAL_CORPORA", "/work/real_corpora"))
SOURCES = ["books/austen/*.txt", "books/spurgeon-treasury-of-david/*.txt", "books/bible-en-web/*.txt",
           "books/shakespeare/*/*.md", "reference/doc-sources/*-txt/en.txt"]
K = 5
THRESHOLD = 0.8


# ----------------------------------------------------------------------------- data
def passages(max_passages: int, min_words: int = 200, max_words: int = 1500) -> list[str]:
    """Paragraph-aligned passages of real English text, in a fixed order."""
    files = sorted(p for pattern in SOURCES for p in glob.glob(str(CORPORA / pattern)) if os.path.isfile(p))
    if not files:
        sys.exit(f"no text under {CORPORA}: run shared/corpora/fetch_real_corpora.sh")
    out: list[str] = []
    per_file = max(1, max_passages // len(files) + 1)
    for f in files:
        paras = [p.strip() for p in Path(f).read_text(encoding="utf-8", errors="replace").split("\n\n") if p.strip()]
        cur: list[str] = []
        n = taken = 0
        for p in paras:
            cur.append(p)
            n += len(p.split())
            if n >= min_words:
                if n <= max_words:
                    out.append("\n\n".join(cur))
                    taken += 1
                cur, n = [], 0
                if taken >= per_file:
                    break
    random.Random(0).shuffle(out)
    return out[:max_passages]


def mutate(text: str, rate: float, vocab: list[str], rng: random.Random) -> str:
    """Each word, with probability `rate`: replaced (1/2), deleted (1/4), or followed by a new word (1/4)."""
    out: list[str] = []
    for w in text.split():
        if rng.random() >= rate:
            out.append(w)
            continue
        op = rng.random()
        if op < 0.5:
            out.append(rng.choice(vocab))
        elif op < 0.75:
            continue
        else:
            out.extend((w, rng.choice(vocab)))
    return " ".join(out)


def near_duplicate_set(n_bases: int, seed: int = 0) -> list[str]:
    """Passages + 1-3 mutated copies of 70% of them, edit rates spread so J covers ~0.5..1."""
    rng = random.Random(seed)
    bases = passages(n_bases)
    vocab = sorted({w for t in bases[:200] for w in t.split()})
    docs: list[str] = []
    for b in bases:
        docs.append(b)
        if rng.random() < 0.7:
            for _ in range(rng.randint(1, 3)):
                docs.append(mutate(b, rng.uniform(0.0, 0.08), vocab, rng))
    order = list(range(len(docs)))
    rng.shuffle(order)  # copies are not next to their original
    return [docs[i] for i in order]


# ----------------------------------------------------------------------------- truth
def true_pairs(sets: list[np.ndarray], max_df: int = 200) -> dict[tuple[int, int], float]:
    """Exact Jaccard of every pair sharing a shingle of document frequency <= max_df."""
    shingle = np.concatenate(sets)
    doc = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    order = np.argsort(shingle, kind="stable")
    shingle, doc = shingle[order], doc[order]
    _, count = np.unique(shingle, return_counts=True)
    df = np.repeat(count, count)
    common = np.bincount(doc[df > max_df], minlength=len(sets))
    sizes = np.array([len(s) for s in sets])
    worst = float(np.max(common / np.maximum(sizes, 1)))
    assert worst < THRESHOLD, f"a document has {worst:.0%} frequent shingles: truth would not be exact"
    keep = df <= max_df
    # pair documents sharing a rare shingle: the same bucket machinery as LSH (all pairs)
    pairs = mh.candidate_pairs(shingle[keep][:, None], window=None)
    pairs = np.unique(np.sort(doc[keep][pairs], axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return {(int(i), int(j)): mh.jaccard(sets[i], sets[j]) for i, j in pairs}


BINS = (0.8, 0.85, 0.9, 0.95, 1.0001)


def score(found: set[tuple[int, int]], truth: dict[tuple[int, int], float], sets: list[np.ndarray]) -> dict:
    """Recall over the true pairs (overall and by Jaccard bin), precision over the found ones."""
    good = sum(mh.jaccard(sets[i], sets[j]) >= THRESHOLD for i, j in found)
    by_bin = {}
    for lo, hi in zip(BINS, BINS[1:]):
        members = [p for p, j in truth.items() if lo <= j < hi]
        by_bin[f"{lo:.2f}-{min(hi, 1.0):.2f}"] = round(sum(p in found for p in members) / max(1, len(members)), 4)
    return {"recall": round(sum(p in found for p in truth) / max(1, len(truth)), 5),
            "precision": round(good / max(1, len(found)), 5), "pairs": len(found), "recall_by_J": by_bin}


def cluster_pairs(roots: np.ndarray) -> set[tuple[int, int]]:
    out: set[tuple[int, int]] = set()
    for r in np.unique(roots):
        members = np.flatnonzero(roots == r).tolist()
        out.update((a, b) for i, a in enumerate(members) for b in members[i + 1:])
    return out


# ----------------------------------------------------------------------------- 1. speed
def ds_shingles(text: str) -> list[bytes]:
    w = mh.normalized_words(text)
    if 0 < len(w) < K:
        return [b" ".join(w)]
    return [b" ".join(w[i: i + K]) for i in range(len(w) - K + 1)]


def bench_speed(texts: list[str], repeats: int) -> dict:
    from datasketch import MinHash

    cfg = MinHashConfig(bands=16, rows=8)  # R = 128, as datasketch's default num_perm
    hasher = mh.MinHasher(cfg, seed=1)
    perms = MinHash(num_perm=128, seed=1).permutations
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)

    def ours() -> np.ndarray:
        return hasher.signatures(texts)

    def theirs() -> list[np.ndarray]:
        out = []
        for t in texts:
            m = MinHash(num_perm=128, seed=1, permutations=perms, scheme="affine32")
            m.update_batch(ds_shingles(t))
            out.append(m.hashvalues)
        return out

    # permutation step alone, on the same 32-bit shingle hashes
    sets = hasher.shingle_sets(texts)
    ints = [[int(v) for v in (s & np.uint64(0xFFFFFFFF))] for s in sets]

    def ours_perm() -> np.ndarray:
        return hasher.signatures_of(sets)

    def theirs_perm() -> np.ndarray:
        out = []
        for xs in ints:
            m = MinHash(num_perm=128, seed=1, permutations=perms, scheme="affine32", hashfunc=int)
            if xs:
                m.update_batch(xs)
            out.append(m.hashvalues)
        return np.array(out, dtype=np.uint32)

    identical = bool(np.array_equal(ours_perm(), theirs_perm()))
    same_count = all(len(s) == len(set(ds_shingles(t))) for s, t in zip(sets, texts))
    times: dict[str, list[float]] = {"ours": [], "theirs": [], "ours_perm": [], "theirs_perm": []}
    for _ in range(repeats):  # interleaved
        for name, fn in (("ours", ours), ("theirs", theirs), ("ours_perm", ours_perm), ("theirs_perm", theirs_perm)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    mb = n_bytes / 1e6
    return {
        "docs": len(texts), "MB": round(mb, 2), "repeats": repeats,
        "same_shingle_sets": same_count, "signatures_identical_on_same_hashes": identical,
        "tokenmill_MBps": round(mb / med["ours"], 1), "datasketch_MBps": round(mb / med["theirs"], 2),
        "speedup": round(med["theirs"] / med["ours"], 1),
        "perm_only_tokenmill_MBps": round(mb / med["ours_perm"], 1),
        "perm_only_datasketch_MBps": round(mb / med["theirs_perm"], 2),
        "perm_only_speedup": round(med["theirs_perm"] / med["ours_perm"], 1),
    }


# ----------------------------------------------------------------------------- 2. memory
def _status_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process; unlike ru_maxrss, VmHWM is not inherited
    from the parent across fork + exec."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _synthetic_signatures(n: int, num_perm: int, chunk: int, seed: int = 0):
    """Chunks of random signatures; 5% of rows copy an earlier row of the chunk with 10% changed."""
    rng = np.random.default_rng(seed)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        sigs = rng.integers(0, 2**32, (m, num_perm), dtype=np.uint64).astype(np.uint32)
        dup = np.flatnonzero(rng.random(m) < 0.05)
        dup = dup[dup > 0]
        src = (rng.random(len(dup)) * dup).astype(np.int64)
        sigs[dup] = sigs[src]
        change = rng.random((len(dup), num_perm)) < 0.1
        sigs[dup] = np.where(change, rng.integers(0, 2**32, (len(dup), num_perm), dtype=np.uint64).astype(np.uint32),
                             sigs[dup])
        yield start, sigs


def memory_child(impl: str, n: int) -> dict:
    """Run in a fresh process: build the index for n documents, report RSS."""
    if impl == "datasketch":
        from datasketch import MinHash, MinHashLSH  # imported before the baseline is taken
    base = _status_mb("VmRSS")
    t0 = time.perf_counter()
    if impl == "tokenmill":
        cfg = MinHashConfig()
        hasher = mh.MinHasher(cfg, seed=1)
        keys = np.empty((n, cfg.bands), dtype=np.uint64)
        for start, sigs in _synthetic_signatures(n, hasher.num_perm, 50_000):
            keys[start: start + len(sigs)] = hasher.band_keys(sigs)
        pairs = hasher.candidate_pairs(keys)
        roots = mh.clusters(n, pairs)
        extra = {"candidate_pairs": int(len(pairs)), "removed": int((roots != np.arange(n)).sum()),
                 "band_keys_MB": round(keys.nbytes / 2**20, 1)}
    else:
        perms = MinHash(num_perm=128, seed=1).permutations
        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=128)
        for start, sigs in _synthetic_signatures(n, 128, 50_000):
            for i, row in enumerate(sigs):
                lsh.insert(start + i, MinHash(hashvalues=row, permutations=perms, scheme="affine32"))
        extra = {}
    peak = _status_mb("VmHWM")
    return {"impl": impl, "docs": n, "seconds": round(time.perf_counter() - t0, 1),
            "baseline_MB": round(base, 1), "peak_rss_MB": round(peak, 1),
            "index_MB": round(peak - base, 1), **extra}


def bench_memory(n: int, ds_docs: int) -> dict:
    def child(impl: str, docs: int) -> dict:
        out = subprocess.run([sys.executable, __file__, "--memory-child", impl, str(docs)],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    ours = child("tokenmill", n)
    theirs = child("datasketch", ds_docs)
    theirs["index_MB_scaled_to"] = {str(n): round(theirs["index_MB"] * n / ds_docs, 1)}
    return {"tokenmill": ours, "datasketch": theirs, "target_MB": 2048,
            "meets_target": ours["peak_rss_MB"] < 2048}


# ----------------------------------------------------------------------------- 3. quality
def bench_quality(n_bases: int, configs: list[tuple[int, int]]) -> dict:
    from datasketch import MinHash, MinHashLSH

    docs = near_duplicate_set(n_bases)
    probe = mh.MinHasher(MinHashConfig(), seed=1)
    sets = probe.shingle_sets(docs)
    t0 = time.perf_counter()
    pair_j = true_pairs(sets)
    truth = {p: j for p, j in pair_j.items() if j >= THRESHOLD}
    js = np.array(list(truth.values()))
    in_bins = {f"{lo:.2f}-{min(hi, 1.0):.2f}": int(((js >= lo) & (js < hi)).sum()) for lo, hi in zip(BINS, BINS[1:])}
    result: dict = {"docs": len(docs), "true_pairs": len(truth), "true_pairs_by_J": in_bins,
                    "true_J_quantiles": [round(float(q), 3) for q in np.quantile(js, [0, 0.1, 0.5, 0.9])] if len(js) else [],
                    "pairs_J_0.7_to_0.8": sum(0.7 <= j < THRESHOLD for j in pair_j.values()),
                    "truth_seconds": round(time.perf_counter() - t0, 1), "tokenmill": {}}
    for bands, rows in configs:
        cfg = MinHashConfig(bands=bands, rows=rows)
        t0 = time.perf_counter()
        hasher = mh.MinHasher(cfg, seed=1)
        sigs = hasher.signatures_of(sets)
        cand = hasher.candidate_pairs(hasher.band_keys(sigs))
        verified = mh.exact_verifier(sets, THRESHOLD)(cand)
        roots = mh.clusters(len(docs), cand, lambda p: verified)
        secs = time.perf_counter() - t0
        edges = {(int(i), int(j)) for i, j in cand[verified]}
        expected = float(np.mean([mh.candidate_probability(j, bands, rows) for j in js])) if len(js) else 1.0
        result["tokenmill"][f"{bands}x{rows}"] = {
            "permutations": bands * rows, "candidates": int(len(cand)), "seconds": round(secs, 2),
            "expected_recall_from_P_cand": round(expected, 5),
            "pair_level": score(edges, truth, sets), "cluster_level": score(cluster_pairs(roots), truth, sets)}
    perms = MinHash(num_perm=128, seed=1).permutations
    t0 = time.perf_counter()
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=128)
    minhashes = []
    for i, t in enumerate(docs):
        m = MinHash(num_perm=128, seed=1, permutations=perms, scheme="affine32")
        m.update_batch(ds_shingles(t))
        lsh.insert(i, m)
        minhashes.append(m)
    found = {(min(i, j), max(i, j)) for i, m in enumerate(minhashes) for j in lsh.query(m) if j != i}
    result["datasketch"] = {"bands_rows": [lsh.b, lsh.r],
                            "seconds": round(time.perf_counter() - t0, 2), "pair_level": score(found, truth, sets)}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny inputs: checks the script runs")
    ap.add_argument("--speed-docs", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--lsh-docs", type=int, default=1_000_000)
    ap.add_argument("--ds-docs", type=int, default=100_000)
    ap.add_argument("--bases", type=int, default=4000)
    ap.add_argument("--only", choices=["speed", "memory", "quality"], help="run one part (make bench-check: speed)")
    ap.add_argument("--memory-child", nargs=2, metavar=("IMPL", "DOCS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]))))
        return
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    if args.smoke:
        args.speed_docs, args.repeats, args.lsh_docs, args.ds_docs, args.bases = 150, 1, 20_000, 5_000, 150
    import datasketch
    parts = {"speed": lambda: bench_speed(passages(args.speed_docs), args.repeats),
             "memory": lambda: bench_memory(args.lsh_docs, args.ds_docs),
             "quality": lambda: bench_quality(args.bases, [(25, 5), (20, 6), (16, 8), (32, 4), (9, 13)])}
    report = {"datasketch": datasketch.__version__, "numpy": np.__version__, "cores": 1,
              **{name: run() for name, run in parts.items() if args.only in (None, name)}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
