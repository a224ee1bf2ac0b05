"""`tokenmill curate-eval pii|safety|quality FILE`: how well the PII, toxicity and quality gates do, per slice.

PII filtering must be evaluated by bucketed recall and over-removal rate, not by one global
metric; toxicity filters "need slice-based evaluation:
separately measure false positives on news, medicine, law, forums, code, fiction". Both take a
labelled JSONL file and return a JSON-able dict (the CLI prints it).

PII file, one object per line:
    {"text": ..., "bucket": "docs" (optional), "pii": [{"start": 0, "end": 15, "kind": "email"}]}
Offsets are Python string indices into "text", end exclusive; kinds are those of PII_FIELDS.
  recall        gold spans whose every character is masked (by a span of any kind: the text is
                gone either way) / gold spans; per kind and per bucket
  typed_recall  the same, counting only masks of the gold span's kind
  over_removal  masked characters outside every gold span / characters outside gold spans,
                per bucket and per kind (the training text lost to false positives), with the character count
  false_spans   predicted spans that touch no gold span, per kind

Safety file, one object per line:
    {"text": ..., "toxic": true (or "label": "toxic" | "offensive" | "clean"),
     "slice": "news" | "medicine" | ..., "language", "kind", "source", "topic" (each optional)}
  false_positive_rate  clean documents removed / clean documents
  recall               toxic documents removed / toxic documents
per value of every slice key the records carry ("slices"; "by_slice" is the "slice" key) and
overall, with the line numbers of the false positives for review, for the word list alone
("first_pass") and, with safety.labelled, for both passes ("both_passes": the classifier trained
on that file decides the band) with the number sent to the classifier ("to_classifier"); the
top-level figures are the gate as configured. Every text is scored, whatever the step's
skip_buckets: the evaluation is of the scorer. The CLI prints it as a table (--json: JSON).

Quality file, one object per line (do not let filters become a hidden bias):
    {"text": ..., "language": "de", "group": "page-07" (optional), "kind": "web" (optional),
     "low_quality": false (optional)}
Every text goes through the quality step as the curation would judge it: its language's profile
(data/steps/language_profiles.py) and its kind's rule families (data/steps/text_kinds.py; default web).
  by_language   documents, kept, keep_rate, the rules that removed the most; with labels,
                low-quality removed / good kept; gap_to_english: on the groups this language
                shares with English, its keep rate minus English's on the same pages, in points
                (without groups: over all documents), with the number of shared groups
  spread        max - min keep rate over the languages with at least min_docs documents
  agreement     of the groups (one page in several languages) with 2+ languages, the share whose
                translations all got the same decision
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator, cast

import numpy as np

from tokenmill import json_limits
from tokenmill.data.config import CurateConfig, QualityKind
from tokenmill.data.document import PII_FIELDS
from tokenmill.data.jsonl import json_objects
from tokenmill.data.classifiers.ngram_lm import tokenize
from tokenmill.data.steps.classify import Classify
from tokenmill.data.steps.pii import Span, find_pii
from tokenmill.data.steps.safety import LABELS as SAFETY_LABELS
from tokenmill.data.steps.safety import SUBDIR as SAFETY_SUBDIR
from tokenmill.data.steps.safety import Safety
from tokenmill.data.steps.text_kinds import FAMILIES
from tokenmill.errors import UserError

DEFAULT_BUCKET = "default"
MAX_EXAMPLES = 20  # line numbers of false positives kept per slice for review


class LabelledFileError(UserError, ValueError):
    """A labelled file that cannot be read; the message names the file and line."""


def _records(path: Path, required: dict[str, type | tuple[type, ...]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line is an error naming it."""
    if not path.is_file():
        raise LabelledFileError(f"{path}: labelled file not found")
    with path.open(encoding="utf-8") as f:
        for lineno, rec in json_objects(f, path, LabelledFileError):
            for key, typ in required.items():
                if not isinstance(rec.get(key), typ):
                    raise LabelledFileError(f"{path}:{lineno}: field {key!r} missing or not {typ}")
            yield lineno, rec


def _gold_spans(path: Path, lineno: int, rec: dict[str, Any]) -> list[Span]:
    spans = []
    for item in rec.get("pii") or []:
        try:
            span = Span(int(item["start"]), int(item["end"]), str(item["kind"]))
        except (KeyError, TypeError, ValueError):
            raise LabelledFileError(f"{path}:{lineno}: a pii label needs integer start, end and a kind") from None
        if span.kind not in PII_FIELDS or not 0 <= span.start < span.end <= len(rec["text"]):
            raise LabelledFileError(f"{path}:{lineno}: bad pii label {item} (kinds: {', '.join(PII_FIELDS)})")
        spans.append(span)
    return spans


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _masks(n: int, spans: list[Span], kinds: tuple[str, ...]) -> np.ndarray:
    """Per character: 0 outside every span, else 1 + the index of the span's kind."""
    out = np.zeros(n, dtype=np.int8)
    for s in spans:
        out[s.start : s.end] = kinds.index(s.kind) + 1
    return out


def eval_pii(labelled: Path, cfg: CurateConfig) -> dict[str, Any]:
    """Recall and over-removal per kind and per bucket of the PII step on a labelled file."""
    kinds = tuple(PII_FIELDS)
    per_kind = {
        k: {"gold": 0, "recalled": 0, "typed": 0, "predicted": 0, "false_spans": 0, "masked_chars": 0, "over_removed_chars": 0}
        for k in kinds
    }
    non_pii_chars = 0
    per_bucket: dict[str, dict[str, int]] = defaultdict(
        lambda: {"docs": 0, "chars": 0, "pii_chars": 0, "gold": 0, "recalled": 0, "masked_chars": 0, "over_removed_chars": 0}
    )
    for lineno, rec in _records(labelled, {"text": str}):
        text = rec["text"]
        gold = _gold_spans(labelled, lineno, rec)
        pred = find_pii(text, cfg.pii.kinds, cfg.pii.names)
        g, p = _masks(len(text), gold, kinds), _masks(len(text), pred, kinds)
        b = per_bucket[str(rec.get("bucket") or DEFAULT_BUCKET)]
        b["docs"] += 1
        b["chars"] += len(text)
        b["pii_chars"] += int(np.count_nonzero(g))
        b["masked_chars"] += int(np.count_nonzero(p))
        b["over_removed_chars"] += int(np.count_nonzero((p != 0) & (g == 0)))
        for s in gold:
            covered = p[s.start : s.end]
            recalled = bool(covered.all())
            b["gold"] += 1
            b["recalled"] += recalled
            per_kind[s.kind]["gold"] += 1
            per_kind[s.kind]["recalled"] += recalled
            per_kind[s.kind]["typed"] += bool((covered == kinds.index(s.kind) + 1).all())
        non_pii_chars += len(text) - int(np.count_nonzero(g))
        for s in pred:
            k = per_kind[s.kind]
            k["predicted"] += 1
            k["false_spans"] += not g[s.start : s.end].any()
            k["masked_chars"] += s.end - s.start
            k["over_removed_chars"] += int(np.count_nonzero(g[s.start : s.end] == 0))
    buckets = {
        name: {
            **b,
            "recall": _ratio(b["recalled"], b["gold"]),
            "over_removal": _ratio(b["over_removed_chars"], b["chars"] - b["pii_chars"]),
        }
        for name, b in sorted(per_bucket.items())
    }
    total: dict[str, Any] = {
        key: sum(b[key] for b in per_bucket.values())
        for key in ("docs", "chars", "pii_chars", "gold", "recalled", "masked_chars", "over_removed_chars")
    }
    total["recall"] = _ratio(total["recalled"], total["gold"])
    total["over_removal"] = _ratio(total["over_removed_chars"], total["chars"] - total["pii_chars"])
    return {
        "file": str(labelled),
        "kinds_enabled": list(cfg.pii.kinds),
        "by_kind": {
            k: {
                **v,
                "recall": _ratio(v["recalled"], v["gold"]),
                "typed_recall": _ratio(v["typed"], v["gold"]),
                # Share of all unlabelled characters this kind masked: its own over-removal.
                "over_removal": _ratio(v["over_removed_chars"], non_pii_chars),
            }
            for k, v in per_kind.items()
        },
        "by_bucket": buckets,
        "total": total,
    }


SLICE_KEYS = ("slice", "language", "kind", "source", "topic")  # a record's fields the safety eval slices by
PASSES = ("first_pass", "both_passes")


def _toxic_label(path: Path, lineno: int, rec: dict[str, Any]) -> bool:
    """A record's gold label: "toxic": true/false, or "label": toxic / offensive / clean."""
    if "toxic" in rec or "label" not in rec:
        if not isinstance(rec.get("toxic"), bool):
            raise LabelledFileError(f"{path}:{lineno}: field 'toxic' missing or not a bool (or give 'label': toxic/clean)")
        return rec["toxic"]
    label = rec["label"]
    if not isinstance(label, str) or label.lower() not in SAFETY_LABELS:
        raise LabelledFileError(f"{path}:{lineno}: field 'label' must be one of {', '.join(SAFETY_LABELS)}, got {label!r}")
    return SAFETY_LABELS[label.lower()]


def _new_counts() -> dict[str, Any]:
    gate = lambda: {"flagged": 0, "true_positives": 0, "false_positives": 0, "false_positive_lines": []}  # noqa: E731
    return {"docs": 0, "toxic": 0, "to_classifier": 0, **{p: gate() for p in PASSES}}


def _count(c: dict[str, Any], lineno: int, toxic: bool, sent: bool, flags: tuple[bool, bool]) -> None:
    c["docs"] += 1
    c["toxic"] += toxic
    c["to_classifier"] += sent
    for name, flagged in zip(PASSES, flags):
        g = c[name]
        g["flagged"] += flagged
        g["true_positives"] += flagged and toxic
        if flagged and not toxic:
            g["false_positives"] += 1
            if len(g["false_positive_lines"]) < MAX_EXAMPLES:
                g["false_positive_lines"].append(lineno)


def _rates(c: dict[str, Any], layered: bool) -> dict[str, Any]:
    """Counts with each pass's false-positive rate (clean removed / clean) and recall; without a
    classifier "both_passes" is None. The top-level fields are the gate as configured."""
    clean = c["docs"] - c["toxic"]
    gates = {
        p: {
            **c[p],
            "false_positive_rate": _ratio(c[p]["false_positives"], clean),
            "recall": _ratio(c[p]["true_positives"], c["toxic"]),
        }
        for p in PASSES
    }
    configured = gates["both_passes" if layered else "first_pass"]
    return {
        "docs": c["docs"],
        "toxic": c["toxic"],
        "clean": clean,
        "to_classifier": c["to_classifier"],
        **configured,
        "first_pass": gates["first_pass"],
        "both_passes": gates["both_passes"] if layered else None,
    }


def eval_safety(labelled: Path, cfg: CurateConfig, base_dir: Path | None = None) -> dict[str, Any]:
    """False-positive rate and recall of the toxicity gate, per value of every slice key the
    records carry (SLICE_KEYS), for the word list alone and, with safety.labelled, both passes."""
    step, topics = Safety(cfg, base_dir), Classify(cfg, base_dir)
    with tempfile.TemporaryDirectory(prefix="tokenmill-safety-eval-") as work:
        step.prepare(Path(work))  # trains the classifier, when there is one, on its labelled file
        step.setup(Path(work))
        manifest_path = Path(work) / SAFETY_SUBDIR / "manifest.json"
        classifier = json_limits.load_file(manifest_path) if manifest_path.is_file() else None
        if cfg.classify:  # the config's own classifiers (curate.classify) slice too: "topic when one exists"
            topics.prepare(Path(work))
            topics.setup(Path(work))
    layered = classifier is not None
    counts: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(_new_counts))
    total = _new_counts()
    for lineno, rec in _records(labelled, {"text": str}):
        toxic = _toxic_label(labelled, lineno, rec)
        sig = step.score(rec["text"])
        flags = (sig["toxicity"] > cfg.safety.threshold, step.decide(sig) is not None)
        sent = sig["decided_by"] == "classifier"
        _count(total, lineno, toxic, sent, flags)
        for key in SLICE_KEYS:
            if isinstance(rec.get(key), str):
                _count(counts[key][rec[key]], lineno, toxic, sent, flags)
        for name, label in _predicted_labels(topics, rec["text"]).items():
            _count(counts[f"classify:{name}"][label], lineno, toxic, sent, flags)
    keys = [k for k in SLICE_KEYS if k in counts] + sorted(k for k in counts if k not in SLICE_KEYS)
    slices = {key: {v: _rates(c, layered) for v, c in sorted(counts[key].items())} for key in keys}
    total_rates = _rates(total, layered)
    total_rates.pop("false_positive_lines")
    return {
        "file": str(labelled),
        "threshold": cfg.safety.threshold,
        "word_list": cfg.safety.word_list or "built-in",
        "band": list(cfg.safety.band) if layered else None,
        "classifier_threshold": cfg.safety.classifier_threshold if layered else None,
        "classifier": classifier,
        "by_slice": slices.get("slice", {}),
        "slices": slices,
        "total": total_rates,
    }


def _predicted_labels(topics: Classify, text: str) -> dict[str, str]:
    """{classifier name: its most probable label} for every curate.classify model loaded in `topics`."""
    if not topics.models:
        return {}
    tokens = tokenize(text)
    return {name: model.labels[int(model.predict_proba(tokens).argmax())] for name, model in topics.models.items()}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def safety_table(result: dict[str, Any]) -> str:
    """eval_safety's result as a table: per slice, false positives and recall of each pass."""
    layered = result["classifier"] is not None
    head = f"{'slice':<32} {'docs':>6} {'clean':>6} {'toxic':>6}  {'FP 1st':>7} {'rec 1st':>7}"
    head += f"  {'FP both':>7} {'rec both':>8} {'to 2nd':>6}" if layered else ""
    lines = [f"{result['file']}: word list {result['word_list']}, threshold {result['threshold']}"]
    if layered:
        clf = result["classifier"]
        lines.append(
            f"second pass: band {result['band']}, P(toxic) > {result['classifier_threshold']}, "
            f"held-out AUC {clf.get('auc')}, trained on {clf['examples']}"
        )
    lines.append(head)
    rows = [(f"{key}={value}", r) for key, by in result["slices"].items() for value, r in by.items()]
    for name, r in [*rows, ("TOTAL", result["total"])]:
        first = r["first_pass"]
        line = f"{name[-32:]:<32} {r['docs']:>6} {r['clean']:>6} {r['toxic']:>6}  {_pct(first['false_positive_rate']):>7} "
        line += f"{_pct(first['recall']):>7}"
        if layered:
            both = r["both_passes"]
            line += f"  {_pct(both['false_positive_rate']):>7} {_pct(both['recall']):>8} {r['to_classifier']:>6}"
        lines.append(line)
    return "\n".join(lines)


MIN_DOCS = 10  # a language's keep rate enters the spread from this many documents
TOP_RULES = 5


def eval_quality(labelled: Path, cfg: CurateConfig, min_docs: int = MIN_DOCS) -> dict[str, Any]:
    """Keep rate per language (and the spread across languages) of the quality step on a labelled
    file, with the rules that removed the most and, on parallel text, per-group agreement."""
    from tokenmill.data.steps.quality import Quality, check_min_chars, check_rules, measure

    step = Quality(cfg)
    step.setup(None)
    per_lang: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "docs": 0,
            "kept": 0,
            "rules": defaultdict(int),
            "low_quality": 0,
            "low_quality_removed": 0,
            "good": 0,
            "good_kept": 0,
            "profile": "",
        }
    )
    groups: dict[str, dict[str, bool]] = defaultdict(dict)
    for lineno, rec in _records(labelled, {"text": str, "language": str}):
        kind = rec.get("kind") or "web"
        if kind not in FAMILIES:
            raise LabelledFileError(f"{labelled}:{lineno}: kind {kind!r} is not one of {', '.join(FAMILIES)}")
        # a QualityKind: checked against FAMILIES (keyed by exactly those names) just above
        judge = step.judge(rec["language"], cast(QualityKind, kind))
        signals, _ = measure(rec["text"], rules=judge.rules, book=judge.book)
        rejection = check_min_chars(len(rec["text"]), judge.rules.min_chars(cfg.min_chars)) or check_rules(
            signals, judge.cfg, judge.apply
        )
        kept = rejection is None
        s = per_lang[rec["language"]]
        s["docs"] += 1
        s["kept"] += kept
        s["profile"] = judge.rules.profile
        if rejection is not None:
            s["rules"][rejection.rule] += 1
        if isinstance(rec.get("low_quality"), bool):
            low = rec["low_quality"]
            s["low_quality"] += low
            s["low_quality_removed"] += low and not kept
            s["good"] += not low
            s["good_kept"] += kept and not low
        if rec.get("group") is not None:
            groups[str(rec["group"])][rec["language"]] = kept
    by_language = _by_language(per_lang, groups)
    rates = [v["keep_rate"] for v in by_language.values() if v["docs"] >= min_docs and v["keep_rate"] is not None]
    multi = [g for g in groups.values() if len(g) >= 2]
    return {
        "file": str(labelled),
        "min_docs": min_docs,
        "by_language": by_language,
        "spread": max(rates) - min(rates) if rates else None,
        "max_gap_to_english": max(
            (
                abs(v["gap_to_english"])
                for v in by_language.values()
                if v["shared_with_english"] >= min_docs and v["gap_to_english"] is not None
            ),
            default=None,
        ),
        "agreement": _ratio(sum(len(set(g.values())) == 1 for g in multi), len(multi)),
        "groups": len(multi),
    }


def _by_language(per_lang: dict[str, dict[str, Any]], groups: dict[str, dict[str, bool]]) -> dict[str, dict[str, Any]]:
    """Per language, sorted: its keep rate, gap to English on shared groups, top rules and, where
    labelled, the share of low-quality documents removed and of good ones kept."""
    by_language = {}
    for lang, s in sorted(per_lang.items()):
        rate = _ratio(s["kept"], s["docs"])
        gap, shared = _gap_to_english(lang, per_lang, groups)
        by_language[lang] = {
            "docs": s["docs"],
            "kept": s["kept"],
            "keep_rate": rate,
            "profile": s["profile"],
            "gap_to_english": gap,
            "shared_with_english": shared,
            "top_rules": dict(sorted(s["rules"].items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_RULES]),
            **(
                {
                    "low_quality_removed": _ratio(s["low_quality_removed"], s["low_quality"]),
                    "good_kept": _ratio(s["good_kept"], s["good"]),
                }
                if s["low_quality"] + s["good"]
                else {}
            ),
        }
    return by_language


def _gap_to_english(
    lang: str, per_lang: dict[str, dict[str, Any]], groups: dict[str, dict[str, bool]]
) -> tuple[float | None, int]:
    """(keep rate minus English's in points, documents compared): on the same pages where the
    file has groups in both languages (translations left out of one language do not move it),
    otherwise over every document of each."""
    if "en" not in per_lang:
        return None, 0
    pairs = [(g[lang], g["en"]) for g in groups.values() if lang in g and "en" in g]
    if pairs:
        return round(100 * (sum(a for a, _ in pairs) - sum(b for _, b in pairs)) / len(pairs), 1), len(pairs)
    mine, en = per_lang[lang], per_lang["en"]
    return round(100 * (mine["kept"] / mine["docs"] - en["kept"] / en["docs"]), 1), mine["docs"]
