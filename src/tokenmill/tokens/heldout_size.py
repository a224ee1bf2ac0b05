"""When is a bucket's held-out set too small to report bits-per-byte from?

The target: the 95% interval of a bucket's held-out bits-per-byte (eval/perplexity.py
`bpb_interval`: documents as the unit, Student t) should be no wider than ±10% of it. That is
about the size of the differences the evaluation table is read for: a bucket against its unigram
baseline and the buckets against each other differ by 10–30% in a small run (docs/evaluation.md,
"How many held-out documents"). Tokenize knows only a bucket's documents and tokens, so the target
becomes two floors; each alone, at the spreads measured on real held-out data, puts the
half-width at about the target, so below either the interval is expected to be wider:

  documents  the relative spread of bits-per-byte between documents of one homogeneous prose
             collection, c = rel. standard error · √n, was 0.124 (CPython's reStructuredText docs,
             100 files), 0.095 (Linux kernel docs, 81 files) and 0.107 (the demo's web bucket),
             scored by the demo model; t₀.₉₇₅,ₙ₋₁ · 0.124 / √n ≤ 10% first at n = 9. Source code
             spreads 3× as much (c 0.31–0.38) and needs ~50 documents: the report, which sees the
             measured interval, says so; this floor is the least any bucket needs.
  tokens     per-token NLL varies with a coefficient of variation of 0.46–0.64 (the demo's
             buckets; 0.65 taken), and tokens inside a document are correlated: 64-token blocks
             vary 1.7–5.8× as much as independent tokens would (6 taken), so
             (1.96 · 0.65 / 10%)² · 6 = 974, rounded up to 1,000.

The measurement: benchmarks/bench_heldout_interval.py, results in
benchmarks/results/heldout_interval.json.
"""

from __future__ import annotations

from tokenmill.tokens.config import TokenizeConfig

TARGET_HALF_WIDTH = 0.10  # relative 95% half-width of bits-per-byte that a bucket should reach
MIN_HELDOUT_DOCS = 9
MIN_HELDOUT_TOKENS = 1_000  # scored tokens: each document's closing EOS is not scored


def too_small(docs: int, tokens: int) -> bool:
    """Whether a held-out set of `docs` documents and `tokens` scored tokens is under either floor."""
    return docs < MIN_HELDOUT_DOCS or tokens < MIN_HELDOUT_TOKENS


def shortfall(docs: int, tokens: int) -> str:
    """What a held-out set lacks, in words ("" when it has enough): "5 documents (fewer than 9)"."""
    parts = []
    if docs < MIN_HELDOUT_DOCS:
        parts.append(f"{docs:,} document{'s' if docs != 1 else ''} (fewer than {MIN_HELDOUT_DOCS})")
    if tokens < MIN_HELDOUT_TOKENS:
        parts.append(f"{tokens:,} tokens (fewer than {MIN_HELDOUT_TOKENS:,})")
    return " and ".join(parts)


def small_heldout_message(bucket: str, docs: int, tokens: int, total_docs: int, cfg: TokenizeConfig) -> str:
    """The one line tokenize prints for a bucket whose held-out set is too small, with what to change."""
    lacks = shortfall(docs, tokens)
    if total_docs <= MIN_HELDOUT_DOCS:  # a bigger fraction cannot help: one document always trains
        fix = f"the bucket has {total_docs:,} documents in all; give it more data or merge it into another bucket"
    else:
        fix = (
            f"raise tokenize.val_fraction (now {cfg.val_fraction:g}) or tokenize.min_val_docs (now {cfg.min_val_docs}) "
            f"to hold out at least {MIN_HELDOUT_DOCS} documents and {MIN_HELDOUT_TOKENS:,} tokens"
        )
    return (
        f"warning: bucket {bucket!r} holds out {lacks}: its bits-per-byte will have a 95% interval wider than "
        f'±{TARGET_HALF_WIDTH:.0%}; {fix} (docs/evaluation.md, "How many held-out documents")'
    )
