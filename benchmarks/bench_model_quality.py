"""model_quality on real data: training time of the n-gram LM and the classifier, scoring speed.

Reference (the "good" side): public-domain books (shared/corpora/fetch_real_corpora.sh puts them
under /work/real_corpora/books); random side and scored documents: the real HTML pages under
/work/real_corpora/web_html, extracted and normalized beforehand so that only the step is timed.
One process, one core (run it with OMP_NUM_THREADS=1 on a quiet machine for the record).

    python benchmarks/bench_model_quality.py                      # full run
    python benchmarks/bench_model_quality.py --smoke              # seconds: tiny inputs, no numbers to keep
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from tokenmill.config import CurateConfig, SourceConfig
from tokenmill.data.classifiers import linear_classifier as lc
from tokenmill.data.classifiers import ngram_lm
from tokenmill.data import sources as source_step
from tokenmill.data.document import Doc
from tokenmill.data.steps.model_quality import ModelQuality

REAL = Path("/work/real_corpora")


def _score_docs(step: ModelQuality, web: str, n_docs: int) -> list[Doc]:
    """The first n_docs pages of the web source that survive extraction, as the step will see them."""
    docs = []
    for raw in source_step.read_source(SourceConfig(path=web, bucket="web"), step.cfg.max_doc_bytes):
        doc = Doc.from_raw(raw)
        if raw.problem is None and step._clean(doc):
            docs.append(doc)
            if len(docs) >= n_docs:
                break
    return docs


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", default=str(REAL / "books"))
    ap.add_argument("--web", default=str(REAL / "web_html"))
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--negative-every", type=int, default=10)
    ap.add_argument("--max-examples", type=int, default=20_000)
    ap.add_argument("--docs", type=int, default=1000, help="documents scored for the speed figure")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny inputs: checks the script runs")
    args = ap.parse_args()
    if args.smoke:
        args.reference = str(REAL / "books" / "austen" / "persuasion.txt")
        args.web = str(REAL / "web_html" / "trafilatura-tests")
        args.max_examples, args.docs, args.repeat, args.negative_every = 200, 20, 1, 1

    cfg = CurateConfig.model_validate({
        "sources": [{"path": args.web, "bucket": "web"}],
        "model_quality": {"reference": args.reference, "ngram_order": args.order,
                          "negative_every": args.negative_every, "max_examples": args.max_examples},
    })
    work = Path(tempfile.mkdtemp(prefix="bench-mq-"))
    try:
        step = ModelQuality(cfg)
        t = time.perf_counter()
        step.prepare(work)
        prepare_s = time.perf_counter() - t
        timings = dict(step.timings)
        t = time.perf_counter()
        step.prepare(work)  # idempotent: fingerprints only
        reprepare_s = time.perf_counter() - t
        t = time.perf_counter()
        step.setup(work)
        setup_s = time.perf_counter() - t
        manifest = json.loads((work / "model_quality" / "manifest.json").read_text())
        model_mb = sum(p.stat().st_size for p in (work / "model_quality").iterdir()) / 1e6

        docs = _score_docs(step, args.web, args.docs)
        texts = [d.text for d in docs]
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        tokens = [ngram_lm.tokenize(t) for t in texts]
        n_tokens = sum(map(len, tokens))
        assert step.lm is not None and step.classifier is not None
        lm, clf = step.lm, step.classifier
        tok_s = _best(lambda: [ngram_lm.tokenize(t) for t in texts], args.repeat)
        lm_s = _best(lambda: [lm.perplexity(x) for x in tokens], args.repeat)
        clf_s = _best(lambda: [clf.score(x) for x in tokens], args.repeat)
        step_s = _best(lambda: [step.process(d) for d in docs], args.repeat)
        pps = np.array([d.model_quality["perplexity"] for d in docs])
        scores = np.array([d.model_quality["classifier_score"] for d in docs])
        tiers = {t: sum(d.model_quality["tier"] == t for d in docs) for t in ("head", "middle", "tail")}
        result = {
            "reference": args.reference, "web": args.web, "order": args.order,
            "lm": {k: manifest["lm"][k] for k in ("documents", "vocab", "ngrams")},
            "random": {k: v for k, v in manifest.get("random", {}).items() if k != "fingerprint"},
            "prepare_s": round(prepare_s, 2), "prepare_phases_s": {k: round(v, 2) for k, v in timings.items()},
            "reprepare_s": round(reprepare_s, 3), "setup_s": round(setup_s, 3), "model_mb": round(model_mb, 1),
            "scored_docs": len(docs), "mean_doc_bytes": round(n_bytes / max(len(docs), 1)),
            "docs_per_s": round(len(docs) / step_s, 1), "mb_per_s": round(n_bytes / step_s / 1e6, 2),
            "ns_per_token": {"tokenize": round(tok_s / n_tokens * 1e9), "lm": round(lm_s / n_tokens * 1e9),
                             "classifier": round(clf_s / n_tokens * 1e9)},
            "perplexity_p10_p50_p90": [round(float(x), 1) for x in np.percentile(pps, [10, 50, 90])],
            "classifier_p10_p50_p90": [round(float(x), 4) for x in np.percentile(scores, [10, 50, 90])],
            "tiers": tiers, "classifier_version": lc.VERSION, "lm_version": ngram_lm.VERSION,
        }
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
