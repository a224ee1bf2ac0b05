"""Cost per document of each curation gate of issue 44, side by side on the same real documents.

Gates, each a real DocStep configured as a user would configure it:

  license            license policy `require: [training]`: a lookup per document (half the documents MIT,
                     half `unknown`, which grants nothing and is rejected)
  classify           the five-format topic classifier of benchmarks/labels/topic_format.jsonl (action tag)
  safety: word list  the built-in toxicity list alone
  safety: layered    the list plus the classifier trained on benchmarks/labels/toxicity_train.jsonl for
                     its uncertain band (the default band [0.005, 0.25])
  pii: six patterns  email, phone, ip, card, iban, national_id
  pii: default       the six plus person names and postal addresses
  quality: defaults  every quality signal and its kind's rule families (issue 55)
  garbled words      the garbled-word signal alone (data/steps/garble.py, issue 55), part of the
                     quality row: what the generalizing signal of issue 55 adds per document

Documents: the plain-text files of /work/real_corpora that bench_doc_steps.py uses (books, Debian
docs, fortunes, changelogs, CPython code), each file one document cut at --max-chars. Training the
classifiers happens once, before timing, and is reported apart. Every gate runs on its own copy of
the documents, in one process (one core); rounds are interleaved (gate A, B, …, A, B, …) so a
burst of load from other processes hits every gate alike, and the median round is reported.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_gate_costs.py [--max-docs 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_doc_steps import documents  # noqa: E402
from provenance import LoadSampler, provenance  # noqa: E402

from tokenmill.config import CurateConfig  # noqa: E402
from tokenmill.data.document import Doc  # noqa: E402
from tokenmill.data.step import DocStep  # noqa: E402
from tokenmill.data.steps.classify import Classify  # noqa: E402
from tokenmill.data.steps.license import License  # noqa: E402
from tokenmill.data.document import Rejection  # noqa: E402
from tokenmill.data.steps.garble import near_miss_word_frac  # noqa: E402
from tokenmill.data.steps.pii import Pii  # noqa: E402
from tokenmill.data.steps.quality import Quality  # noqa: E402
from tokenmill.data.steps.safety import Safety  # noqa: E402

LABELS = HERE / "labels"
SIX_PATTERNS = ["email", "phone", "ip", "card", "iban", "national_id"]


class GarbledWords(DocStep):
    """The garbled-word signal alone, on the words the quality step splits a text into."""

    name = "quality"
    version = "garble-signal"

    def process(self, doc: Doc) -> Rejection | None:
        near_miss_word_frac((doc.text or "").split())
        return None


def gates() -> list[tuple[str, type[DocStep], dict[str, Any]]]:
    """(name, step class, curate config) of every gate, in the order the table shows them."""
    no_skip = {"skip_buckets": []}
    return [
        ("license", License, {"license_policy": {"require": ["training"]}}),
        ("classify", Classify, {"classify": [{"name": "format", "labelled": str(LABELS / "topic_format.jsonl"), "action": "tag"}]}),
        ("safety: word list", Safety, {"safety": no_skip}),
        ("safety: layered", Safety, {"safety": {**no_skip, "labelled": str(LABELS / "toxicity_train.jsonl")}}),
        ("pii: six patterns", Pii, {"pii": {"kinds": SIX_PATTERNS}}),
        ("pii: default", Pii, {"pii": {}}),
        ("quality: defaults", Quality, {}),
        ("garbled words", GarbledWords, {}),
    ]


def prepared(cls: type[DocStep], cfg: dict[str, Any], work: Path) -> tuple[DocStep, float]:
    """The step ready to process documents, and the seconds its driver-side preparation took
    (training, for the two classifier gates)."""
    step = cls(CurateConfig(**cfg))
    t0 = time.perf_counter()
    step.prepare(work)
    seconds = time.perf_counter() - t0
    step.setup(work)
    return step, seconds


def one_round(step: DocStep, docs: list[Doc]) -> tuple[float, int]:
    """Seconds to run the step over fresh copies of the documents, and how many it applied to."""
    batch = [copy.copy(d) for d in docs]
    applied = 0
    t0 = time.perf_counter()
    for d in batch:
        if step.applies(d):
            step.process(d)
            applied += 1
    return time.perf_counter() - t0, applied


def measure(docs: list[Doc], rounds: int, work: Path) -> dict[str, Any]:
    steps = {name: prepared(cls, cfg, work / name.replace(":", "").replace(" ", "_")) for name, cls, cfg in gates()}
    for step, _ in steps.values():  # warm-up: first-call costs (regex compilation, page faults) are not per document
        one_round(step, docs[:20])
    times: dict[str, list[float]] = {name: [] for name in steps}
    applied: dict[str, int] = {}
    for _ in range(rounds):
        for name, (step, _) in steps.items():
            seconds, applied[name] = one_round(step, docs)
            times[name].append(seconds)
    mb = sum(len((d.text or "").encode("utf-8")) for d in docs) / 1e6
    out = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        out[name] = {
            "us_per_doc": round(1e6 * med / len(docs), 2),
            "mb_per_s": round(mb / med, 2),
            "round_seconds": [round(t, 4) for t in ts],
            "applied": applied[name],
            "prepare_seconds": round(steps[name][1], 3),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-docs", type=int, default=1000)
    ap.add_argument("--max-chars", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "gate_costs.json")
    args = ap.parse_args()
    prov = provenance()
    docs = documents(args.max_docs, args.max_chars)
    for i, d in enumerate(docs):  # half permissive, half unknown: the license gate both keeps and rejects
        d.license = "MIT" if i % 2 else "unknown"
    with LoadSampler() as load, tempfile.TemporaryDirectory() as tmp:
        gates_out = measure(docs, args.rounds, Path(tmp))
    result = {
        **prov,
        "load": load.summary(),
        "documents": {"count": len(docs), "mb": round(sum(len((d.text or "").encode()) for d in docs) / 1e6, 2),
                      "max_chars": args.max_chars, "patterns": "bench_doc_steps.PATTERNS"},
        "rounds": args.rounds,
        "gates": gates_out,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, g in gates_out.items():
        print(f"{name:20s} {g['us_per_doc']:10.1f} µs/doc {g['mb_per_s']:8.1f} MB/s  applied {g['applied']}")


if __name__ == "__main__":
    main()
