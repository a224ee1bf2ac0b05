"""benchmarks/bench_kind_fresh.py and bench_manpage_parity.py on tiny inline corpora (no real
corpora needed): pages pair with their English originals by path, short renders are left out,
dictionary pages are cut at blank lines, the frozen rules' checks follow their numbers, and each
frozen file's evaluation collections are outside its design collections."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_kind_fresh as kf  # noqa: E402
import bench_manpage_parity as mp  # noqa: E402

PARA = "The program copies each named file to the destination and reports every error it meets. "


def _page(title: str, paragraphs: int) -> str:
    return f'.TH {title} 1\n.SH NAME\n{title} \\- a tool\n.SH DESCRIPTION\n' + "\n.PP\n".join([PARA * 2] * paragraphs)


def _corpora(tmp_path: Path) -> Path:
    man = tmp_path / "reference/manpages"
    for lang, pages in {"en": {"cp": 3, "mv": 3, "ls": 3}, "de": {"cp": 3, "mv": 3, "rm": 3}}.items():
        for name, n in pages.items():
            (man / lang / "man1").mkdir(parents=True, exist_ok=True)
            (man / lang / "man1" / f"{name}.1").write_text(_page(name, n))
    (man / "de/man1/ln.1").write_text(".so man1/cp.1\n")  # renders empty, no English original either
    (man / "en/man1/ln.1").write_text(".so man1/cp.1\n")
    return tmp_path


def test_pages_pair_with_their_english_originals_and_short_renders_are_left_out(tmp_path):
    got = mp.pairs(_corpora(tmp_path), "de")
    assert sorted(got) == ["man1/cp.1", "man1/mv.1"]  # rm has no original, ln renders empty
    text, original = got["man1/cp.1"]
    assert "copies each named file" in text and text == original


def test_dictionary_pages_are_cut_at_blank_lines_and_ordered_by_hash(tmp_path):
    folder = tmp_path / "reference/dictd/gcide"
    folder.mkdir(parents=True)
    entries = [f"word{i}\n   A definition of word {i}, with an example of its use in a sentence." * 8 for i in range(200)]
    (folder / "gcide.dict.gz").write_bytes(gzip.compress("\n\n".join(entries).encode()))
    pages = kf.dict_row(tmp_path, "gcide")
    assert pages and all(2000 <= len(p) <= 6000 for p in pages)
    assert pages == kf.dict_row(tmp_path, "gcide")  # deterministic
    in_file_order = kf.cut_passages("\n\n".join(entries), 2000, 6000)
    assert len(pages) > 10 and sorted(pages) == sorted(in_file_order[: len(pages)])
    assert pages != in_file_order[: len(pages)]  # ordered by hash, not by place in the file


def test_the_kind_checks_follow_the_frozen_numbers():
    rows = {"man:en": {"reference": 0.96}, "man:de": {"reference": 0.87}, "man:ja": {"reference": 0.85},
            "dict:foldoc": {"reference": 0.95}}
    checks = kf.checks(rows)
    assert checks["man:en >= 0.95"] and checks["dict:foldoc >= 0.95"] and not checks["man:de >= 0.95"]
    assert checks["man:de within 0.10 of man:en"] and not checks["man:ja within 0.10 of man:en"]
    assert kf.wilson(0, 10)[0] <= 0.0 < kf.wilson(0, 10)[1] and kf.wilson(10, 10)[1] >= 1.0


def test_each_freeze_evaluates_outside_its_design_collections():
    kinds = json.loads(kf.FROZEN.read_text())
    design = " ".join(kinds["design_collections"])
    assert "manpages" not in design and "dictd" not in design
    parity = json.loads(mp.FROZEN.read_text())
    assert parity["evaluation"]["collection"] not in " ".join(parity["design_collections"])
    assert "en" not in parity["evaluation"]["languages"]  # English is every pair's other side


# --------------------------------------------------------------------------- bench_docs_fresh.py
import bench_docs_fresh as df  # noqa: E402


def _fresh(tmp_path: Path) -> Path:
    for rel in ["web_html/apache2-doc/en/a.html", "web_html/apache2-doc/en/b.html", "web_html/apache2-doc/fr/a.html",
                "web_html/git-doc/git-log.html", "web_html/git-doc/howto/x.html"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<p>x</p>")
    (tmp_path / "web_html/apache2-doc/fr/notes.txt").write_text("not a page")
    return tmp_path


FROZEN_FRESH = {"evaluation": {"apache2-doc": {"path": "web_html/apache2-doc", "translations": ["fr"]},
                               "git-doc": {"path": "web_html/git-doc"}}}


def test_fresh_rows_pair_each_translation_with_the_same_english_pages(tmp_path):
    rows = {r.name: r for r in df.rows(FROZEN_FRESH, _fresh(tmp_path))}
    assert list(rows) == ["apache2-doc/en", "apache2-doc/fr", "apache2-doc/en@fr", "git-doc/en"]
    assert rows["apache2-doc/en@fr"].pages == ("web_html/apache2-doc/en/a.html",) and rows["apache2-doc/en@fr"].english_of == "fr"
    assert rows["apache2-doc/fr"].pages == ("web_html/apache2-doc/fr/a.html",)  # .html only
    assert rows["git-doc/en"].pages == ("web_html/git-doc/git-log.html", "web_html/git-doc/howto/x.html")


def test_fresh_digest_refuses_another_set(tmp_path):
    root = _fresh(tmp_path)
    (root / "FILES.tsv").write_text("web_html/git-doc/git-log.html\tabc\n")
    try:
        df.check_digest(root, {"files_sha256": "0" * 64})
    except SystemExit as e:
        assert "FILES.tsv: sha256" in str(e)
    else:
        raise AssertionError("a set with another digest was accepted")


def test_fresh_verdict_checks_keep_rates_and_gaps_to_english():
    rows = [df.Row("apache2-doc/en", ()), df.Row("apache2-doc/fr", ()), df.Row("apache2-doc/en@fr", (), "fr")]
    rates = {"apache2-doc/en": 1.0, "apache2-doc/fr": 0.85, "apache2-doc/en@fr": 0.97}
    v = df.verdict({"keep_at_least": 0.97, "parity_within": 0.10}, rows, {"a": {k: {"keep_rate": x} for k, x in rates.items()}})
    got = {c["check"]: (c["value"], c["holds"]) for c in v["checks"]}
    assert got["apache2-doc/fr: keep rate >= 0.97"] == (0.85, False)
    assert got["apache2-doc/en@fr: keep rate >= 0.97"] == (0.97, True)
    assert got["apache2-doc/fr: |keep - keep of en@fr| <= 0.1"] == (0.12, False)
    assert (v["holds"], v["of"], v["all_hold"]) == (2, 4, False)


def test_fresh_collections_are_not_in_the_real_corpora():
    frozen = json.loads(df.FROZEN.read_text())
    real = (ROOT / "benchmarks/frozen/docs_kept.json").read_text()
    for spec in frozen["evaluation"].values():
        assert spec["path"] not in real  # no earlier judgement's design or evaluation collection


def test_fresh_translation_names_map_to_the_english_page(tmp_path):
    for rel in ["web_html/faq/en/basics.en.html", "web_html/faq/de/basics.de.html", "web_html/site/_modules/x.html",
                "web_html/site/ref/y.html"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<p>x</p>")
    frozen = {"evaluation": {"faq": {"path": "web_html/faq", "translations": ["de"],
                                     "translation_names": {"from": ".{lang}.html", "to": ".en.html"}},
                             "site": {"path": "web_html/site", "exclude": ["_modules/"]}}}
    rows = {r.name: r for r in df.rows(frozen, tmp_path)}
    assert rows["faq/en@de"].pages == ("web_html/faq/en/basics.en.html",)
    assert rows["site/en"].pages == ("web_html/site/ref/y.html",)  # excluded before any run


def test_fresh_sample_takes_the_first_pages_by_path_digest(tmp_path):
    for i in range(6):
        (tmp_path / f"web_html/api/p{i}.html").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"web_html/api/p{i}.html").write_text("<p>x</p>")
    row = df.rows({"evaluation": {"api": {"path": "web_html/api", "sample": 3}}}, tmp_path)[0]
    pages = [f"web_html/api/p{i}.html" for i in range(6)]
    assert row.pages == tuple(sorted(sorted(pages, key=lambda p: hashlib.sha256(p.encode()).hexdigest())[:3]))
