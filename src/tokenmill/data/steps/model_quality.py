"""Model-based quality: CCNet perplexity tiers and a reference-vs-random linear classifier.

Two learned gates (perplexity filtering, CCNet, Wenzek et al. 2020; reference-corpus similarity
classifiers, GPT-3, Brown et al. 2020), both trained by tokenmill on a reference corpus the user names
(`model_quality.reference`: a file, directory or glob of text / Markdown / JSONL / HTML, read and
cleaned like any source: the extract and normalize steps run on it):

* perplexity (Wenzek et al. 2020, CCNet): a word n-gram LM with modified Kneser-Ney smoothing
  (data.ngram_lm) trained on the reference scores every document; low perplexity = reads like
  the reference. Tiers are CCNet's head / middle / tail, split at two cut-points: the configured
  `tier_perplexities`, or by default (as in cc_net's PerplexityBucket) the 30th and 60th
  percentiles of the perplexity of the random sample below, since a perplexity's scale depends
  on the reference (its size, vocabulary, domain) and no fixed number fits every one.
* classifier_score (GPT-3 appendix A, Llama, DCLM): P(reference) from a fastText-style linear
  model over hashed word uni+bigrams (data.classifiers.linear_classifier), trained on reference passages
  (label 1) against "random" passages: every `negative_every`-th raw record of the run's own
  sources outside `skip_buckets`, extracted and normalized: the crawl being curated. Every 10th
  passage of each class is held out; the manifest records the classifier's AUC on them.

Both are trained once, in `prepare`, and saved under `<work_dir>/model_quality/`: .npz files of
plain numeric arrays (written with fixed zip timestamps, so equal models are equal bytes; read
with allow_pickle=False, so loading never runs code) and manifest.json (fingerprints, counts,
discounts, percentiles, held-out AUC; no timings, so it is reproducible too). The LM's
fingerprint hashes the reference files' bytes and the config that shapes it; the random side's
adds the sources' paths / sizes / mtimes and the sampling knobs. `prepare` retrains only a part
whose fingerprint changed, so a resumed run does not retrain. Training is deterministic (fixed
seed, sums in a fixed order). Rule "classifier_score" removes below `min_classifier_score` (opt-in);
rule "perplexity" removes above a numeric `max_perplexity`, or with "auto" (the default) by the
word-order test below; None only scores. The signals are stored on every document.

The auto perplexity gate. Raw perplexity measures topic as much as quality: clean documentation
whose words the reference rarely uses scores as high as word salad (on the dirty-web corpus, a
cut at the held-out reference passages' maximum perplexity removed 55-56% of the clean docs and
73-76% of the clean prose reaching it, seeds 41 and 7; benchmarks/results/perplexity_gate.json).
So the gate asks the same LM a question topic does not change: does each word's previous word
predict it better than nearby words of the same document do (data.classifiers.word_order, over
pairs of the LM's JUDGED_WORDS most probable words)? A document whose z is below the one-sided
`order_significance` level's cut (2.33 at 0.01) shows no word order and is removed; one with
fewer than MIN_PAIRS pairs is not judged. The cut comes from the test's null, not from data: an
earlier cut was fitted between held-out reference passages and the same passages with their
words shuffled, which is the corruption a word-salad benchmark scores (issue 55).
Held-out reference passages only decide which languages are judged: every HOLDOUT_EVERY-th
passage of the reference is kept out of the LM's training, identified by the langid step's
model, and tested; a language is judged when it has at least `min_held_out` of them and at least
`min_held_out_pass` of those pass (the LM knows its word order well enough that clean text passes;
manifest "calibration": per language, held-out passages, how many were tested and passed, judged).
A document is judged in its langid language (identified here when langid did not run); in a
language not judged it is scored and kept, with `perplexity_judged: false`.

Rule "nonword_frac" (data.classifiers.nonwords), in the languages the gate judges: the share of a
document's words of 4+ letters that the reference never saw but that are one edit from one of its
1,000 commonest words (OCR damage, typos), removed above `max_nonword_frac` (0.13: the 99.9th
percentile of clean design text, benchmarks/design_nonword_cut.py; never set on a corrupted text).

With `model_quality.labelled` (a JSONL file of {"text": ..., "label": "good" | "bad"}, also
true/false or 1/0), the classifier learns from those labels instead of reference vs random, as
DCLM's fastText filter was trained on hand-picked positives and negatives; the file's bytes are
part of the classifier's fingerprint, its texts are normalized like the documents, and a line
without a text or a known label is an error naming the file and the line. The n-gram LM still
learns from the reference, and the random sample still gives the CCNet cut-points.
"""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import xxhash

from tokenmill import json_limits
from tokenmill.data.config import CurateConfig, SourceConfig
from tokenmill.data.classifiers import linear_classifier as lc
from tokenmill.data.classifiers import ngram_lm, word_order
from tokenmill.data.classifiers.nonwords import NearWords
from tokenmill.data import sources as source_step
from tokenmill.data.document import Doc, Rejection, format_value
from tokenmill.data.steps.extract import Extract
from tokenmill.data.jsonl import json_objects
from tokenmill.data.steps.langid import UNDETERMINED, Identifier
from tokenmill.data.steps.normalize import Normalize, normalize_text
from tokenmill.errors import UserError
from tokenmill.data.step import DocStep

VERSION = f"6+lm-{ngram_lm.VERSION}+clf-{lc.VERSION}"
SUBDIR = "model_quality"
LM_FILE, CLF_FILE, MANIFEST = "lm.npz", "classifier.npz", "manifest.json"
TIERS = ("head", "middle", "tail")
SEED = 0  # the classifier's batch order; fixed so that a rerun trains the same bytes
PASSAGE_CHARS = 3000  # classifier examples are passages of about a web page's extracted length
HOLDOUT_EVERY = 10  # every 10th passage of each class is held out (classifier AUC, perplexity gate)
JUDGED_WORDS = 1000  # the word-order test pairs the LM's 1000 most probable words (with a letter)
MIN_PAIRS = 20  # fewer such pairs than this: not judged (too few for the test's normal approximation)
CCNET_PERCENTILES = (30, 60)  # CCNet's head / tail cut-points (cc_net PerplexityBucket defaults)
PERCENTILES = (10, 30, 60, 90)  # of the random sample's perplexity, recorded in the manifest
REFERENCE_MAX_BYTES = 1 << 40  # reference files are read whole, whatever curate.max_doc_bytes says
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: no wall-clock time in the files
# 1 and 0 are found too: they hash and compare equal to True and False
LABELS: dict[object, bool] = {"good": True, "bad": False, True: True, False: False}


class LabelledFileError(UserError, ValueError):
    """A labelled training file for the quality classifier that cannot be used (names file and line)."""


# --------------------------------------------------------------------------- small pieces
def tier_of(perplexity: float | None, cuts: list[float]) -> str | None:
    """head below the first cut-point, middle below the second, tail from there (CCNet)."""
    if perplexity is None:
        return None
    return TIERS[int(np.searchsorted(np.asarray(cuts), perplexity, side="right"))]


def passages(text: str, max_chars: int = PASSAGE_CHARS) -> list[str]:
    """Consecutive whole lines of about max_chars each (a last short remnant joins the one before)."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.split("\n"):
        current.append(line)
        size += len(line) + 1
        if size >= max_chars:
            out.append("\n".join(current))
            current, size = [], 0
    if current:
        tail = "\n".join(current)
        if out and len(tail) < max_chars // 4:
            out[-1] += "\n" + tail
        else:
            out.append(tail)
    return [p for p in out if p.strip()]


def even_sample(items: list[Any], k: int) -> list[Any]:
    """k items spread evenly over the list (all when it is shorter): deterministic, no RNG."""
    if len(items) <= k:
        return items
    return [items[i] for i in np.linspace(0, len(items) - 1, k).astype(np.int64)]


def _split(items: list[Any], held_out: bool) -> list[Any]:
    """The held-out share (every HOLDOUT_EVERY-th item) or the rest."""
    return [x for i, x in enumerate(items) if (i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1) == held_out]


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """numpy's .npz layout with fixed timestamps (np.savez stamps the wall clock), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            with zf.open(zipfile.ZipInfo(f"{name}.npy", _ZIP_TIME), "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asarray(arrays[name]), allow_pickle=False)
    os.replace(tmp, path)


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz; object arrays (pickles) are refused, not loaded."""
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def _hash_json(obj: Any) -> str:
    return xxhash.xxh3_128_hexdigest(json.dumps(obj, sort_keys=True).encode("utf-8"))


def _files_digest(path: str) -> list[list[str]]:
    """(path inside the reference, xxh3-128 of the bytes) per file: content, not place or mtime,
    so a reference copied or moved elsewhere does not retrain the model."""
    root, files = source_step.list_source_files(path)
    out = []
    for f in files:
        h = xxhash.xxh3_128()
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out.append([os.path.relpath(f, root), h.hexdigest()])
    return out


# --------------------------------------------------------------------------- the step
def _language_check(held_out: int, tested: int, passed: int, min_held_out: int, min_pass: float) -> dict[str, Any]:
    """One language's held-out record and whether the gate judges it: enough tested held-out
    passages, and enough of them pass (an LM that knows a language's word order too little to
    pass its own held-out text would remove clean text in it)."""
    share = passed / tested if tested else 0.0
    judged = tested >= max(min_held_out, 1) and share >= min_pass
    return {"held_out": held_out, "tested": tested, "passed": passed, "pass_share": round(share, 6), "judged": judged}


class ModelQuality(DocStep):
    """Fills doc.model_quality {perplexity, classifier_score, tier}; removes by either when asked."""

    name = "model_quality"
    version = VERSION

    def __init__(self, cfg: CurateConfig, base_dir: Path | None = None):
        super().__init__(cfg, base_dir)
        self.mq = cfg.model_quality
        self.lm: ngram_lm.NgramLM | None = None
        self.classifier: lc.LinearClassifier | None = None
        self.cuts: list[float] = []  # tier cut-points: configured, or the random sample's percentiles
        self.judged = np.zeros(0, bool)  # the LM's JUDGED_WORDS, by word id (word-order test)
        self.calibration: dict[str, Any] = {}  # the manifest's calibration of the auto perplexity gate
        self.judged_languages: set[str] = set()  # languages the auto gate judges
        self.near: NearWords | None = None  # the reference's vocabulary for nonword_frac
        self.critical_z = word_order.critical_z(self.mq.order_significance)
        self._ident: Identifier | None = None
        # Reference and random text are cleaned by the same steps as the documents they judge.
        self._cleaners: tuple[DocStep, ...] = (Extract(cfg, base_dir), Normalize(cfg, base_dir))
        self.timings: dict[str, float] = {}  # seconds of the last prepare's phases (not saved)

    def enabled(self) -> bool:
        return self.mq.reference is not None

    def applies(self, doc: Doc) -> bool:
        return doc.bucket not in self.mq.skip_buckets

    # ------------------------------------------------------------------ reading
    def _clean(self, doc: Doc) -> str | None:
        """A raw record's text as the pipeline would see it after extract + normalize."""
        for step in self._cleaners:
            if step.applies(doc) and step.process(doc) is not None:
                return None
        return doc.text if doc.text and len(doc.text) >= self.cfg.min_chars else None

    def reference_texts(self) -> tuple[list[str], int]:
        """(every document of the reference, extracted and normalized; records left out).

        No max_doc_bytes here: a reference is often a few large files (whole books) that the
        user chose, not crawl records that could be anything.
        """
        assert self.mq.reference is not None
        src = SourceConfig(kind="files", path=str(self.resolve(self.mq.reference)), bucket="reference")
        texts, left_out = [], 0
        for raw in source_step.read_source(src, REFERENCE_MAX_BYTES):
            if raw.problem is None and (text := self._clean(Doc.from_raw(raw))):
                texts.append(text)
            else:
                left_out += 1
        if not texts:
            raise ValueError(
                f"model_quality.reference {self.mq.reference!r}: no readable text in it "
                f"({left_out} records unreadable or shorter than min_chars)"
            )
        return texts, left_out

    def labelled_texts(self) -> tuple[list[str], list[str]]:
        """(good texts, bad texts) of the labelled file, normalized like the documents."""
        assert self.mq.labelled is not None
        path = Path(self.resolve(self.mq.labelled))
        if not path.is_file():
            raise LabelledFileError(f"model_quality.labelled {path}: file not found")
        good: list[str] = []
        bad: list[str] = []
        with path.open(encoding="utf-8") as fh:
            for lineno, rec in json_objects(fh, path, LabelledFileError):
                label = LABELS.get(rec.get("label")) if isinstance(rec.get("label"), (str, bool, int)) else None
                if not isinstance(rec.get("text"), str) or label is None:
                    raise LabelledFileError(
                        f"{path}:{lineno}: needs a string 'text' and a 'label' of "
                        f"good/bad, true/false or 1/0, got label {rec.get('label')!r}"
                    )
                text = normalize_text(rec["text"], mojibake=self.cfg.normalize.fix_mojibake)
                if len(text) >= self.cfg.min_chars:
                    (good if label else bad).append(text)
        if not good or not bad:
            raise LabelledFileError(
                f"{path}: needs both good and bad texts of at least min_chars ({len(good)} good, {len(bad)} bad)"
            )
        return good, bad

    def random_texts(self) -> Iterator[str]:
        """Every negative_every-th raw record of the run's sources, in the step's buckets."""
        i = 0
        for src in self.cfg.sources:
            if src.kind == "files" and src.path:
                src = src.model_copy(update={"path": str(self.resolve(src.path))})
            for raw in source_step.read_source(src, self.cfg.max_doc_bytes):
                i += 1
                if (i - 1) % self.mq.negative_every or raw.problem is not None or raw.bucket in self.mq.skip_buckets:
                    continue
                if text := self._clean(Doc.from_raw(raw)):
                    yield text

    # ------------------------------------------------------------------ fingerprints
    def _lm_fingerprint(self) -> str:
        assert self.mq.reference is not None
        return _hash_json(
            {
                "version": VERSION,
                "order": self.mq.ngram_order,
                "min_chars": self.cfg.min_chars,
                "extract": self.cfg.extract.model_dump(),
                "normalize": self.cfg.normalize.model_dump(),
                "reference": _files_digest(str(self.resolve(self.mq.reference))),
            }
        )

    def _random_fingerprint(self, lm_fp: str) -> str:
        labelled = _files_digest(str(self.resolve(self.mq.labelled))) if self.mq.labelled else None
        return _hash_json(
            {
                "lm": lm_fp,
                "classifier": self.mq.classifier,
                "labelled": labelled,
                "max_doc_bytes": self.cfg.max_doc_bytes,
                "negative_every": self.mq.negative_every,
                "max_examples": self.mq.max_examples,
                "skip_buckets": self.mq.skip_buckets,
                "seed": SEED,
                "sources": [source_step.inputs_fingerprint(s) for s in self.cfg.sources],
            }
        )

    def _needs_random(self) -> bool:
        """The random sample trains the classifier and gives the CCNet percentile cut-points."""
        return self.mq.classifier or self.mq.tier_perplexities is None

    # ------------------------------------------------------------------ training
    def prepare(self, work_dir: Path) -> None:
        """Train what is missing or stale under work_dir/model_quality; keep what matches."""
        out = Path(work_dir) / SUBDIR
        out.mkdir(parents=True, exist_ok=True)
        manifest_path = out / MANIFEST
        old = json_limits.load_file(manifest_path) if manifest_path.is_file() else {}
        t0 = time.perf_counter()
        lm_fp = self._lm_fingerprint()
        rnd_fp = self._random_fingerprint(lm_fp) if self._needs_random() else None
        cal_fp = _hash_json(
            {
                "lm": lm_fp,
                "method": "word-order-test",
                "judged_words": JUDGED_WORDS,
                "significance": self.mq.order_significance,
                "min_held_out": self.mq.min_held_out,
                "min_held_out_pass": self.mq.min_held_out_pass,
            }
        )
        lm_ok = old.get("lm", {}).get("fingerprint") == lm_fp and (out / LM_FILE).is_file()
        rnd_ok = rnd_fp is None or (
            old.get("random", {}).get("fingerprint") == rnd_fp and (not self.mq.classifier or (out / CLF_FILE).is_file())
        )
        cal_ok = lm_ok and old.get("calibration", {}).get("fingerprint") == cal_fp
        self.timings = {"fingerprint_s": time.perf_counter() - t0}
        if lm_ok and rnd_ok and cal_ok:
            return
        # No manifest while model files change: a run killed half-way retrains all next time,
        # instead of trusting an old manifest over a newer file.
        manifest_path.unlink(missing_ok=True)
        t = time.perf_counter()
        reference, left_out = self.reference_texts()
        # Every HOLDOUT_EVERY-th passage of the reference is kept out of the LM: the perplexity
        # gate is calibrated on how the LM scores reference text it has not seen.
        ref_passages = [p for text in reference for p in passages(text)]
        self.timings["read_reference_s"] = time.perf_counter() - t
        manifest: dict[str, Any] = {"version": VERSION}
        if lm_ok:
            lm = ngram_lm.NgramLM.from_arrays(read_npz(out / LM_FILE))
            manifest["lm"] = old["lm"]
        else:
            t = time.perf_counter()
            lm = ngram_lm.train((ngram_lm.tokenize(p) for p in _split(ref_passages, False)), self.mq.ngram_order)
            self.timings["train_lm_s"] = time.perf_counter() - t
            write_npz(out / LM_FILE, lm.to_arrays())
            manifest["lm"] = {
                "fingerprint": lm_fp,
                "documents": len(reference),
                "left_out": left_out,
                "passages": len(ref_passages),
                **lm.stats(),
            }
        manifest["calibration"] = (
            old["calibration"] if cal_ok else {"fingerprint": cal_fp, **self._calibrate(_split(ref_passages, True), lm)}
        )
        if rnd_fp is not None:
            manifest["random"] = old["random"] if rnd_ok else {"fingerprint": rnd_fp, **self._fit_random(reference, lm, out)}
        # The manifest goes last: a run killed before this line retrains next time.
        tmp = manifest_path.with_name(MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, manifest_path)

    def _calibrate(self, held_out: list[str], lm: ngram_lm.NgramLM) -> dict[str, Any]:
        """Per language of the held-out passages (langid's lid.176, as the langid step): how many
        there are, how many had enough pairs to be tested, how many passed the word-order test at
        the configured level, and so whether the gate judges the language. Clean text only: no
        corruption of the reference is made or scored."""
        ident, judged = Identifier(), word_order.judged_words(lm, JUDGED_WORDS)
        counts: dict[str, list[int]] = {}  # language -> [held out, tested, passed]
        for p in held_out:
            c = counts.setdefault(ident.identify(p)[0], [0, 0, 0])
            c[0] += 1
            if (test := word_order.order_test(lm, ngram_lm.tokenize(p), judged, MIN_PAIRS)) is not None:
                c[1] += 1
                c[2] += test.z >= self.critical_z
        languages = {
            lang: _language_check(c[0], c[1], c[2], self.mq.min_held_out, self.mq.min_held_out_pass)
            for lang, c in sorted(counts.items())
        }
        return {
            "statistic": "word_order_z",
            "significance": self.mq.order_significance,
            "critical_z": round(self.critical_z, 6),
            "window": word_order.WINDOW,
            "min_held_out": self.mq.min_held_out,
            "min_held_out_pass": self.mq.min_held_out_pass,
            "held_out": len(held_out),
            "languages": languages,
        }

    def _fit_random(self, reference: list[str], lm: ngram_lm.NgramLM, out: Path) -> dict[str, Any]:
        """Sample the random side; record its perplexity percentiles; fit and save the classifier."""
        k = self.mq.max_examples
        t = time.perf_counter()
        neg_text: list[str] = []
        perplexities: list[float] = []
        for text in self.random_texts():
            if (pp := lm.perplexity(ngram_lm.tokenize(text))) is not None:
                perplexities.append(pp)
            neg_text.extend(passages(text))
            if len(neg_text) >= k:
                break
        self.timings["read_random_s"] = time.perf_counter() - t
        if not neg_text:
            raise ValueError(
                "model_quality: the run's sources gave no 'random' text to compare the reference "
                "with (set model_quality.classifier: false and tier_perplexities to score without it)"
            )
        # CCNet cuts its tiers at the 30th and 60th percentiles of the crawl's perplexity.
        result: dict[str, Any] = {
            "documents": len(perplexities),
            "perplexity": {f"p{q}": round(float(np.percentile(perplexities, q)), 3) for q in PERCENTILES},
        }
        if self.mq.classifier:
            t = time.perf_counter()
            if self.mq.labelled:
                good, bad = self.labelled_texts()
                pos_text = even_sample([p for text in good for p in passages(text)], k)
                neg_text = even_sample([p for text in bad for p in passages(text)], k)
            else:
                pos_text = even_sample([p for text in reference for p in passages(text)], k)
                neg_text = neg_text[:k]
            pos = [lc.features(ngram_lm.tokenize(p)) for p in pos_text]
            neg = [lc.features(ngram_lm.tokenize(p)) for p in neg_text]
            model = lc.fit(_split(pos, False), _split(neg, False), seed=SEED)
            self.timings["train_classifier_s"] = time.perf_counter() - t
            write_npz(out / CLF_FILE, model.to_arrays())
            result["classifier"] = {
                "trained_on": "labelled" if self.mq.labelled else "reference vs random",
                "positives": len(pos),
                "negatives": len(neg),
                "held_out": lc.evaluate(model, _split(pos, True), _split(neg, True)),
            }
        return result

    # ------------------------------------------------------------------ scoring
    def setup(self, work_dir: Path) -> None:
        out = Path(work_dir) / SUBDIR
        if not (out / MANIFEST).is_file():
            raise FileNotFoundError(f"{out / MANIFEST}: no trained models; ModelQuality.prepare must run first")
        manifest = json_limits.load_file((out / MANIFEST))
        self.lm = ngram_lm.NgramLM.from_arrays(read_npz(out / LM_FILE))
        self.judged = word_order.judged_words(self.lm, JUDGED_WORDS)
        self.near = NearWords(self.lm)  # built even when max_nonword_frac is None: None still scores
        self.calibration = manifest["calibration"]
        self.judged_languages = {lang for lang, c in self.calibration["languages"].items() if c["judged"]}
        if self.mq.classifier:
            self.classifier = lc.LinearClassifier.from_arrays(read_npz(out / CLF_FILE))
        if self.mq.tier_perplexities is not None:
            self.cuts = list(self.mq.tier_perplexities)
        else:
            pp = manifest["random"]["perplexity"]
            self.cuts = [pp[f"p{CCNET_PERCENTILES[0]}"], pp[f"p{CCNET_PERCENTILES[1]}"]]

    def _language(self, doc: Doc) -> str:
        """The langid step's label; the same model's when that step did not run on the document."""
        if doc.language is not None:
            return doc.language
        if self._ident is None:
            self._ident = Identifier()
        return self._ident.identify(doc.text or "")[0]

    def _perplexity_gate(self, doc: Doc, lang: str, pp: float | None, test: word_order.OrderTest | None) -> Rejection | None:
        """Rule "perplexity": a configured max_perplexity cuts the perplexity; "auto" removes a
        document of a judged language whose word order the test does not show (perplexity_judged
        records whether the document was compared with a cut at all)."""
        limit, mq = self.mq.max_perplexity, doc.model_quality
        assert mq is not None
        if limit is None:
            return None
        if limit != "auto":
            mq["perplexity_judged"] = pp is not None
            if pp is not None and pp > limit:
                return Rejection(
                    self.name, "perplexity", format_value(pp), f"perplexity {format_value(pp)} > max_perplexity {limit}"
                )
            return None
        judged = lang != UNDETERMINED and lang in self.judged_languages and test is not None
        mq["perplexity_judged"] = judged
        if judged and test is not None and test.z < self.critical_z:
            return Rejection(
                self.name,
                "perplexity",
                format_value(test.z),
                f"word order z {format_value(test.z)} < {format_value(self.critical_z)}: over {test.pairs} word pairs "
                f"the previous word predicts no better than nearby words (one-sided level {self.mq.order_significance})",
            )
        return None

    def _nonword_rule(self, doc: Doc, lang: str, tokens: list[str]) -> Rejection | None:
        """Rule "nonword_frac": in a language the gate judges (the reference knows its words),
        too many words that are one edit from a common reference word but not words of it."""
        mq = doc.model_quality
        assert mq is not None
        if self.near is None or lang not in self.judged_languages:
            return None
        frac = mq["nonword_frac"] = self.near.frac(tokens)
        limit = self.mq.max_nonword_frac
        if frac is None or limit is None or frac <= limit:
            return None
        return Rejection(
            self.name,
            "nonword_frac",
            format_value(frac),
            f"nonword_frac {format_value(frac)} > {limit}: words the reference never saw, one edit from its common words",
        )

    def process(self, doc: Doc) -> Rejection | None:
        assert self.lm is not None, "setup() loads the models before any document"
        tokens = ngram_lm.tokenize(doc.text or "")
        pp = self.lm.perplexity(tokens)
        score = self.classifier.score(tokens) if self.classifier is not None else None
        test = word_order.order_test(self.lm, tokens, self.judged, MIN_PAIRS)
        doc.model_quality = {
            "perplexity": pp,
            "classifier_score": score,
            "tier": tier_of(pp, self.cuts),
            "word_order_z": test.z if test is not None else None,
            "nonword_frac": None,
            "perplexity_judged": None,
        }
        lang = self._language(doc)  # identified once here when langid did not run: both rules use it
        if (rejection := self._perplexity_gate(doc, lang, pp, test)) is not None:
            return rejection
        if (rejection := self._nonword_rule(doc, lang, tokens)) is not None:
            return rejection
        if score is not None and self.mq.min_classifier_score is not None and score < self.mq.min_classifier_score:
            return Rejection(
                self.name,
                "classifier_score",
                format_value(score),
                f"classifier score {format_value(score)} < min_classifier_score {self.mq.min_classifier_score}",
            )
        return None
