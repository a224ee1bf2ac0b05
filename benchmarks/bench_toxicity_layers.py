"""Toxicity in layers on real labelled data: the word list alone vs with the second-pass classifier.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_toxicity_layers.py [--out benchmarks/results/toxicity_layers.json]

Trains the classifier on benchmarks/labels/toxicity_train.jsonl and measures on
toxicity_eval.jsonl (built from the real corpora by build_toxicity_labels.py; split by source
file) with curate-eval's own counting (data.curate_eval.eval_safety): per slice (topic, kind,
language) the false-positive rate (clean removed / clean) and recall (toxic removed / toxic) of
the first pass alone and of both passes, and the share of documents sent to the second pass.
Two word lists: the built-in one (unambiguous obscenities and slurs only) and a "broad" one, the
built-in list plus words with innocent senses that cruder lists hold (bastard, whore, hell, kill,
rape, breast, ...), the setting where a first pass over-removes scripture, law and medicine. Bands:
the default [0.005, 0.25] and [0, 0.25] (every document with a score up to 0.25 goes to the
classifier, the costly extreme); classifier thresholds 0.5 (the default) and, in the default
band, 0.25 and 0.1 (a sweep reported as such: not a value tuned on the eval file). Cost: microseconds per document of each pass, best of REPEATS
timings over the eval texts on one core (the classifier's cost per document it scores, and
amortised over all documents at the measured share sent).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from provenance import LoadSampler, provenance  # noqa: E402

from tokenmill.config import CurateConfig  # noqa: E402
from tokenmill.data.classifiers.ngram_lm import tokenize  # noqa: E402
from tokenmill.data.curate_eval import eval_safety  # noqa: E402
from tokenmill.data.steps.safety import BUILTIN_LIST, Safety, read_terms, toxicity  # noqa: E402

TRAIN, EVAL = HERE / "labels" / "toxicity_train.jsonl", HERE / "labels" / "toxicity_eval.jsonl"
BROAD_EXTRA = (
    "bastard bastards whore whores whoredom ass asses cock cocks dick dicks pussy coon coons dyke dykes fag fags "
    "rape raped rapes sex sexual anal penis vagina breast breasts kill killed killing murder murdered drug drugs "
    "damn damned hell slut sluts suck sucks"
).split()
BANDS = {"default": (0.005, 0.25), "from_zero": (0.0, 0.25)}
CLASSIFIER_THRESHOLDS = (0.5, 0.25, 0.1)  # the default, and two lower cuts (reported, not tuned on the eval file)
REPEATS = 3


def slice_rows(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per slice value (key=value): docs, clean, toxic, FP rate and recall of each pass, share sent."""
    out = {}
    for key, by in res["slices"].items():
        if key == "source":
            continue
        for value, r in by.items():
            out[f"{key}={value}"] = {
                "docs": r["docs"],
                "clean": r["clean"],
                "toxic": r["toxic"],
                "fp_first": r["first_pass"]["false_positive_rate"],
                "fp_both": r["both_passes"]["false_positive_rate"],
                "false_positives_first": r["first_pass"]["false_positives"],
                "false_positives_both": r["both_passes"]["false_positives"],
                "recall_first": r["first_pass"]["recall"],
                "recall_both": r["both_passes"]["recall"],
                "share_to_classifier": r["to_classifier"] / r["docs"],
            }
    return out


def best_us(fn: Any, items: list[Any]) -> float:
    """Microseconds per item of fn over items, best of REPEATS."""
    best = float("inf")
    for _ in range(REPEATS):
        t = time.perf_counter()
        for x in items:
            fn(x)
        best = min(best, time.perf_counter() - t)
    return 1e6 * best / max(1, len(items))


def costs(cfg: CurateConfig, texts: list[str]) -> dict[str, Any]:
    """µs/doc of the word list and of the classifier, and the share of documents in the band."""
    step = Safety(cfg, HERE)
    with tempfile.TemporaryDirectory() as work:
        t = time.perf_counter()
        step.prepare(Path(work))
        train_s = time.perf_counter() - t
        step.setup(Path(work))
    assert step.classifier is not None
    sent = [x for x in texts if step.in_band(toxicity(x, step.terms)[0])]
    first_us = best_us(lambda x: toxicity(x, step.terms), texts)
    clf_us = best_us(lambda x: step.classifier.score(tokenize(x)), texts)  # every text: a stable per-doc figure
    share = len(sent) / len(texts)
    return {
        "train_s": round(train_s, 3),
        "first_pass_us_per_doc": round(first_us, 2),
        "classifier_us_per_scored_doc": round(clf_us, 2),
        "classifier_us_per_doc_amortised": round(clf_us * share, 2),
        "share_to_classifier": round(share, 4),
        "docs": len(texts),
        "mean_chars": round(sum(map(len, texts)) / len(texts), 1),
    }


def run_config(name: str, word_list: str | None, band: tuple[float, float], cut: float, texts: list[str]) -> dict[str, Any]:
    cfg = CurateConfig(safety={"labelled": str(TRAIN), "band": band, "word_list": word_list, "classifier_threshold": cut})
    res = eval_safety(EVAL, cfg, HERE)
    total = res["total"]
    print(f"{name}: FP {total['first_pass']['false_positives']} -> {total['both_passes']['false_positives']}, "
          f"recall {total['first_pass']['recall']:.3f} -> {total['both_passes']['recall']:.3f}, "
          f"sent {total['to_classifier']}/{total['docs']}", file=sys.stderr)
    return {
        "word_list": "built-in" if word_list is None else "broad",
        "band": list(band),
        "classifier_threshold": cut,
        "classifier": res["classifier"],
        "total": {k: total[k] for k in ("docs", "clean", "toxic", "to_classifier")}
        | {p: {k: v for k, v in total[p].items() if k != "false_positive_lines"} for p in ("first_pass", "both_passes")},
        "slices": slice_rows(res),
        "cost": costs(cfg, texts),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "toxicity_layers.json")
    args = ap.parse_args()
    prov = provenance()
    texts = [json.loads(line)["text"] for line in EVAL.read_text(encoding="utf-8").splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        broad = Path(tmp) / "broad.txt"
        broad.write_text("\n".join(sorted(read_terms(BUILTIN_LIST) | set(BROAD_EXTRA))) + "\n", encoding="utf-8")
        with LoadSampler() as load:
            configs = {
                f"{lst}_{band}_p{cut}": run_config(
                    f"{lst}_{band}_p{cut}", None if lst == "builtin" else str(broad), BANDS[band], cut, texts
                )
                for lst in ("builtin", "broad")
                for band in BANDS
                for cut in (CLASSIFIER_THRESHOLDS if band == "default" else CLASSIFIER_THRESHOLDS[:1])
            }
    result = {
        **prov,
        "load": load.summary(),
        "train_file": str(TRAIN.relative_to(HERE.parent)),
        "eval_file": str(EVAL.relative_to(HERE.parent)),
        "broad_extra_words": BROAD_EXTRA,
        "configs": configs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: {"total": v["total"], "cost": v["cost"]} for k, v in configs.items()}, indent=1))


if __name__ == "__main__":
    main()
