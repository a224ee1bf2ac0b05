"""The auto perplexity gate of model_quality on the labelled dirty-web corpus (benchmarks/dirty_web.py).

For each corpus seed: build the corpus, run `tokenmill curate` on it (a real process) with the
benchmark's reference (two Austen novels, maint-guide en/de, linux-doc's English .rst files,
debian-reference de/fr: disjoint by file/site from the corpus's clean text), and report
  pipeline    per kind: the share of all rows the gate (rule model_quality:perplexity) removed;
  candidates  per candidate statistic, over the documents that reached the gate: per-kind
              quantiles and the share removed at a cut calibrated like the step's (per language,
              the q-quantile of the held-out reference passages' values, q in QUANTILES):
                perplexity       the n-gram perplexity (CCNet's score)
                unigram_ratio    perplexity / the same LM's unigram perplexity of the document
                context_ratio    issue 41's statistic (unigram vs bigram gain between the 300 most
                                 probable tokens, 5 pairs or more), whose cut was fitted on shuffles
                word_order       minus the step's word-order z (data/classifiers/word_order.py;
                                 negated so that, like the others, higher reads worse)

    python benchmarks/record.py benchmarks/results/perplexity_gate.json -- \\
        benchmarks/bench_perplexity_gate.py --corpora /work/real_corpora --seeds 41 7
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_dirty_web import _row_id  # noqa: E402
from dirty_web import CLEAN_KINDS, build, write_jsonl, write_reference  # noqa: E402

from tokenmill.config import CurateConfig  # noqa: E402
from tokenmill.data.classifiers import ngram_lm  # noqa: E402
from tokenmill.data.classifiers.word_order import order_test  # noqa: E402
from tokenmill.data.steps import model_quality as mq  # noqa: E402
from tokenmill.data.steps.langid import Identifier  # noqa: E402

QUANTILES = (0.99, 1.0)
MIN_HELD_OUT = 20


def make_reference(corpora: Path, dest: Path) -> Path:
    """The benchmark's reference (dirty_web.write_reference), copied into one folder."""
    write_reference(corpora, dest)
    return dest

def statistics(step: mq.ModelQuality) -> dict[str, Callable[[str], float | None]]:
    lm = step.lm
    assert lm is not None

    def unigram_ratio(text: str) -> float | None:
        seq, pos = ngram_lm.frame(lm.encode(ngram_lm.tokenize(text)))
        pred = pos > 0
        if not pred.any():
            return None
        return float(np.exp(np.mean(lm.uni_logp[seq[pred]] - lm.token_logprobs(seq, pos)[pred])))

    def word_order(text: str) -> float | None:
        test = order_test(lm, ngram_lm.tokenize(text), step.judged, mq.MIN_PAIRS)
        return None if test is None else -test.z

    frequent = lm.frequent_words(300)
    return {"perplexity": lambda t: lm.perplexity(ngram_lm.tokenize(t)), "unigram_ratio": unigram_ratio,
            "context_ratio": lambda t: lm.bigram_ratio(ngram_lm.tokenize(t), frequent, 5), "word_order": word_order}


def gate_rows(out: Path) -> list[dict]:
    """Rows that reached model_quality: kept ones and those it removed (text, language, rule)."""
    rows = []
    for part in sorted(out.glob("*/part-*.parquet")):
        rejected = part.parent.name == "_rejected"
        cols = ["id", "text", "metadata", "language"] + (["step", "rule"] if rejected else [])
        for row in pq.read_table(part, columns=cols).to_pylist():
            if not rejected or row["step"] == "model_quality":
                rows.append({"id": _row_id(row), "text": row["text"], "language": row["language"],
                             "removed": rejected})
    return rows


def candidates(step: mq.ModelQuality, rows: list[dict], kinds: dict[str, str]) -> dict[str, Any]:
    reference, _ = step.reference_texts()
    held = mq._split([p for text in reference for p in mq.passages(text)], True)
    ident = Identifier()
    held_lang = [ident.identify(p)[0] for p in held]
    result: dict[str, Any] = {}
    for name, fn in statistics(step).items():
        held_values: dict[str, list[float]] = {}
        for p, lang in zip(held, held_lang):
            if (v := fn(p)) is not None:
                held_values.setdefault(lang, []).append(v)
        values = [(kinds[r["id"]], r["language"], fn(r["text"])) for r in rows]
        per_kind = {}
        for kind in sorted(set(kinds.values())):
            vs = [v for k, _, v in values if k == kind and v is not None]
            per_kind[kind] = {"n": sum(k == kind for k, _, _ in values),
                              "quantiles_1_10_50_90_99": [round(float(x), 3) for x in np.quantile(vs, [.01, .1, .5, .9, .99])] if vs else None}
        cut_record: dict[str, dict[str, float]] = {}
        for q in QUANTILES:
            cuts = {lang: float(np.quantile(v, q)) for lang, v in held_values.items() if len(v) >= MIN_HELD_OUT}
            for kind in per_kind:
                n = per_kind[kind]["n"]
                removed = sum(k == kind and v is not None and lang in cuts and v > cuts[lang] for k, lang, v in values)
                per_kind[kind][f"removed_at_q{q}"] = round(removed / n, 4) if n else None
            cut_record[f"q{q}"] = {k: round(v, 4) for k, v in sorted(cuts.items())}
        result[name] = {"cuts": cut_record, "kinds": per_kind}
    return result


def run_seed(corpora: Path, seed: int, work: Path) -> dict[str, Any]:
    rows, _ = build(corpora, seed=seed)
    corpus = work / f"dirty-{seed}.jsonl"
    write_jsonl(rows, corpus)
    reference = make_reference(corpora, work / "reference")
    out = work / f"out-{seed}"
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    subprocess.run([sys.executable, "-m", "tokenmill", "curate", str(corpus), "-o", str(out),
                    "--set", f"curate.model_quality.reference={reference}"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    kinds = {r["id"]: r["kind"] for r in rows}
    reached = gate_rows(out)
    pipeline = {}
    for kind in sorted(set(kinds.values())):
        n = sum(k == kind for k in kinds.values())
        removed = sum(kinds[r["id"]] == kind and r["removed"] for r in reached)
        pipeline[kind] = {"rows": n, "reached_gate": sum(kinds[r["id"]] == kind for r in reached),
                          "removed_by_gate": removed, "removed_share": round(removed / n, 4)}
    clean = [k for k in pipeline if k in CLEAN_KINDS]
    pipeline["_clean_removed_share"] = round(sum(pipeline[k]["removed_by_gate"] for k in clean)
                                             / sum(pipeline[k]["rows"] for k in clean), 4)
    cfg = CurateConfig.model_validate({"sources": [{"path": str(corpus), "bucket": "web"}],
                                       "model_quality": {"reference": str(reference)}})
    step = mq.ModelQuality(cfg)
    step.prepare(work / f"mq-{seed}")
    step.setup(work / f"mq-{seed}")
    return {"pipeline": pipeline, "calibration": step.calibration, "candidates": candidates(step, reached, kinds)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[41, 7])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pplgate-") as tmp:
        result = {f"seed_{s}": run_seed(args.corpora, s, Path(tmp)) for s in args.seeds}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
