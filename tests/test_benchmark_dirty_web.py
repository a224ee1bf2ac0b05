"""benchmarks/dirty_web.py: the dirty-web oracle corpus is deterministic, has every kind, and
labels each document; mojibake rows are real mojibake that ftfy repairs to the original."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ftfy
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
CORPORA = Path("/work/real_corpora")

import dirty_web  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    if not (CORPORA / "books").is_dir():
        pytest.skip(f"{CORPORA} is absent (shared/corpora/fetch_real_corpora.sh builds it)")
    return dirty_web.build(CORPORA, per_kind=4, seed=7)[0]


def test_every_kind_present_labelled_and_ids_unique(rows):
    assert sorted({r["kind"] for r in rows}) == sorted(dirty_web.KINDS)
    assert len(dirty_web.JUNK_KINDS) >= 8
    assert all(r["clean"] == (r["kind"] in dirty_web.CLEAN_KINDS) for r in rows)
    assert all(r["text"].strip() and r["source"] for r in rows)
    assert len({r["id"] for r in rows}) == len(rows) == 4 * len(dirty_web.KINDS)


def test_build_is_deterministic_and_seeded(rows, tmp_path):
    again = dirty_web.build(CORPORA, per_kind=4, seed=7)[0]
    assert again == rows
    assert [r["text"] for r in dirty_web.build(CORPORA, per_kind=4, seed=8)[0]] != [r["text"] for r in rows]
    dirty_web.write_jsonl(rows, tmp_path / "c.jsonl")
    written = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert set(written[0]) == {"id", "text", "kind", "clean", "source"}  # the oracle text stays out


def test_mojibake_is_garbled_and_repairable(rows):
    moji = [r for r in rows if r["kind"] == "mojibake"]
    assert moji and all(r["text"] != r["_original"] and ftfy.fix_text(r["text"]) == r["_original"] for r in moji)
    assert all("Ã" in r["text"] or "â€" in r["text"] or "Â" in r["text"] for r in moji)


def test_clean_documents_are_distinct_and_heldout_is_disjoint():
    if not (CORPORA / "books").is_dir():
        pytest.skip(f"{CORPORA} is absent")
    rows, held = dirty_web.build(CORPORA, per_kind=6, seed=7, heldout=5)
    assert len(held) == 10 and {h["kind"] for h in held} == {"clean_prose", "clean_docs"}
    texts = [r.get("_original") or r["text"] for r in rows if r["clean"]] + [h["text"] for h in held]
    grams = [{tuple(w[i:i + 5]) for i in range(len(w) - 4)} for w in (t.split() for t in texts)]
    for j, later in enumerate(grams):  # every pair, by exact set arithmetic: no index, no hashing
        for earlier in grams[:j]:
            assert len(later & earlier) < 0.5 * len(later), texts[j][:80]
    assert not {h["text"] for h in held} & {r["text"] for r in rows}


def test_reference_is_disjoint_by_file(tmp_path):
    if not (CORPORA / "books").is_dir():
        pytest.skip(f"{CORPORA} is absent")
    files = dirty_web.write_reference(CORPORA, tmp_path / "ref")
    assert len(files) > 10 and all(f.stat().st_size > 0 for f in files)
    m = dirty_web.Material(CORPORA)
    reference_text = (CORPORA / "books/austen/persuasion.txt").read_text(encoding="utf-8", errors="replace")
    assert not any(p[:200] in reference_text for p in m.prose[:200])  # corpus prose is not from the reference novels
    assert not any("maint-guide" in str(p) or "linux-doc" in str(p) for p in m.doc_pages)
