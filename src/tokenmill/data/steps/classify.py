"""Classify: named classifiers learned from the user's labelled texts tag, filter or bucket documents.

Classifiers for topic, format, code and math (Llama 3's domain buckets, Dubey et al. 2024); buckets
by topic feed the mixture. No pretrained classifier can be downloaded here, so every
classifier of `curate.classify` is trained by tokenmill from a JSONL file the user brings
({"text": ..., "label": ...}, two or more labels): softmax regression over hashed word
uni+bigrams (data/classifiers/multiclass.py). Texts are normalized like the documents first.

Training runs once, in the driver (`prepare`), and is cached: `<work>/classify/<name>.npz` (plain
arrays, read with allow_pickle=False) and `<name>.json` (the cache key and the held-out metrics).
The key is the sha256 of the labelled file's bytes, the training knobs and the normalize config;
the action's fields (remove, buckets, min_probability) are not in it, so changing what is done
with the labels never retrains. curate publishes the models and metrics in `curated/_classify/`
and `curated/_classify.json`, and seeds the next run's work directory from them: a second run
with the same file and knobs does not retrain. About one text in `holdout_every` (by hash of the
text, so the split does not depend on the file's order) is held out; _classify.json gives its
accuracy, one-vs-rest AUC per class, macro AUC and confusion matrix.

Per document, every classifier whose skip_buckets do not hold the document scores it (a sum in
a fixed order over the document's own features: the same bytes for any worker count) and
records {label, probability, probs} under its name in the row's `classes` column. Then by
action: `tag` only records; `filter` removes a document whose label is in `remove` with
probability >= min_probability (rule "<name>:<label>", the probability as the value); `bucket`
moves the document to `buckets[label]` (a label not listed keeps its bucket). Classifiers run in
config order, so a later one sees the bucket an earlier one gave. The bucket step (bucket_rules)
runs after every other step: a rule that matches still overrides a classifier's bucket; a
document no rule matches keeps it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

from tokenmill import json_limits
from tokenmill.data.classifiers import linear_classifier as lc
from tokenmill.data.classifiers import multiclass as mc
from tokenmill.data.classifiers.ngram_lm import tokenize
from tokenmill.data.config import ClassifierConfig, CurateConfig
from tokenmill.data.document import Doc, Rejection, format_value
from tokenmill.data import labelled as lb
from tokenmill.data.step import DocStep
from tokenmill.data.steps.model_quality import read_npz, write_npz
from tokenmill.data.steps.normalize import normalize_text
from tokenmill.errors import UserError

VERSION = f"1+mc-{mc.VERSION}"
SUBDIR = "classify"
# Fields of a ClassifierConfig that shape the model; the others only say what to do with its labels.
TRAINING_FIELDS = ("labelled", "holdout_every", "dim_bits", "epochs", "seed", "max_examples")


class ClassifyLabelsError(UserError, ValueError):
    """A classifier's labelled file that cannot be used; the message names the file (and line)."""


def read_labelled(path: Path, c: ClassifierConfig, mojibake: bool, max_line_bytes: int) -> lb.Sample:
    """The training sample of a labelled JSONL file, streamed (data/labelled.py): at most
    `c.max_examples` texts per label, normalized like the documents and kept as features. Any bad
    line, an empty file or a single label is an error naming the file and the line."""
    where = f"classify {c.name!r}: {path}"
    if not path.is_file():
        raise ClassifyLabelsError(f"{where}: labelled file not found")

    def records() -> Iterator[tuple[int, str, str]]:
        for lineno, rec in lb.labelled_records(path, max_line_bytes, ClassifyLabelsError):
            text, label = rec.get("text"), rec.get("label")
            if not isinstance(text, str) or not isinstance(label, (str, int)) or isinstance(label, bool) or label == "":
                raise ClassifyLabelsError(f"{where}:{lineno}: needs a string 'text' and a non-empty 'label' (string or integer)")
            yield lineno, normalize_text(text, mojibake=mojibake), str(label)

    featurize = lambda text: lc.features(tokenize(text), c.dim_bits)  # noqa: E731
    held = lambda text: mc.held_out(text, c.holdout_every)  # noqa: E731
    sample = lb.bottom_k(records(), c.max_examples, featurize, held, ClassifyLabelsError, where)
    if len(sample.counts) < 2:
        raise ClassifyLabelsError(f"{where}: needs two or more labels, found {sorted(sample.counts) or 'no records'}")
    return sample


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def train(sample: lb.Sample, c: ClassifierConfig) -> tuple[mc.MulticlassClassifier, dict[str, Any]]:
    """Fit on the sampled texts not held out; the held-out texts' metrics."""
    examples, labels = lb.in_file_order(sample.kept, sorted(sample.kept))
    train_x = [e.features for e in examples if not e.held]
    train_y = [y for e, y in zip(examples, labels) if not e.held]
    missing = sorted(set(labels) - set(train_y))
    if missing:
        raise ClassifyLabelsError(
            f"classify {c.name!r}: {c.labelled}: no training text left for label(s) {missing} (too few examples)"
        )
    model = mc.fit(train_x, train_y, dim_bits=c.dim_bits, epochs=c.epochs, seed=c.seed)
    report = mc.evaluate(model, [e.features for e in examples if e.held], [y for e, y in zip(examples, labels) if e.held])
    counts = {label: sample.counts[label] for label in model.labels}
    stats = {"examples": sample.examples(), "sampled": len(examples), "train_examples": len(train_x), "label_counts": counts}
    return model, {**stats, "held_out": report}


def _check_labels(c: ClassifierConfig, known: list[str]) -> None:
    """A label named in `remove` or `buckets` that the file does not have is a typo, not a no-op."""
    unknown = sorted((set(c.remove) | set(c.buckets)) - set(known))
    if unknown:
        raise ClassifyLabelsError(f"classify {c.name!r}: label(s) {unknown} are not in {c.labelled}; its labels are {known}")


class Classify(DocStep):
    """Scores documents with every configured classifier; tags, removes or re-buckets them by action."""

    name = "classify"
    version = VERSION

    def __init__(self, cfg: CurateConfig, base_dir: Path | None = None):
        super().__init__(cfg, base_dir)
        self.models: dict[str, mc.MulticlassClassifier] = {}
        self.trained: dict[str, bool] = {}  # name -> whether the last prepare trained it (False: cached)

    def enabled(self) -> bool:
        return bool(self.cfg.classify)

    def cache_key(self, c: ClassifierConfig) -> str:
        path = self.resolve(c.labelled)
        if not path.is_file():
            raise ClassifyLabelsError(f"classify {c.name!r}: {path}: labelled file not found")
        knobs = {f: getattr(c, f) for f in TRAINING_FIELDS if f != "labelled"}
        blob = {
            "version": VERSION,
            "sha256": _sha256(path),
            "knobs": knobs,
            "normalize": self.cfg.normalize.model_dump(mode="json"),
        }
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()

    def prepare(self, work_dir: Path) -> None:
        """Train each classifier whose cached model is missing or has another key."""
        out = Path(work_dir) / SUBDIR
        out.mkdir(parents=True, exist_ok=True)
        for c in self.cfg.classify:
            key, meta_path = self.cache_key(c), out / f"{c.name}.json"
            old = json_limits.load_file(meta_path) if meta_path.is_file() else {}
            if old.get("key") == key and (out / f"{c.name}.npz").is_file():
                self.trained[c.name] = False
                _check_labels(c, old["labels"])
                continue
            meta_path.unlink(missing_ok=True)  # a run killed mid-way retrains, never trusts an old key
            sample = read_labelled(self.resolve(c.labelled), c, self.cfg.normalize.fix_mojibake, self.cfg.max_doc_bytes)
            model, report = train(sample, c)
            _check_labels(c, model.labels)
            write_npz(out / f"{c.name}.npz", model.to_arrays())
            meta = {"key": key, "labelled": c.labelled, "labels": model.labels, **report}
            tmp = meta_path.with_name(meta_path.name + ".tmp")
            tmp.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, meta_path)
            self.trained[c.name] = True

    def setup(self, work_dir: Path) -> None:
        out = Path(work_dir) / SUBDIR
        for c in self.cfg.classify:
            if not (out / f"{c.name}.json").is_file():
                raise FileNotFoundError(f"{out / c.name}.json: classifier not trained; Classify.prepare must run first")
            self.models[c.name] = mc.MulticlassClassifier.from_arrays(read_npz(out / f"{c.name}.npz"))

    def process(self, doc: Doc) -> Rejection | None:
        tokens: list[str] | None = None
        for c in self.cfg.classify:
            if doc.bucket in c.skip_buckets:
                continue
            model = self.models[c.name]
            tokens = tokens if tokens is not None else tokenize(doc.text or "")
            probs = model.predict_proba(tokens)
            best = int(probs.argmax())
            label, p = model.labels[best], float(probs[best])
            doc.classes = {
                **(doc.classes or {}),
                c.name: {"label": label, "probability": p, "probs": dict(zip(model.labels, map(float, probs)))},
            }
            if c.action == "filter" and label in c.remove and p >= c.min_probability:
                return Rejection(
                    self.name,
                    f"{c.name}:{label}",
                    format_value(p),
                    f"classifier {c.name!r} says {label!r} with probability {format_value(p)} >= {c.min_probability}",
                )
            if c.action == "bucket":
                doc.bucket = c.buckets.get(label, doc.bucket)
        return None


MODELS_DIR = "_classify"  # under curated/: each classifier's .npz and .json, the next run's cache
REPORT_FILE = "_classify.json"  # under curated/: what each classifier learned and how well


def seed_cache(cfg: CurateConfig, out: Path, work_dir: Path) -> None:
    """Copy the models a previous run published in `out` into the work directory where prepare
    looks for them (prepare still checks their keys); a work directory's own copy wins."""
    published, cache = out / MODELS_DIR, Path(work_dir) / SUBDIR
    for c in cfg.classify:
        meta, npz = published / f"{c.name}.json", published / f"{c.name}.npz"
        if meta.is_file() and npz.is_file() and not (cache / meta.name).is_file():
            cache.mkdir(parents=True, exist_ok=True)
            (cache / npz.name).write_bytes(npz.read_bytes())
            (cache / meta.name).write_bytes(meta.read_bytes())  # last: prepare trusts a model only with its .json


def publish(cfg: CurateConfig, work_dir: Path, final: Path, trained: dict[str, bool]) -> None:
    """Write curated/_classify.json (metrics, and whether this run trained each classifier) and
    the models under curated/_classify/."""
    if not cfg.classify:
        return
    cache, models = Path(work_dir) / SUBDIR, final / MODELS_DIR
    models.mkdir(parents=True, exist_ok=True)
    report = {}
    for c in cfg.classify:
        for ext in ("npz", "json"):
            (models / f"{c.name}.{ext}").write_bytes((cache / f"{c.name}.{ext}").read_bytes())
        meta = json_limits.load_file((cache / f"{c.name}.json"))
        report[c.name] = {**meta, "action": c.action, "trained_this_run": trained.get(c.name, False)}
    tmp = final / (REPORT_FILE + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, final / REPORT_FILE)


def labelled_digests(cfg: CurateConfig, base_dir: Path) -> dict[str, str | None]:
    """sha256 of each classifier's labelled file (None: missing, prepare says so): part of the run's
    fingerprint, so a file edited between a killed run and its resume starts the run over instead
    of mixing documents scored by two models."""
    step = Classify(cfg, base_dir)
    return {c.name: _sha256(p) if (p := step.resolve(c.labelled)).is_file() else None for c in cfg.classify}
