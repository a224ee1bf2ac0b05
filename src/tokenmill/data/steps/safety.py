"""Toxicity in layers: a word list first, a classifier trained here for the documents it is unsure of.

First pass. The built-in list (resources/toxicity_en.txt, English) holds only unambiguous
obscenities and slurs, matched as whole lowercased words, with every inflection listed: no prefix
or substring matching, and no word that has a common medical, legal, literary or religious sense.
The real danger of a toxicity filter is not missing a few dirty samples but deleting entire
classes of valuable text (Dodge et al. 2021, "Documenting Large Webtext Corpora") — medicine, law, crime news, fiction and code comments are full of
sensitive words, so what the list leaves out matters as much as what it holds; `tokenmill
curate-eval safety` (data.curate_eval.eval_safety) measures false positives per slice on a
labelled file. A user list (`SafetyConfig.word_list`) replaces the built-in one, same format.
Words are maximal runs of letters (apostrophes inside kept: "don't"); the score is the share of
a document's words that are listed, in [0, 1]. C4 removed any page containing one word of its
list; a share with a threshold (default 0.02, one word in fifty) tolerates the occasional
quoted insult in news or fiction. Alone, the step removes documents above the threshold (rule
"toxicity").

Second pass (a lightweight text classifier), with `safety.labelled`: a JSONL
file of {"text": ..., "label": ...}, label "toxic" or "offensive" (obscene, insulting, hateful or
harassing text: removed) or "clean" (everything else, including text that quotes, defines or
discusses such words). tokenmill's linear classifier (data.classifiers.linear_classifier: hashed
word uni+bigrams, logistic regression) learns P(toxic) from it in the driver (`prepare`); every
HOLDOUT_EVERY-th example of each class is held out and its balanced accuracy and AUC go to the
manifest. The model is saved under `<work_dir>/safety/` (classifier.npz of plain arrays, loaded
without pickle, and manifest.json keyed by the sha256 of the file's bytes and the training
config), and retrained only when either changes. A document whose word-list score lies inside
`band` [low, high] (the threshold must lie in it) is decided by the classifier: removed when
P(toxic) > `classifier_threshold` (rule "toxicity_classifier"); below the band it is kept and
above it removed by the word list alone, as without a classifier, so the classifier's cost is paid
only on the uncertain share. A low of 0 sends every document to the classifier (it can then also
catch toxicity the list does not see). doc.safety = {toxicity, matched_terms, decided_by
("word_list" | "classifier"), classifier_probability (None when it did not run)} on every
document the step applies to; a rejection names the pass and its score.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator

from tokenmill import json_limits
from tokenmill.data.config import CurateConfig
from tokenmill.data.classifiers import linear_classifier as lc
from tokenmill.data.classifiers.ngram_lm import tokenize
from tokenmill.data.document import Doc, Rejection, format_value
from tokenmill.data import labelled as lb
from tokenmill.data.step import DocStep
from tokenmill.data.steps.model_quality import read_npz, write_npz
from tokenmill.data.steps.normalize import normalize_text
from tokenmill.errors import UserError

BUILTIN_LIST = Path(__file__).with_name("resources") / "toxicity_en.txt"
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
VERSION = f"2+clf-{lc.VERSION}"
SUBDIR, CLF_FILE, MANIFEST = "safety", "classifier.npz", "manifest.json"
# The label names of a labelled file: True = toxic (removed), False = clean.
LABELS: dict[str, bool] = {"toxic": True, "offensive": True, "clean": False}
HOLDOUT_EVERY = 10  # every 10th example of each class is held out for the manifest's accuracy / AUC
SEED = 0  # the classifier's batch order: a retrain on the same file gives the same bytes
WORD_LIST, CLASSIFIER = "word_list", "classifier"  # doc.safety["decided_by"]
TOXIC, CLEAN = "toxic", "clean"  # the two classes of the training sample


class SafetyLabelsError(UserError, ValueError):
    """A labelled file for the toxicity classifier that cannot be used (names the file and line)."""


def read_terms(path: Path) -> frozenset[str]:
    """Terms of a list file: one per line, lowercased; '#' comments and blank lines skipped."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: toxicity word list not found")
    terms = (line.split("#", 1)[0].strip().lower() for line in path.read_text(encoding="utf-8").splitlines())
    return frozenset(t for t in terms if t)


def toxicity(text: str, terms: frozenset[str]) -> tuple[float, int]:
    """(share of words that are listed terms, number of listed words found)."""
    words = _WORD.findall(text.lower())
    if not words:
        return 0.0, 0
    matched = sum(map(terms.__contains__, words))  # C-level loop: no per-word Python frame
    return matched / len(words), matched


def read_labelled(path: Path, mojibake: bool = True, max_examples: int = 20_000, max_line_bytes: int = 2_000_000) -> lb.Sample:
    """The training sample of a labelled file, streamed (data/labelled.py): at most `max_examples`
    toxic and as many clean texts, normalized as the documents are, kept as features."""
    if not path.is_file():
        raise SafetyLabelsError(f"safety.labelled {path}: file not found")

    def records() -> Iterator[tuple[int, str, str]]:
        for lineno, rec in lb.labelled_records(path, max_line_bytes, SafetyLabelsError):
            label = rec.get("label")
            if not isinstance(rec.get("text"), str) or not isinstance(label, str) or label.lower() not in LABELS:
                raise SafetyLabelsError(
                    f"{path}:{lineno}: needs a string 'text' and a 'label' of toxic, offensive or clean, got label {label!r}"
                )
            text = normalize_text(rec["text"], mojibake=mojibake)
            if text.strip():
                yield lineno, text, TOXIC if LABELS[label.lower()] else CLEAN

    sample = lb.bottom_k(
        records(), max_examples, lambda t: lc.features(tokenize(t)), lambda t: False, SafetyLabelsError, str(path)
    )
    toxic, clean = sample.counts[TOXIC], sample.counts[CLEAN]
    if not toxic or not clean:
        raise SafetyLabelsError(f"{path}: needs both toxic and clean texts ({toxic} toxic, {clean} clean)")
    return sample


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def train(sample: lb.Sample) -> tuple[lc.LinearClassifier, dict[str, Any]]:
    """The classifier on all but every HOLDOUT_EVERY-th sampled example per class (file order), and
    its held-out scores."""
    feats = {k: [e.features for e in sample.kept[k]] for k in (TOXIC, CLEAN)}
    fit_part = {k: [x for i, x in enumerate(v) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1] for k, v in feats.items()}
    held = {k: [x for i, x in enumerate(v) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1] for k, v in feats.items()}
    model = lc.fit(fit_part[TOXIC], fit_part[CLEAN], seed=SEED)
    scores = lc.evaluate(model, held[TOXIC], held[CLEAN])
    stats = {
        "examples": {k: sample.counts[k] for k in feats},
        "sampled": {k: len(v) for k, v in feats.items()},
        "held_out": {k: len(v) for k, v in held.items()},
        # NaN (too few examples to hold any out) is not JSON: recorded as null
        **{k: (None if v != v else round(v, 6)) for k, v in scores.items()},
    }
    return model, stats


class Safety(DocStep):
    """Fills doc.safety; the word list removes above the threshold, the classifier decides its band."""

    name = "safety"
    version = VERSION

    def __init__(self, cfg: CurateConfig, base_dir: Path | None = None):
        super().__init__(cfg, base_dir)
        self.classifier: lc.LinearClassifier | None = None
        self.retrained = False  # whether the last prepare trained (False: the cached model matched)

    def _fingerprint(self, labelled: Path) -> str:
        """sha256 of the labelled file's bytes and of what shapes training: its change retrains."""
        conf = {"version": VERSION, "seed": SEED, "holdout": HOLDOUT_EVERY, "normalize": self.cfg.normalize.model_dump()}
        conf["max_examples"] = self.cfg.safety.max_examples
        return hashlib.sha256((_sha256(labelled) + json.dumps(conf, sort_keys=True)).encode()).hexdigest()

    def prepare(self, work_dir: Path) -> None:
        """Check the list; train the classifier unless work_dir/safety holds one for this file and config."""
        self.setup_terms()
        self.retrained = False
        if not self.cfg.safety.labelled:
            return
        labelled = self.resolve(self.cfg.safety.labelled)
        if not labelled.is_file():
            raise SafetyLabelsError(f"safety.labelled {labelled}: file not found")
        out = Path(work_dir) / SUBDIR
        manifest_path = out / MANIFEST
        fingerprint = self._fingerprint(labelled)
        old = json_limits.load_file(manifest_path) if manifest_path.is_file() else {}
        if old.get("fingerprint") == fingerprint and (out / CLF_FILE).is_file():
            return
        out.mkdir(parents=True, exist_ok=True)
        manifest_path.unlink(missing_ok=True)  # a run killed mid-write retrains next time
        sample = read_labelled(labelled, self.cfg.normalize.fix_mojibake, self.cfg.safety.max_examples, self.cfg.max_doc_bytes)
        model, stats = train(sample)
        write_npz(out / CLF_FILE, model.to_arrays())
        manifest = {"fingerprint": fingerprint, "file": str(labelled), "version": VERSION, **stats}
        tmp = manifest_path.with_name(MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, manifest_path)
        self.retrained = True

    def setup_terms(self) -> None:
        """Load the word list (the user's, else the built-in one): the first pass."""
        path = self.resolve(self.cfg.safety.word_list) if self.cfg.safety.word_list else BUILTIN_LIST
        self.terms = read_terms(path)

    def setup(self, work_dir: Path) -> None:
        self.setup_terms()
        if self.cfg.safety.labelled:
            path = Path(work_dir) / SUBDIR / CLF_FILE
            if not path.is_file():
                raise FileNotFoundError(f"{path}: no trained toxicity classifier; Safety.prepare must run first")
            self.classifier = lc.LinearClassifier.from_arrays(read_npz(path))

    def applies(self, doc: Doc) -> bool:
        return bool(doc.text) and doc.bucket not in self.cfg.safety.skip_buckets

    def in_band(self, score: float) -> bool:
        """Whether the classifier decides a document of this word-list score."""
        low, high = self.cfg.safety.band
        return self.classifier is not None and low <= score <= high

    def score(self, text: str) -> dict[str, Any]:
        """The doc.safety struct of a text (SAFETY_FIELDS): both passes, the second only in the band."""
        score, matched = toxicity(text, self.terms)
        p = self.classifier.score(tokenize(text)) if self.classifier is not None and self.in_band(score) else None
        return {
            "toxicity": score,
            "matched_terms": matched,
            "decided_by": WORD_LIST if p is None else CLASSIFIER,
            "classifier_probability": p,
        }

    def decide(self, safety: dict[str, Any]) -> Rejection | None:
        """The rejection a doc.safety struct calls for, naming the pass and its score, or None."""
        score, limit = safety["toxicity"], self.cfg.safety.threshold
        if safety["decided_by"] == CLASSIFIER:
            p, cut = safety["classifier_probability"], self.cfg.safety.classifier_threshold
            if p <= cut:
                return None
            low, high = self.cfg.safety.band
            reason = f"classifier P(toxic) {p:.4f} > {cut} (word-list toxicity {score:.4f} in band [{low}, {high}])"
            return Rejection(self.name, "toxicity_classifier", format_value(p), reason)
        if score > limit:
            reason = f"word list: {safety['matched_terms']} listed words, toxicity {score:.4f} > threshold {limit}"
            return Rejection(self.name, "toxicity", format_value(score), reason)
        return None

    def process(self, doc: Doc) -> Rejection | None:
        assert doc.text is not None
        doc.safety = self.score(doc.text)
        return self.decide(doc.safety)
