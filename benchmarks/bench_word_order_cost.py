"""What the auto perplexity gate's word-order test and the non-word rule cost per document, beside
what model_quality already computes for every document (the n-gram perplexity) and the context
ratio the test replaced.

One LM (trigram, modified Kneser-Ney, as the step trains) on two Austen novels and the English
Debian handbook; the documents are 400 passages of about 3,000 characters from Python's HTML
documentation (extracted by tokenmill) and the Spurgeon commentary: design collections only. The
three scorers run over all documents in turn, rounds interleaved, and the median round is quoted
per document (tokenizing is timed once, apart: every scorer shares it in the step).

    PYTHONPATH=src .venv/bin/python benchmarks/record.py benchmarks/results/word_order_cost.json \\
        --result /tmp/woc.json -- benchmarks/bench_word_order_cost.py --corpora /work/real_corpora --json /tmp/woc.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tokenmill.data.classifiers import ngram_lm  # noqa: E402
from tokenmill.data.classifiers.nonwords import NearWords  # noqa: E402
from tokenmill.data.classifiers.word_order import judged_words, order_test  # noqa: E402
from tokenmill.data.steps import model_quality as mq  # noqa: E402
from tokenmill.data.steps.extract import extract  # noqa: E402

ROUNDS = 7
DOCS = 400


def material(corpora: Path) -> tuple[list[str], list[str]]:
    """(reference texts, documents): design collections only."""
    books = corpora / "books"
    reference = [(books / "austen" / n).read_text(encoding="utf-8") for n in ("northanger-abbey.txt", "persuasion.txt")]
    handbook = sorted((corpora / "web_html" / "debian-handbook" / "en").glob("**/*.html"))
    reference += [extract(p.read_text(encoding="utf-8", errors="replace"))[0] or "" for p in handbook]
    pages = sorted((corpora / "web_html" / "python3.11-doc").glob("**/*.html"))[::3]
    docs = [p for page in pages for p in mq.passages(extract(page.read_text(encoding="utf-8", errors="replace"))[0] or "")]
    spurgeon = sorted((books / "spurgeon-treasury-of-david").glob("*.txt"))
    docs += [p for f in spurgeon for p in mq.passages(f.read_text(encoding="utf-8"))]
    docs = [d for d in docs if len(d) >= 1500]
    return reference, docs[:: max(1, len(docs) // DOCS)][:DOCS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    reference, docs = material(args.corpora)
    lm = ngram_lm.train((ngram_lm.tokenize(t) for t in reference), 3)
    t = time.perf_counter()
    tokens = [ngram_lm.tokenize(d) for d in docs]
    tokenize_s = time.perf_counter() - t
    frequent, judged = lm.frequent_words(300), judged_words(lm, mq.JUDGED_WORDS)
    t = time.perf_counter()
    near = NearWords(lm)
    near_index_s = time.perf_counter() - t
    scorers = {
        "perplexity": lambda tok: lm.perplexity(tok),
        "context_ratio (before)": lambda tok: lm.bigram_ratio(tok, frequent, 5),
        "word_order_test (now)": lambda tok: order_test(lm, tok, judged, mq.MIN_PAIRS),
        "nonword_frac": lambda tok: near.frac(tok),
    }
    rounds: dict[str, list[float]] = {k: [] for k in scorers}
    for _ in range(ROUNDS):
        for name, fn in scorers.items():
            t = time.perf_counter()
            for tok in tokens:
                fn(tok)
            rounds[name].append(time.perf_counter() - t)
    per_doc = {k: statistics.median(v) / len(docs) * 1e6 for k, v in rounds.items()}
    result = {
        "documents": len(docs),
        "mean_tokens": round(sum(map(len, tokens)) / len(tokens), 1),
        "tested": sum(order_test(lm, tok, judged, mq.MIN_PAIRS) is not None for tok in tokens),
        "rounds": ROUNDS,
        "tokenize_us_per_doc": round(tokenize_s / len(docs) * 1e6, 1),
        "us_per_doc_median": {k: round(v, 1) for k, v in per_doc.items()},
        "word_order_over_perplexity": round(per_doc["word_order_test (now)"] / per_doc["perplexity"], 3),
        "word_order_over_context_ratio": round(per_doc["word_order_test (now)"] / per_doc["context_ratio (before)"], 3),
        "nonword_over_perplexity": round(per_doc["nonword_frac"] / per_doc["perplexity"], 3),
        "nonword_index_seconds": round(near_index_s, 3),
        "round_seconds": {k: [round(x, 4) for x in v] for k, v in rounds.items()},
    }
    print(json.dumps({k: v for k, v in result.items() if k != "round_seconds"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
