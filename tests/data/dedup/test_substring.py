"""substring_dedup: suffix-array repeats equal a brute-force count of k-windows, whatever the
sharding; the first copy stays; document mode; lineage of every cut span; config errors."""

from __future__ import annotations

import json
import sysconfig
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from tokenmill.config import CurateConfig, SourceConfig, SubstringDedupConfig
from tokenmill.data.curate import curate
from tokenmill.data.dedup.substring import (RULE_SHARE, RULE_SPAN, STEP, all_copies_mask, cut, find_repeats,
                                            later_copies_mask, removal_runs, removed_share, tokenize)


def brute_force(docs: list[np.ndarray], k: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every k-window occurring >= 2 times: the union of all its copies, and of all but the first."""
    where: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for d, a in enumerate(docs):
        for p in range(len(a) - k + 1):
            where[tuple(a[p:p + k].tolist())].append((d, p))
    every = [np.zeros(len(a), bool) for a in docs]
    later = [np.zeros(len(a), bool) for a in docs]
    for occurrences in where.values():
        if len(occurrences) < 2:
            continue
        for n, (d, p) in enumerate(sorted(occurrences)):
            every[d][p:p + k] = True
            later[d][p:p + k] |= n > 0
    return every, later


def masks(docs: list[np.ndarray], k: int, shard_tokens: int, tmp: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    first, bases = find_repeats(docs, k, shard_tokens, tmp)
    slices = [(first[bases[d]:bases[d + 1]], int(bases[d])) for d in range(len(docs))]
    return [all_copies_mask(f, k) for f, _ in slices], [later_copies_mask(f, b, k) for f, b in slices]


def assert_same(got: tuple[list, list], want: tuple[list, list]) -> None:
    for g, w in zip(got, want):
        assert len(g) == len(w) and all(np.array_equal(a, b) for a, b in zip(g, w))


@pytest.mark.parametrize("seed", range(6))
def test_random_units_match_brute_force_for_any_shard_size(seed, tmp_path):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 7))
    # A tiny alphabet makes repeats common, inside and across documents, overlapping themselves.
    docs = [rng.integers(0, 3, size=int(rng.integers(0, 60))).astype(np.uint64) for _ in range(int(rng.integers(1, 15)))]
    want = brute_force(docs, k)
    for shard_tokens in (10**9, 1, 17, 50):
        assert_same(masks(docs, k, shard_tokens, tmp_path / str(shard_tokens)), want)


def stdlib_texts() -> list[str]:
    """Real text: codec tables that share most of their code, and unrelated modules."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    names = ["encodings/cp1250.py", "encodings/cp1251.py", "encodings/cp1252.py", "json/encoder.py",
             "json/decoder.py", "textwrap.py"]
    return [(lib / n).read_text(encoding="utf-8") for n in names]


@pytest.mark.parametrize("unit,k", [("word", 50), ("word", 8), ("byte", 100)])
def test_real_text_matches_brute_force_one_shard_or_many(unit, k, tmp_path):
    docs = [tokenize(t, unit).values for t in stdlib_texts()]
    want = brute_force(docs, k)
    assert any(m.any() for m in want[1]) and not all(m.all() for m in want[0])  # the case is not trivial
    total = sum(len(d) for d in docs)
    for shard_tokens in (total, total // 5):
        assert_same(masks(docs, k, shard_tokens, tmp_path / str(shard_tokens)), want)


def test_units_keep_character_offsets():
    text = "naïve café: x=1;  東京\tend"
    words = tokenize(text, "word")
    assert [text[s:e].strip() for s, e in zip(words.starts, words.cut_ends)] == \
        ["naïve", "café", ":", "x", "=", "1", ";", "東京", "end"]
    raw = tokenize(text, "byte")
    assert len(raw.values) == len(text.encode()) and raw.cut_ends[-1] == len(text)
    assert text[raw.starts[2]:raw.cut_ends[3]] == "ï"  # both bytes of 'ï' map to that character


def words(rng: np.random.Generator, n: int) -> str:
    vocab = [f"w{i}" for i in range(2000)]
    return " ".join(rng.choice(vocab, size=n))


def test_first_copy_is_kept_later_copies_are_cut(tmp_path):
    rng = np.random.default_rng(1)
    shared = words(rng, 70)
    texts = [words(rng, 40) + " " + shared + " " + words(rng, 30), words(rng, 100),
             words(rng, 20) + " " + shared + " " + words(rng, 20)]
    units = [tokenize(t, "word") for t in texts]
    first, bases = find_repeats([u.values for u in units], 50, 10**9, tmp_path)
    runs = [removal_runs(first[bases[d]:bases[d + 1]], int(bases[d]), 50, units[d]) for d in range(3)]
    assert runs[0] == [] and runs[1] == []
    [span] = runs[2]
    assert texts[2][span.char_start:span.char_end].strip() == shared and span.j - span.i == 70
    assert span.first == bases[0] + 40  # the window first occurs in document 0, after its 40 words
    assert cut(texts[2], runs[2]) == texts[2].replace(shared + " ", "")
    assert abs(removed_share(texts[2], runs[2]) - len(shared + " ") / len(texts[2])) < 1e-9


def test_byte_units_cut_whole_characters(tmp_path):
    rng = np.random.default_rng(3)
    alphabet = list("aé東 ")  # 1-, 2- and 3-byte characters
    shared = "".join(rng.choice(alphabet, size=60))
    texts = ["".join(rng.choice(alphabet, size=50)) + shared, "東" + shared + "".join(rng.choice(alphabet, size=40))]
    units = [tokenize(t, "byte") for t in texts]
    first, bases = find_repeats([u.values for u in units], 20, 10**9, tmp_path)
    runs = [removal_runs(first[bases[d]:bases[d + 1]], int(bases[d]), 20, units[d]) for d in range(2)]
    assert all(a.char_end <= b.char_start for a, b in zip(runs[1], runs[1][1:]))  # disjoint, in order
    removed = "".join(texts[1][sp.char_start:sp.char_end] for sp in runs[1])
    assert shared in removed
    rest = cut(texts[1], runs[1])
    assert len(rest) + len(removed) == len(texts[1]) and shared not in rest
    rest.encode("utf-8")  # whole characters only


def test_config_rejects_bad_values_clearly():
    assert CurateConfig().substring_dedup.enabled is False  # off by default
    for bad, field in (({"k": 0}, "k"), ({"unit": "token"}, "unit"), ({"max_dup_share": 1.5}, "max_dup_share"),
                       ({"shard_tokens": 0}, "shard_tokens"), ({"mode": "lines"}, "mode"), ({"kk": 3}, "kk")):
        with pytest.raises(ValidationError, match=field):
            SubstringDedupConfig(**bad)
    with pytest.raises(ValueError, match="unit"):
        tokenize("x", "token")


# --------------------------------------------------------------------------- the curate stage
def write_corpus(root: Path) -> tuple[list[str], str]:
    rng = np.random.default_rng(7)
    shared = words(rng, 80)
    texts = [words(rng, 150) for _ in range(12)]
    for i in (2, 5, 9):
        texts[i] = words(rng, 60) + " " + shared + " " + words(rng, 60)
    texts[11] = shared + " " + words(rng, 10)  # mostly a later copy
    root.mkdir(parents=True, exist_ok=True)
    (root / "docs.jsonl").write_text("\n".join(json.dumps({"id": f"d{i}", "text": t}) for i, t in enumerate(texts)) + "\n")
    return texts, shared


def run(root: Path, out: Path, **substring) -> dict[str, list[dict]]:
    cfg = CurateConfig.model_validate({
        "sources": [SourceConfig(path=str(root / "docs.jsonl"), bucket="web")],
        "steps": ["normalize", "substring_dedup"], "chunk_docs": 4, "workers": 1, "min_chars": 100,
        "substring_dedup": {"enabled": True, "k": 50, **substring}})
    curate(cfg, out, progress=False)
    rows = {d.name: pq.read_table(d).to_pylist() for d in sorted(out.iterdir()) if d.is_dir()}
    rows["_funnel"] = json.loads((out / "_funnel.json").read_text())
    return rows


def by_meta_id(rows: list[dict]) -> dict[str, dict]:
    return {json.loads(r["metadata"])["id"]: r for r in rows}


def test_curate_cuts_later_copies_with_lineage_and_counts_the_bytes(tmp_path):
    texts, shared = write_corpus(tmp_path / "in")
    r = run(tmp_path / "in", tmp_path / "out", shard_tokens=300)
    kept, rejected = by_meta_id(r["web"]), r["_rejected"]
    assert shared in kept["d2"]["text"]  # the first copy stays
    assert all(shared not in kept[f"d{i}"]["text"] for i in (5, 9))
    assert "d11" not in kept  # 10 words left: under min_chars
    spans = [x for x in rejected if x["rule"] == RULE_SPAN]
    assert sorted(json.loads(x["metadata"])["id"] for x in spans) == ["d5", "d9"]
    for x in spans:
        assert x["step"] == STEP and x["text"].strip() == shared and x["value"] == "80"
        assert f"document {kept['d2']['id']}" in x["reason"] and "chars [" in x["reason"]
    [short] = [x for x in rejected if x["rule"] != RULE_SPAN]
    assert short["step"] == STEP and json.loads(short["metadata"])["id"] == "d11"
    step = r["_funnel"]["total"][STEP]
    span_bytes = sum(len(x["text"].encode()) for x in spans)
    assert step["bytes_in"] - step["bytes_out"] == span_bytes + step["rejected"]["too_short_after_substring_dedup"]["bytes"]
    lineage = {s["step"] for s in kept["d5"]["lineage"]}
    assert STEP in lineage
    # The same corpus in one suffix-array shard gives the same output.
    one = run(tmp_path / "in", tmp_path / "one", shard_tokens=10**9)
    assert sorted(x["text"] for x in one["web"]) == sorted(x["text"] for x in r["web"])
    assert sorted(x["reason"] for x in one["_rejected"]) == sorted(x["reason"] for x in rejected)


def test_curate_document_mode_drops_only_documents_above_the_share(tmp_path):
    texts, shared = write_corpus(tmp_path / "in")
    r = run(tmp_path / "in", tmp_path / "out", mode="documents", max_dup_share=0.5)
    kept = by_meta_id(r["web"])
    [dropped] = r["_rejected"]
    assert json.loads(dropped["metadata"])["id"] == "d11" and dropped["rule"] == RULE_SHARE
    assert float(dropped["value"]) > 0.5
    assert all(kept[f"d{i}"]["text"] == texts[i] for i in (2, 5, 9))  # below the share: unchanged


def test_disabled_step_passes_everything_through(tmp_path):
    texts, shared = write_corpus(tmp_path / "in")
    r = run(tmp_path / "in", tmp_path / "out", enabled=False)
    assert len(r["web"]) == len(texts) and r["_rejected"] == []
    assert r["_funnel"]["total"][STEP]["docs_skipped"] == len(texts)
