"""Line dedup: a footer found in at least min_docs documents goes, unique and short lines stay,
shard counts merge to the whole-corpus counts, documents left too short get their rule."""

from __future__ import annotations

import numpy as np

from tokenmill.config import LineDedupConfig
from tokenmill.data.dedup.lines import (RULE_TOO_SHORT, applies, count_units, frequent_units, merge_counts,
                                      remove_units, too_short_rejection, unit_hashes)

CFG = LineDedupConfig(min_docs=3, min_chars=10)
FOOTER = "Copyright 2024 Example Corp. All rights reserved."
MENU = "Home | Products | About us | Contact"


def _docs() -> list[str]:
    docs = [f"{MENU}\nArticle number {i} talks about topic {i * 7}.\n\n{FOOTER}\n{FOOTER}" for i in range(3)]
    docs.append(f"{MENU}\nA page with the menu but not the footer, number {99}.")
    docs.append("}\n}\n}\nshort\nA unique line that appears only here, in one document.")
    return docs


def _frequent(docs: list[str], cfg: LineDedupConfig = CFG) -> np.ndarray:
    return frequent_units(count_units([unit_hashes(d, cfg) for d in docs]), cfg.min_docs)


def test_footer_in_min_docs_documents_is_removed_unique_lines_kept():
    docs = _docs()
    frequent = _frequent(docs)
    assert len(frequent) == 2  # the menu (4 docs) and the footer (3 docs)
    text, n = remove_units(docs[0], frequent, CFG)
    assert text == "Article number 0 talks about topic 0." and n == 3  # menu + both footer copies
    text, n = remove_units(docs[3], frequent, CFG)
    assert text == "A page with the menu but not the footer, number 99." and n == 1
    assert remove_units(docs[4], frequent, CFG) == (docs[4], 0)  # short lines never removed


def test_counts_are_document_frequency_and_threshold_is_inclusive():
    docs = _docs()
    counts = count_units([unit_hashes(d, CFG) for d in docs])
    by_count = dict(zip(counts.hashes.tolist(), counts.counts.tolist()))
    footer = unit_hashes(FOOTER, CFG)[0]
    assert by_count[int(footer)] == 3  # twice in a document counts once
    assert footer in frequent_units(counts, 3) and footer not in frequent_units(counts, 4)
    assert len(unit_hashes("  " + FOOTER + "  \n" + FOOTER, CFG)) == 1  # compared stripped


def test_shard_counts_merge_to_corpus_counts():
    docs = _docs() * 2
    whole = count_units([unit_hashes(d, CFG) for d in docs])
    parts = [count_units([unit_hashes(d, CFG) for d in docs[i: i + 3]]) for i in range(0, len(docs), 3)]
    for merged in (merge_counts(parts), merge_counts(parts[::-1])):
        assert np.array_equal(merged.hashes, whole.hashes) and np.array_equal(merged.counts, whole.counts)
    assert len(merge_counts([]).hashes) == 0


def test_paragraph_units():
    cfg = LineDedupConfig(unit="paragraph", min_docs=2, min_chars=10)
    notice = "This site uses cookies.\nBy continuing you accept them."
    docs = [f"Story {i} begins here and goes on.\n\n{notice}\n  \nThe end of story {i}." for i in range(2)]
    frequent = _frequent(docs, cfg)
    text, n = remove_units(docs[1], frequent, cfg)
    assert text == "Story 1 begins here and goes on.\n\nThe end of story 1." and n == 1
    # the lines of the notice alone are not frequent paragraphs
    assert remove_units("This site uses cookies.", frequent, cfg)[1] == 0


def test_everything_removed_and_too_short_rejection():
    assert remove_units(f"{FOOTER}\n\n{FOOTER}\n", _frequent(_docs()), CFG) == ("", 2)
    r = too_short_rejection(40, 200, 3)
    assert (r.step, r.rule, r.value) == ("line_dedup", RULE_TOO_SHORT, "40") and "200" in r.reason


def test_code_buckets_are_skipped_by_default():
    assert not applies("code", LineDedupConfig()) and applies("web", LineDedupConfig())
