"""The classify step on real formats: held-out accuracy on files never trained on, and its cost.

    PYTHONPATH=src python benchmarks/bench_classify.py [--labels benchmarks/labels/topic_format.jsonl]

Labels: benchmarks/labels/topic_format.jsonl (benchmarks/build_topic_labels.py: book, code,
manual, dictionary, mail passages of the real corpora, each with the file it came from). The
split is by file, not by passage: in each class, every HOLDOUT_FILE_EVERY-th file (sorted by
path) is held out with all its passages, so a held-out passage never shares a file with a
training passage (the dictionary class has four files: one, jargon, is held out whole).

Two measurements on the same split:
  model   data/classifiers/multiclass.py trained on the training files' passages (normalized as
          the step does); accuracy, one-vs-rest AUC per class and macro, confusion matrix on the
          held-out files; training seconds; scoring cost per document (tokenize + features +
          probabilities, one document at a time as a worker does).
  curate  the real `curate` stage: the training passages are the classifier's labelled file
          (action bucket, label -> bucket of the same name), the held-out passages a JSONL
          source; the share of held-out documents that land in their own label's bucket.

Writes benchmarks/results/classify_topic.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import LoadSampler, provenance  # noqa: E402

from tokenmill.data.classifiers import linear_classifier as lc  # noqa: E402
from tokenmill.data.classifiers import multiclass as mc  # noqa: E402
from tokenmill.data.classifiers.ngram_lm import tokenize  # noqa: E402
from tokenmill.data.config import CurateConfig  # noqa: E402
from tokenmill.data.curate import curate  # noqa: E402
from tokenmill.data.steps.normalize import normalize_text  # noqa: E402

HERE = Path(__file__).resolve().parent
HOLDOUT_FILE_EVERY = 4


def split_by_file(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """(training records, held-out records): every HOLDOUT_FILE_EVERY-th file of each class held out."""
    held_files = set()
    for label in sorted({r["label"] for r in records}):
        files = sorted({r["file"] for r in records if r["label"] == label})
        held_files |= {f for i, f in enumerate(files) if i % HOLDOUT_FILE_EVERY == HOLDOUT_FILE_EVERY - 1}
    return [r for r in records if r["file"] not in held_files], [r for r in records if r["file"] in held_files]


def measure_model(train: list[dict], test: list[dict]) -> dict:
    t = time.perf_counter()
    feats = [lc.features(tokenize(normalize_text(r["text"])), mc.DIM_BITS) for r in train]
    model = mc.fit(feats, [r["label"] for r in train])
    train_s = time.perf_counter() - t
    texts = [normalize_text(r["text"]) for r in test]
    t = time.perf_counter()
    for text in texts:
        model.predict_proba(tokenize(text))
    per_doc_us = (time.perf_counter() - t) / len(texts) * 1e6
    report = mc.evaluate(model, [lc.features(tokenize(x), mc.DIM_BITS) for x in texts], [r["label"] for r in test])
    return {"train_seconds": round(train_s, 3), "score_us_per_doc": round(per_doc_us, 1), **report}


def measure_curate(train: list[dict], test: list[dict], workdir: Path) -> dict:
    """Route the held-out passages with the real curate stage; count them in their own bucket."""
    labels = sorted({r["label"] for r in train})
    (workdir / "labels.jsonl").write_text("".join(json.dumps({"text": r["text"], "label": r["label"]}) + "\n" for r in train))
    (workdir / "in").mkdir()
    (workdir / "in" / "held_out.jsonl").write_text(
        "".join(json.dumps({"id": f"h{i}", "text": r["text"], "label": r["label"]}) + "\n" for i, r in enumerate(test))
    )
    cfg = CurateConfig(
        sources=[{"kind": "files", "path": str(workdir / "in"), "bucket": "unsorted"}],
        steps=["normalize", "classify"],
        classify=[{"name": "format", "labelled": "labels.jsonl", "action": "bucket", "buckets": {x: x for x in labels}}],
        workers=2,
    )
    t = time.perf_counter()
    summary = curate(cfg, workdir / "out", base_dir=workdir, progress=False)
    seconds = time.perf_counter() - t
    truth = {f"h{i}": r["label"] for i, r in enumerate(test)}
    right, placed = 0, Counter()
    for bucket in summary["buckets"]:
        for doc_id in pq.read_table(workdir / "out" / bucket, columns=["id"]).column("id").to_pylist():
            placed[(truth[doc_id], bucket)] += 1
            right += truth[doc_id] == bucket
    n = sum(placed.values())
    return {
        "docs_in": len(test),
        "docs_out": n,
        "routed_accuracy": round(right / n, 4),
        "buckets": summary["buckets"],
        "placed": {f"{t}->{b}": c for (t, b), c in sorted(placed.items())},
        "curate_seconds": round(seconds, 2),
        "classify_report": json.loads((workdir / "out" / "_classify.json").read_text())["format"]["held_out"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=Path, default=HERE / "labels" / "topic_format.jsonl")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "classify_topic.json")
    args = ap.parse_args()
    prov = provenance()
    records = [json.loads(line) for line in args.labels.read_text().splitlines() if line.strip()]
    train, test = split_by_file(records)
    with LoadSampler() as load, tempfile.TemporaryDirectory() as tmp:
        model = measure_model(train, test)
        routed = measure_curate(train, test, Path(tmp))
    result = {
        **prov,
        "load": load.summary(),
        "labels": str(args.labels.relative_to(HERE.parent)) if args.labels.is_relative_to(HERE.parent) else str(args.labels),
        "split": f"by file: every {HOLDOUT_FILE_EVERY}th file of each class (sorted) held out",
        "train": {"passages": len(train), "files": len({r['file'] for r in train}), "per_class": dict(Counter(r["label"] for r in train))},
        "held_out": {"passages": len(test), "files": len({r["file"] for r in test}),
                     "per_class": dict(Counter(r["label"] for r in test)),
                     "files_per_class": {c: len({r["file"] for r in test if r["label"] == c}) for c in sorted({r["label"] for r in test})}},
        "model": model,
        "curate": routed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"accuracy": model["accuracy"], "macro_auc": model["macro_auc"], "routed_accuracy": routed["routed_accuracy"],
                      "score_us_per_doc": model["score_us_per_doc"], "train_seconds": model["train_seconds"]}))


if __name__ == "__main__":
    main()
