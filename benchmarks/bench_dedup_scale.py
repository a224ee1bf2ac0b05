"""Global dedup at scale: coordinator and worker memory, docs/s per phase, planted-truth recall and
precision, beside the previous implementation and datatrove's MinHash stages, on the same docs.

Corpus: documents of 3-12 real sentences (books of the real corpora, recombined by a seeded
generator), written to JSONL files of ~48 MB. Planted: 2% exact copies of an earlier document,
2% near copies (one word in 100 changed: word-5-shingle Jaccard ~0.85-0.9) whose truth is kept.

Each arm is a fresh process running `curate()` (steps exact_dedup, minhash_dedup, line_dedup,
local executor, 2 workers) or datatrove's four MinHash stages (signatures, buckets, cluster,
filter; its defaults: 5-grams, 14 buckets x 8 hashes, 1 worker per stage task). A sampler polls
RSS every 0.2 s: the coordinator (the arm's own process) and each child process separately.

    .venv/bin/python benchmarks/bench_dedup_scale.py --corpus ../real_corpora --docs 1000000 \\
        --baseline-src /tmp/tm-old/src --datatrove --json benchmarks/results/dedup_scale.json

`--baseline-src` is a checkout of the commit before the shuffle stages (1edc841), e.g.
`git worktree add --detach /tmp/tm-old 1edc841`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import LoadSampler, provenance  # noqa: E402

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
STEPS = ["exact_dedup", "minhash_dedup", "line_dedup"]
FILE_BYTES = 48 << 20


# --------------------------------------------------------------------------- corpus
def sentences(corpus: Path, limit: int = 400_000) -> list[str]:
    out: list[str] = []
    for path in sorted((corpus / "books").rglob("*.txt")):
        text = " ".join(path.read_text(errors="replace").split())
        out += [s for s in re.split(r"(?<=[.!?])\s+", text) if 30 <= len(s) <= 400]
        if len(out) >= limit:
            break
    if len(out) < 1000:
        raise SystemExit(f"{corpus}/books: too few sentences ({len(out)}); run shared/corpora/fetch_real_corpora.sh")
    return out


def near_copy(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    for i in range(rng.randrange(0, 100), len(words), 100):
        words[i] = words[i] + "q"
    if len(words) < 100:
        words[rng.randrange(len(words))] += "q"
    return " ".join(words)


BOILERPLATE = [f"{kind} {n}: all rights reserved, see the terms of use and the privacy notice of this site."
               for kind in ("Copyright notice", "Site footer", "Cookie banner", "Navigation menu") for n in range(25)]


def _document(pool: list[str], rng: random.Random) -> str:
    """3-12 sentences in 1-4 paragraph lines; a third of the documents end with one of 100
    boilerplate lines (each then in ~1/300 of the corpus: far above line_dedup's min_docs)."""
    sents = [rng.choice(pool) for _ in range(rng.randint(3, 12))]
    cuts = sorted(rng.sample(range(1, len(sents)), k=min(len(sents) - 1, rng.randint(0, 3))))
    lines = [" ".join(sents[a:b]) for a, b in zip([0, *cuts], [*cuts, len(sents)])]
    if rng.random() < 1 / 3:
        lines.append(rng.choice(BOILERPLATE))
    return "\n".join(lines)


def build_corpus(corpus: Path, out: Path, docs: int, seed: int = 0) -> dict[str, Any]:
    """JSONL files of `docs` documents and the planted truth (copy id -> original id)."""
    truth_file = out / "truth.json"
    if truth_file.exists():
        return json.loads(truth_file.read_text())
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pool = sentences(corpus)
    recent: list[tuple[str, str]] = []  # a bounded window of earlier documents to copy from
    exact, near = {}, {}
    k, size, fh = 0, 0, open(out / "part-00000.jsonl", "w")
    for i in range(docs):
        r = rng.random()
        doc_id = f"d{i}"
        if r < 0.02 and recent:
            src_id, text = rng.choice(recent)
            exact[doc_id] = src_id
        elif r < 0.04 and recent:
            src_id, text = rng.choice(recent)
            copy = near_copy(text, rng)
            near[doc_id] = [src_id, round(_jaccard(text, copy), 4)]
            text = copy
        else:
            text = _document(pool, rng)
            recent.append((doc_id, text))
            if len(recent) > 20_000:
                recent.pop(rng.randrange(len(recent)))
        line = json.dumps({"id": doc_id, "text": text}) + "\n"
        fh.write(line)
        size += len(line)
        if size >= FILE_BYTES:
            fh.close()
            k, size = k + 1, 0
            fh = open(out / f"part-{k:05d}.jsonl", "w")
    fh.close()
    truth = {"docs": docs, "exact": exact, "near": near,
             "bytes": sum(p.stat().st_size for p in out.glob("part-*.jsonl"))}
    truth_file.write_text(json.dumps(truth))
    return truth


def _jaccard(a: str, b: str) -> float:
    """Exact word-5-shingle Jaccard (the definition the threshold applies to)."""
    sys.path.insert(0, str(SRC))
    from tokenmill.data.config import MinHashConfig
    from tokenmill.data.dedup.minhash import MinHasher, jaccard

    x, y = MinHasher(MinHashConfig(), 0).shingle_sets([a, b])
    return jaccard(x, y)


# --------------------------------------------------------------------------- measuring
class Sampler(threading.Thread):
    """Peak RSS of one process and, separately, of every descendant (and of the processes
    `others()` names: a Ray cluster's task workers), polled every 0.2 s."""

    def __init__(self, pid: int, others: Callable[[], list[int]] = lambda: []):
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.others = others
        self.main_peak = 0
        self.child_peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.main_peak = max(self.main_peak, self.proc.memory_info().rss)
                for child in [*self.proc.children(recursive=True), *map(psutil.Process, self.others())]:
                    try:
                        self.child_peak = max(self.child_peak, child.memory_info().rss)
                    except psutil.Error:
                        pass
            except psutil.Error:
                return
            time.sleep(0.2)


def measured(cmd: list[str], env: dict[str, str], name: str, quiet: bool = False,
             others: Callable[[], list[int]] = lambda: []) -> tuple[float, Sampler]:
    """Run a command to the end under the RSS sampler: (wall seconds, sampler)."""
    t0 = time.time()
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1", **env}, stdout=out, stderr=out)
    sampler = Sampler(proc.pid, others)
    sampler.start()
    rc = proc.wait()
    sampler.stop.set()
    sampler.join()
    if rc:
        raise SystemExit(f"{name} exited {rc}")
    return round(time.time() - t0, 1), sampler


RUNNER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tokenmill.config import CurateConfig, SourceConfig
from tokenmill.data.curate import curate
from tokenmill.runs import EventLog
inputs, out, events, over = Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), json.loads(sys.argv[5])
files = sorted(inputs.glob("part-*.jsonl"))
cfg = CurateConfig.model_validate({"sources": [{"path": str(f), "bucket": "web"} for f in files],
                                   "steps": %s, "workers": 2, "max_removal_share": 0.99, **over})
curate(cfg, out, events=EventLog(events), progress=False)
""" % json.dumps(STEPS)


def run_tokenmill(src: Path, inputs: Path, work: Path, name: str, over: dict[str, Any],
                  env: dict[str, str] | None = None, others: Callable[[], list[int]] = lambda: []) -> dict[str, Any]:
    out, events = work / name / "out", work / name / "events.jsonl"
    subprocess.run(["rm", "-rf", str(work / name)], check=True)
    (work / name).mkdir(parents=True)
    seconds, sampler = measured([sys.executable, "-c", RUNNER, str(src), str(inputs), str(out), str(events), json.dumps(over)],
                                {"PYTHONPATH": str(src), **(env or {})}, name, others=others)
    phases, last = {}, 0.0
    for e in (json.loads(x) for x in events.read_text().splitlines()):
        if e["kind"] in ("phase", "ids"):
            phases[e.get("phase", "ids")] = round(e["seconds"] - last, 2)
            last = e["seconds"]
            if "stage_seconds" in e:
                phases["dedup_stages"] = e["stage_seconds"]
            if "components" in e:
                phases["components"] = e["components"]
        if e["kind"] == "done":
            phases["final"] = round(e["seconds"] - last, 2)
    return {"seconds": seconds, "commit": _commit(src), "phases": phases, "coordinator_peak_mb": round(sampler.main_peak / 2**20, 1),
            "worker_peak_mb": round(sampler.child_peak / 2**20, 1), "out": str(out)}


TOKENIZE_RUNNER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tokenmill.config import RunConfig
from tokenmill.runs import RunDir
from tokenmill.tokenizer.stage import run_tokenizer
from tokenmill.tokens.tokenize import run_tokenize
curated, root, stage = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
cfg = RunConfig.model_validate({"name": "tok", "root": str(root), "tokenizer": {"vocab_size": 8192},
                                "tokenize": {"workers": 2}})
run = RunDir.create(cfg) if not (root / "tok").exists() else RunDir(config=cfg, path=root / "tok")
if not (run.path / "curated").exists():
    (run.path / "curated").symlink_to(curated.resolve())
if len(sys.argv) > 5:  # tokenize with a tokenizer trained before (an A/B of the tokenize stage)
    import shutil
    shutil.copytree(sys.argv[5], run.path / "tokenizer")
t0 = time.time()
stats = run_tokenizer(run) if stage == "tokenizer" else run_tokenize(run)
(root / f"{stage}.json").write_text(json.dumps({"seconds": round(time.time() - t0, 2), "stats": stats}, default=str))
"""


def run_tokenize(src: Path, curated: Path, work: Path, name: str) -> dict[str, Any]:
    """The tokenizer and tokenize stages on a curated output (a run directory whose curated/ is
    that output), under the same RSS sampler: the stages after curation at the same scale."""
    root = work / name
    subprocess.run(["rm", "-rf", str(root)], check=True)
    root.mkdir(parents=True)
    result: dict[str, Any] = {"commit": _commit(src)}
    for stage in ("tokenizer", "tokenize"):
        seconds, sampler = measured([sys.executable, "-c", TOKENIZE_RUNNER, str(src), str(curated), str(root), stage],
                                    {"PYTHONPATH": str(src)}, f"{name} {stage}")
        stats = json.loads((root / f"{stage}.json").read_text())["stats"]
        result[stage] = {"seconds": seconds, "coordinator_peak_mb": round(sampler.main_peak / 2**20, 1),
                         "worker_peak_mb": round(sampler.child_peak / 2**20, 1)}
        if stage == "tokenize":
            result[stage]["tokens"] = sum(sum(v.values()) for v in stats.values() if isinstance(v, dict))
    subprocess.run(["rm", "-rf", str(root / "tok" / "tokens")], check=True)  # GBs at 5M documents
    return result


def tokens_digest(tokens: Path) -> str:
    """xxh3-128 of a token store's content: every shard file's bytes and the metadata that says
    what the split holds (which held-out documents moved to training, tokens per split)."""
    import xxhash

    h = xxhash.xxh3_128()
    meta = json.loads((tokens / "_meta.json").read_text())
    h.update(json.dumps([meta["heldout_moved_to_train"], meta["buckets"]], sort_keys=True).encode())
    for f in sorted(p for p in tokens.rglob("*") if p.is_file() and p.name != "_meta.json"):
        h.update(str(f.relative_to(tokens)).encode())
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()


def tokenize_ab(src: Path, baseline: Path, curated: Path, work: Path, n: int, repeats: int) -> dict[str, Any]:
    """The tokenize stage of `src` and of `baseline` on the same curated output and the same
    tokenizer (trained once, by `src`), in alternating order: wall time, memory, the seconds
    until encoding starts (the held-out duplicate check's share) and a digest of the token store."""
    ref = work / f"tokenize-{n}" / "tok" / "tokenizer"
    if not (ref / "tokenizer.json").exists():
        run_tokenize(src, curated, work, f"tokenize-{n}")
    out: dict[str, Any] = {"tokenmill": [], "baseline": [], "commit": _commit(src), "baseline_commit": _commit(baseline)}
    arms = [("tokenmill", src), ("baseline", baseline)]
    for r in range(repeats):
        for name, arm_src in (arms if r % 2 == 0 else arms[::-1]):
            root = work / f"tokenize-ab-{name}-{n}"
            subprocess.run(["rm", "-rf", str(root)], check=True)
            root.mkdir(parents=True)
            t0 = time.time()
            seconds, sampler = measured([sys.executable, "-c", TOKENIZE_RUNNER, str(arm_src), str(curated), str(root),
                                         "tokenize", str(ref)], {"PYTHONPATH": str(arm_src)}, f"{name} tokenize")
            events = [json.loads(x) for x in (root / "tok" / "events.jsonl").read_text().splitlines() if x]
            layout = next(e["t"] for e in events if e["kind"] == "layout")
            check = next((e for e in events if e["kind"] == "heldout_check"), None)
            out[name].append({"seconds": seconds, "until_encoding_s": round(layout - t0, 1),
                              "heldout_check_s": check["seconds"] if check else None,
                              "heldout_processes": check["processes"] if check else 1,
                              "heldout_phases": check.get("phases") if check else None,
                              "coordinator_peak_mb": round(sampler.main_peak / 2**20, 1),
                              "worker_peak_mb": round(sampler.child_peak / 2**20, 1),
                              "digest": tokens_digest(root / "tok" / "tokens")})
            subprocess.run(["rm", "-rf", str(root)], check=True)
            print(json.dumps({name: out[name][-1]}), flush=True)
    out["identical_output"] = len({x["digest"] for arm in ("tokenmill", "baseline") for x in out[arm]}) == 1
    return out


def quality(out: Path, truth: dict[str, Any]) -> dict[str, Any]:
    import pyarrow.parquet as pq

    rejected = pq.read_table(out / "_rejected", columns=["id", "rule"]).to_pylist() if (out / "_rejected").exists() else []
    by_rule: dict[str, set[str]] = {}
    for r in rejected:
        by_rule.setdefault(r["rule"], set()).add(r["id"])
    removed = by_rule.get("near_duplicate_of", set()) | by_rule.get("duplicate_of", set())
    return {**_scores(removed, truth), "exact_recall": round(len(set(truth["exact"]) & by_rule.get("duplicate_of", set()))
                                                            / max(len(truth["exact"]), 1), 5)}


def _scores(removed: set[str], truth: dict[str, Any]) -> dict[str, Any]:
    """Near-duplicate recall over the planted copies at or above the threshold (J >= 0.8, the
    definition), and precision: removed documents that are planted copies of any kind."""
    above = {d for d, (_, j) in truth["near"].items() if j >= 0.8}
    planted = set(truth["near"]) | set(truth["exact"])
    return {"near_recall": round(len(above & removed) / max(len(above), 1), 5),
            "precision": round(len(removed & planted) / max(len(removed), 1), 5), "removed": len(removed),
            "planted_near_at_threshold": len(above)}


# --------------------------------------------------------------------------- a Ray cluster
def run_on_cluster(src: Path, inputs: Path, work: Path, n: int, over: dict[str, Any], kill_after: float | None) -> dict[str, Any]:
    """The tokenmill arm on a two-node Ray cluster of this machine (tests/data/ray_cluster.py),
    the second node SIGKILLed `kill_after` seconds in when given."""
    sys.path.insert(0, str(HERE.parent))
    from tests.data.ray_cluster import ray_cluster

    name = f"ray-{'kill-' if kill_after else ''}{n}"
    with ray_cluster() as cluster:
        workers = lambda: [p for node in (cluster.head, cluster.worker) for p in node.pids()  # noqa: E731
                           if node.alive() and _is_task_worker(p)]
        killer = None
        if kill_after:
            killer = threading.Timer(kill_after, cluster.worker.kill)
            killer.start()
        result = run_tokenmill(src, inputs, work, name, {**over, "executor": "ray"},
                               {**cluster.env, "RAY_ADDRESS": cluster.address}, others=workers)
        if killer is not None:
            killer.cancel()
            result["node_killed_at_s"] = kill_after if not cluster.worker.alive() else None
    return result


def _is_task_worker(pid: int) -> bool:
    """Ray titles its task worker processes `ray::<task>` (`ray::IDLE` between tasks)."""
    try:
        return " ".join(psutil.Process(pid).cmdline()).startswith("ray::")
    except psutil.Error:
        return False


# --------------------------------------------------------------------------- datatrove
DATATROVE = r"""
import sys
from pathlib import Path
import xxhash
import datatrove.utils.hashes.xxhash as dt_xxhash
# datatrove 0.10.1 hashes str; xxhash >= 4 takes bytes only: encode first (what xxhash 3 did inside)
dt_xxhash.xxhash64 = lambda d, h=xxhash.xxh64_intdigest: h(d.encode("utf-8") if isinstance(d, str) else d)
dt_xxhash.xxhash32 = lambda d, h=xxhash.xxh32_intdigest: h(d.encode("utf-8") if isinstance(d, str) else d)
from datatrove.executor.local import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                              MinhashDedupFilter, MinhashDedupSignature)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
inputs, work = sys.argv[1], Path(sys.argv[2])
cfg = MinhashConfig()
tasks = len(list(Path(inputs).glob("part-*.jsonl")))
read = lambda: JsonlReader(inputs, glob_pattern="part-*.jsonl", id_key="id")
LocalPipelineExecutor([read(), MinhashDedupSignature(output_folder=str(work / "sigs"), config=cfg)],
                      tasks=tasks, workers=2, logging_dir=str(work / "logs1")).run()
LocalPipelineExecutor([MinhashDedupBuckets(input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=cfg)],
                      tasks=cfg.num_buckets, workers=2, logging_dir=str(work / "logs2")).run()
LocalPipelineExecutor([MinhashDedupCluster(input_folder=str(work / "buckets"), output_folder=str(work / "remove"), config=cfg)],
                      tasks=1, logging_dir=str(work / "logs3")).run()
LocalPipelineExecutor([read(), MinhashDedupFilter(input_folder=str(work / "remove"), exclusion_writer=JsonlWriter(str(work / "removed"))),
                       JsonlWriter(str(work / "kept"))], tasks=tasks, workers=2, logging_dir=str(work / "logs4")).run()
"""


def run_datatrove(inputs: Path, work: Path, truth: dict[str, Any]) -> dict[str, Any]:
    import gzip

    d = work / "datatrove"
    subprocess.run(["rm", "-rf", str(d)], check=True)
    d.mkdir(parents=True)
    seconds, sampler = measured([sys.executable, "-c", DATATROVE, str(inputs), str(d)], {}, "datatrove", quiet=True)
    removed = set()
    for p in (d / "removed").rglob("*.jsonl.gz"):
        with gzip.open(p, "rt") as fh:
            removed |= {json.loads(x)["id"] for x in fh}
    return {"seconds": seconds, "coordinator_peak_mb": round(sampler.main_peak / 2**20, 1),
            "worker_peak_mb": round(sampler.child_peak / 2**20, 1), **_scores(removed, truth),
            "exact_recall": round(len(set(truth["exact"]) & removed) / max(len(truth["exact"]), 1), 5)}


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--docs", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--work", type=Path, default=Path("/tmp/dedup-bench"))
    ap.add_argument("--src", type=Path, default=SRC, help="src/ of the tokenmill under test (a frozen worktree: edits to this tree mid-run would leak in)")
    ap.add_argument("--baseline-src", type=Path, help="src/ of the implementation to compare with (same docs, interleaved)")
    ap.add_argument("--repeats", type=int, default=1, help="local runs of each of tokenmill and the baseline, in alternating order (0: none)")
    ap.add_argument("--datatrove", action="store_true")
    ap.add_argument("--memory-per-task", type=int, default=None)
    ap.add_argument("--ray-cluster", action="store_true", help="also run on a two-node Ray cluster of this machine")
    ap.add_argument("--kill-node-after", type=float, help="and again, SIGKILLing the second node this many seconds in")
    ap.add_argument("--json", type=Path, help="results file; rewritten after every arm, an earlier file's other sizes kept")
    ap.add_argument("--partitioned-components", type=int, metavar="EDGES",
                    help="also a tokenmill arm whose components run in partitioned rounds of EDGES per task")
    ap.add_argument("--tokenize", action="store_true", help="then the tokenizer and tokenize stages on the tokenmill arm's output")
    ap.add_argument("--substring", action="store_true",
                    help="also a tokenmill arm with substring_dedup after the other steps (its defaults: word units, k = 50)")
    ap.add_argument("--tokenize-baseline", type=Path, metavar="SRC",
                    help="then the tokenize stage of --src and of SRC (a frozen worktree's src/), interleaved, on the tokenmill arm's output")
    ap.add_argument("--tokenize-repeats", type=int, default=2)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="curate.KEY=VALUE (JSON value) for the tokenmill arms")
    args = ap.parse_args()
    results = {"command": " ".join(sys.argv), "commit": _commit(args.src), "machine": _machine(), "runs": [],
               "provenance": provenance(where=args.src)}
    load = LoadSampler(interval=2.0)
    load.start()  # the arms are this process's children: what it counts is everything else
    if args.json and args.json.exists():
        results["runs"] = json.loads(args.json.read_text())["runs"]
    for n in args.docs:
        inputs = args.work / f"corpus-v2-{n}"
        truth = build_corpus(args.corpus, inputs, n)
        over = {"memory_per_task": args.memory_per_task} if args.memory_per_task else {}
        over.update({k.removeprefix("curate."): json.loads(v) for k, v in (x.split("=", 1) for x in args.sets)})
        # a rerun of some arms keeps the other arms' results for this size (each arm names its commit)
        entry = next((r for r in results["runs"] if r["docs"] == n), None) or {}
        results["runs"] = [r for r in results["runs"] if r["docs"] != n] + [entry]
        entry.update({"command": results["command"], "commit": results["commit"], "docs": n, "bytes": truth["bytes"],
                      "planted_exact": len(truth["exact"]), "planted_near": len(truth["near"]), "load_before": os.getloadavg()})

        def save() -> None:
            entry["load_after"] = os.getloadavg()
            entry["others_load"] = load.summary()  # since the benchmark started
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
            print(json.dumps(entry, indent=1), flush=True)

        arms = [("tokenmill", args.src, over)] + ([("baseline", args.baseline_src, {})] if args.baseline_src else [])
        for name, _, _ in arms if args.repeats else []:
            entry.pop(f"{name}_runs", None)
        for r in range(args.repeats):
            for name, src, extra in (arms if r % 2 == 0 else arms[::-1]):  # A/B, then B/A
                res = run_tokenmill(src, inputs, args.work, f"{name}-{n}", extra)
                entry.setdefault(f"{name}_runs", []).append({**res, **quality(Path(res.pop("out")), truth)})
                entry[name] = _median_run(entry[f"{name}_runs"])
            if args.baseline_src:
                entry["identical_output"] = _same_output(args.work / f"tokenmill-{n}" / "out", args.work / f"baseline-{n}" / "out")
            save()
        if args.partitioned_components:
            res = run_tokenmill(args.src, inputs, args.work, f"partitioned-cc-{n}",
                                {**over, "component_edges_per_task": args.partitioned_components})
            out = Path(res.pop("out"))
            entry["partitioned_components"] = {**res, **quality(out, truth), "identical_output": _same_output(
                out, args.work / f"tokenmill-{n}" / "out")}
            save()
        if args.substring:
            res = run_tokenmill(args.src, inputs, args.work, f"substring-{n}",
                                {**over, "steps": [*STEPS, "substring_dedup"], "substring_dedup": {"enabled": True}})
            out = Path(res.pop("out"))
            entry["substring"] = {**res, **quality(out, truth), "funnel": json.loads((out / "_funnel.json").read_text())}
            save()
        if args.tokenize:
            entry["tokenize"] = run_tokenize(args.src, args.work / f"tokenmill-{n}" / "out", args.work, f"tokenize-{n}")
            save()
        if args.tokenize_baseline:
            entry["tokenize_ab"] = tokenize_ab(args.src, args.tokenize_baseline, args.work / f"tokenmill-{n}" / "out",
                                               args.work, n, args.tokenize_repeats)
            save()
        cluster_arms = [("ray_cluster", None)] if args.ray_cluster else []
        cluster_arms += [("ray_cluster_node_lost", args.kill_node_after)] if args.kill_node_after else []
        for key, kill_after in cluster_arms:
            ray = run_on_cluster(args.src, inputs, args.work, n, over, kill_after)
            out = Path(ray.pop("out"))
            entry[key] = {**ray, **quality(out, truth), "identical_output": _same_output(out, args.work / f"tokenmill-{n}" / "out")}
            save()
        if args.datatrove:
            entry["datatrove"] = run_datatrove(inputs, args.work, truth)
            save()


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median wall time and phase times over repeats; the largest peak memory of any."""
    med = dict(runs[0])
    med["seconds"] = float(np.median([r["seconds"] for r in runs]))
    med["phases"] = {p: float(np.median([r["phases"][p] for r in runs])) for p in runs[0]["phases"]
                     if not isinstance(runs[0]["phases"][p], dict)}
    for key in ("coordinator_peak_mb", "worker_peak_mb"):
        med[key] = max(r[key] for r in runs)
    med["repeats"] = len(runs)
    return med


def _same_output(a: Path, b: Path) -> bool:
    """Every output file the same: kept and rejected rows part by part (one part in memory at
    a time), the funnel and the other JSON files."""
    import pyarrow.parquet as pq

    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    if names != sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()):
        return False
    for name in names:
        if name.suffix == ".parquet":
            if not pq.read_table(a / name).equals(pq.read_table(b / name)):
                return False
        elif json.loads((a / name).read_text()) != json.loads((b / name).read_text()):
            return False
    return True


def _commit(src: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=src).stdout.strip()


def _machine() -> dict[str, Any]:
    import pyarrow

    return {"cpus": os.cpu_count(), "python": platform.python_version(), "pyarrow": pyarrow.__version__,
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1), "platform": platform.platform()}


if __name__ == "__main__":
    main()
