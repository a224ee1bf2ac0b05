"""Tokenize-stage throughput: the whole `tokenmill tokenize` stage vs bare HF `encode_batch`.

Same curated text, same tokenizer.json, same cores. For each core count c (default 1 and 2):
  tokenmill  a fresh process pinned to c cores runs `run_tokenize` with tokenize.workers=c:
             Parquet read, held-out split, encode (tiktoken when verified identical, else HF),
             EOS, pieces + marker per part, shard assembly, fsync, rename — everything.
  HF         a fresh process pinned to the same c cores (RAYON_NUM_THREADS=c) calls
             `Tokenizer.encode_batch` (512 documents a call) on the texts already in memory and
             writes nothing — the floor any tokenize stage built on HF pays.
tokens/s counts the same content tokens for both (the stage's EOS per document left out). The
store's ids are then compared with HF's for every document: they must be identical.

The curated buckets are rewritten into parts of --part-docs documents (what `curate.shard_docs`
does on a large corpus) so the stage has parts to share between workers; the text is unchanged.
--copies N repeats every document N times (new ids) for a corpus large enough that process
start-up (about 0.3 s per spawned worker) no longer counts. Runs are interleaved; medians of
--repeats reported.

    .venv/bin/python benchmarks/bench_tokenize.py --run runs/demo --cores 1 2 --repeats 3 [--copies 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def _texts(curated: Path) -> dict[str, str]:
    from tokenmill.data.curated import curated_buckets, iter_documents

    return {i: t for b in curated_buckets(curated) for i, t in iter_documents(curated, b)}


def prepare(src: Path, work: Path, part_docs: int, copies: int) -> Path:
    """A run directory under `work` with the source's curated text (`copies` times, distinct ids)
    in parts and a verified tokenizer."""
    from tokenmill.config import load_config
    from tokenmill.runs import RunDir
    from tokenmill.tokenizer.bpe import tokenizer_sha256
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.data.curated import curated_buckets, iter_documents

    run = RunDir.create(load_config(src / "config.yaml", [f"root={work}", "name=bench"]))
    for bucket in curated_buckets(src / "curated"):
        docs = list(iter_documents(src / "curated", bucket))
        docs = [(f"{i}~{c}" if c else i, t) for c in range(copies) for i, t in docs]
        out = run.sub("curated", bucket)
        out.mkdir(parents=True)
        for k in range(0, len(docs), part_docs):
            chunk = docs[k: k + part_docs]
            pq.write_table(pa.table({"id": [i for i, _ in chunk], "text": [t for _, t in chunk]}),
                           out / f"part-{k // part_docs:05d}.parquet")
    record = src / "tokenizer" / "fast_encode.json"
    if record.exists() and json.loads(record.read_text()).get("tokenizer_sha256") == tokenizer_sha256(
            src / "tokenizer" / "tokenizer.json"):
        shutil.copytree(src / "tokenizer", run.sub("tokenizer"))
    else:  # a tokenizer from before the fast-encoder check: train and verify one here
        run_tokenizer(run)
    return run.path


# --------------------------------------------------------------------------- children (pinned)
def child_tokenmill(run_path: Path, workers: int, heldout_check: bool = True) -> dict:
    from tokenmill.config import load_config
    from tokenmill.runs import RunDir
    from tokenmill.tokens.tokenize import run_tokenize

    with tempfile.TemporaryDirectory() as tmp:
        run = RunDir.create(load_config(run_path / "config.yaml", [f"root={tmp}", "name=t",
                                                                   f"tokenize.workers={workers}",
                                                                   f"tokenize.dedup_heldout={str(heldout_check).lower()}"]))
        shutil.copytree(run_path / "curated", run.sub("curated"))
        shutil.copytree(run_path / "tokenizer", run.sub("tokenizer"))
        t0 = time.perf_counter()
        run_tokenize(run)
        seconds = time.perf_counter() - t0
        keep = run_path / f"tokens-{workers}"
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(run.sub("tokens"), keep)
        phases = stage_phases(run.path / "events.jsonl")
    return {"seconds": seconds, "phases": phases}


def stage_phases(events: Path) -> dict[str, Any]:
    """Where the stage's seconds went, from its own events: the held-out check, the encode
    processes and threads it chose, and the parts' encode seconds (summed over processes)."""
    from tokenmill.runs import read_events

    ev = list(read_events(events))
    check = next((e for e in ev if e["kind"] == "heldout_check"), None)
    layout = next((e for e in ev if e["kind"] == "layout"), {})
    return {"heldout_check_s": check["seconds"] if check else 0.0,
            "heldout_check_processes": check["processes"] if check else 0,
            "encode_processes": layout.get("processes"), "encode_threads": layout.get("threads"),
            "parts_encode_s_sum": round(sum(e["seconds"] for e in ev if e["kind"] == "part"), 3)}


def child_hf(run_path: Path) -> dict:
    from tokenmill.tokenizer.bpe import load_tokenizer

    tok = load_tokenizer(run_path / "tokenizer" / "tokenizer.json")
    texts = list(_texts(run_path / "curated").values())
    t0 = time.perf_counter()
    n = 0
    for i in range(0, len(texts), 512):
        n += sum(len(e.ids) for e in tok.encode_batch(texts[i: i + 512], add_special_tokens=False))
    return {"seconds": time.perf_counter() - t0, "tokens": n}


def _pinned(args: list[str], cores: int) -> dict:
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    env = {**os.environ, "RAYON_NUM_THREADS": str(cores), "TOKENIZERS_PARALLELISM": "true"}
    out = subprocess.run([sys.executable, __file__, *args], env=env, check=True, capture_output=True, text=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- identity
def mismatched_docs(run_path: Path, store_dir: Path) -> int:
    """Documents whose stored ids differ from HF's (EOS appended), over the whole store."""
    from tokenmill.tokenizer.bpe import load_tokenizer
    from tokenmill.tokenizer.special import EOS_ID
    from tokenmill.tokens.store import TokenStore

    tok = load_tokenizer(run_path / "tokenizer" / "tokenizer.json")
    texts = _texts(run_path / "curated")
    store = TokenStore(store_dir)
    bad = seen = 0
    for bucket in store.buckets:
        for split in ("train", "val"):
            for shard in store.shards(bucket, split):
                ids = shard.doc_table().column("id").to_pylist()
                encs = tok.encode_batch([texts[i] for i in ids], add_special_tokens=False)
                for k, e in enumerate(encs):
                    seen += 1
                    bad += shard.doc(k).tolist() != [*e.ids, EOS_ID]
    return bad + (len(texts) - seen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"), help="run directory with curated/ (and tokenizer/)")
    ap.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--part-docs", type=int, default=100, help="documents per curated part")
    ap.add_argument("--copies", type=int, default=1, help="repeat the curated text this many times (more work per start-up)")
    ap.add_argument("--no-heldout-check", action="store_true",
                    help="leave out the held-out duplicate check (MinHash of every document, which bare encode_batch does not do)")
    ap.add_argument("--child", choices=["tokenmill", "hf"], help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "tokenmill":
        print(json.dumps(child_tokenmill(args.run, args.workers, not args.no_heldout_check)))
        return
    if args.child == "hf":
        print(json.dumps(child_hf(args.run)))
        return

    import tiktoken
    import tokenizers

    with tempfile.TemporaryDirectory() as work:
        run_path = prepare(args.run, Path(work), args.part_docs, args.copies)
        texts = _texts(run_path / "curated")
        n_bytes = sum(len(t.encode()) for t in texts.values())
        fast = json.loads((run_path / "tokenizer" / "fast_encode.json").read_text())
        result: dict = {"tokenizers": tokenizers.__version__, "tiktoken": tiktoken.__version__,
                        "copies": args.copies, "heldout_check": not args.no_heldout_check, "docs": len(texts), "bytes": n_bytes, "parts": len(list((run_path / "curated").rglob("*.parquet"))),
                        "fast_encoder_verified_on_sample": fast["identical"], "by_cores": {}}
        for cores in args.cores:
            tm, hf, tokens, phases = [], [], 0, []
            for _ in range(args.repeats):
                child = _pinned(["--child", "tokenmill", "--run", str(run_path), "--workers", str(cores),
                                 *(["--no-heldout-check"] if args.no_heldout_check else [])], cores)
                tm.append(child["seconds"])
                phases.append(child["phases"])
                h = _pinned(["--child", "hf", "--run", str(run_path)], cores)
                hf.append(h["seconds"])
                tokens = h["tokens"]
            store_dir = run_path / f"tokens-{cores}"
            t_tm, t_hf = statistics.median(tm), statistics.median(hf)
            result["by_cores"][cores] = {
                "encoder": json.loads((store_dir / "_meta.json").read_text())["encoder"],
                "tokenmill_s": t_tm, "hf_encode_batch_s": t_hf,
                "tokenmill_tokens_per_s": tokens / t_tm, "hf_tokens_per_s": tokens / t_hf,
                "tokenmill_MB_per_s": n_bytes / 1e6 / t_tm, "hf_MB_per_s": n_bytes / 1e6 / t_hf,
                "speedup": t_hf / t_tm, "tokenmill_s_all": tm, "hf_s_all": hf,
                "heldout_check_s_median": statistics.median(p["heldout_check_s"] for p in phases),
                "phases": phases[0], "mismatched_docs": mismatched_docs(run_path, store_dir)}
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
