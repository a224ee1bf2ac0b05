"""benchmarks/bench_quality_signal.py: the frozen quality-signal set's corruptions on short inline
text (no corpora needed): each is deterministic for its seed, OCR damage hits about the stated share
of letters, word substitution replaces the stated share of words with words of the vocabulary, the
Markov chain only writes word triples of its training text, event pages differ only in their slots;
and the frozen file's evaluation collections are disjoint from its design collections."""

from __future__ import annotations

import json
import random
import re
import string
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_quality_signal as bqs  # noqa: E402

FROZEN = json.loads(bqs.FROZEN.read_text())
KINDS = FROZEN["evaluation"]["junk_kinds"]
TEXT = """The miller rose before the sun and walked down to the river, where the wheel stood still in the
mist. He listened for the water, but the water was low, and the stones were dry along the bank.

By noon the farmers came with their carts, and the miller told them that the river was too low to
grind. They stood in the yard and argued about the weather, the price of flour and the new bridge.

In the evening the rain came at last. The river rose, the wheel turned, and the miller worked
through the night while the farmers slept in the barn beside the mill."""


def test_ocr_damage_is_deterministic_and_hits_about_one_letter_in_eight():
    p = KINDS["ocr_damage"]
    assert bqs.ocr_damage(TEXT, random.Random(1), p) == bqs.ocr_damage(TEXT, random.Random(1), p)
    assert bqs.ocr_damage(TEXT, random.Random(1), p) != bqs.ocr_damage(TEXT, random.Random(2), p)
    long = TEXT * 40
    pieces = bqs.ocr_pieces(long, random.Random(3), p["letter_rate"])
    letters = [i for i, c in enumerate(long) if c in bqs.OCR_CONFUSABLE]
    changed = sum(pieces[i] != long[i] for i in letters) / len(letters)
    assert abs(changed - p["letter_rate"]) < 0.01
    assert all(pieces[i] == c for i, c in enumerate(long) if c not in bqs.OCR_CONFUSABLE)
    assert set(string.ascii_letters) <= set(bqs.OCR_CONFUSABLE)


def test_word_substitution_replaces_the_stated_share_with_vocabulary_words():
    vocab = bqs.vocabulary([TEXT])
    p = KINDS["word_substitution"]
    out = bqs.substitute_words(TEXT, random.Random(4), vocab, p["share"], p["rank_window"])
    assert out == bqs.substitute_words(TEXT, random.Random(4), vocab, p["share"], p["rank_window"])
    before, after = bqs._WORD.findall(TEXT), bqs._WORD.findall(out)
    assert len(before) == len(after)
    differ = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(differ) == round(p["share"] * len(before))
    assert all(b.lower() in vocab and b.lower() != a.lower() and a[0].isupper() == b[0].isupper() for a, b in differ)


def test_markov_chain_only_writes_word_triples_of_its_training_text():
    train = bqs.markov_tokens(TEXT) + ["\n\n"]
    order = KINDS["markov_chain"]["order"]
    out = bqs.markov_text(train, random.Random(5), order, 2000)
    assert out == bqs.markov_text(train, random.Random(5), order, 2000) and len(out) >= 1900
    n = len(train)
    cycle = {tuple(train[(i + k) % n] for k in range(order + 1)) for i in range(n)}
    toks = bqs.markov_tokens(out)
    assert all(tuple(toks[i:i + order + 1]) in cycle for i in range(len(toks) - order))
    assert out not in TEXT * 3  # not a copy of the training text


def test_event_pages_differ_only_in_their_slots():
    names, words = bqs.slot_words([TEXT])
    assert "The" not in names and "miller" in words
    pages = [bqs.event_listing(random.Random(i), ["Ashby", "Marlow", "Tewin"], words) for i in range(3)]
    assert len(set(pages)) == 3 and pages[0] == bqs.event_listing(random.Random(0), ["Ashby", "Marlow", "Tewin"], words)
    parts = list(string.Formatter().parse(bqs.EVENT_TEMPLATE))
    pattern = "".join(re.escape(lit) + ("(.+?)" if field else "") for lit, field, _, _ in parts)
    assert sum(len(lit) for lit, _, _, _ in parts) > 800  # most of a page is fixed text
    for page, seed in zip(pages, range(3)):
        assert re.fullmatch(pattern, page, re.S)
        assert page == bqs.EVENT_TEMPLATE.format(**bqs.event_slots(random.Random(seed), ["Ashby", "Marlow", "Tewin"], words))


def test_splice_alternates_two_texts_and_passages_stay_in_bounds():
    a = "One came. Two went. Three sat. Four stood."
    b = "Red fell. Blue rose. Green hid."
    assert bqs.splice(a, b, 6000) == "One came. Red fell. Two went. Blue rose.\n\nThree sat. Green hid."
    passages = bqs.cut_passages(TEXT * 20, 1500, 6000)
    assert passages and all(1500 <= len(p) <= 6000 for p in passages)


def test_render_roff_prints_text_headings_and_accents():
    src = '.TH X 1\n.SH NAME\nx \\- do \\fBthings\\fR\n.SH DESCRIPTION\nV\\(\'erifier l\\*(Aqint\\(\'egrit\\(\'e\n.TP\n.B \\-v\nBe loud.\n'
    # a .TP tag written as a request (.B) stays on its body's line: what the frozen renderer prints
    assert bqs.render_roff(src) == "NAME\n\nx - do things\n\nDESCRIPTION\n\nVérifier l'intégrité\n\n-v Be loud."
    assert bqs.render_roff(".so man1/other.1\n") == ""


def test_frozen_rule_and_collections():
    design = [d for d in FROZEN["design_collections"] if "/" in d and " " not in d]
    for spec in FROZEN["evaluation"]["rows"].values():
        assert not any(spec["path"].startswith(d) or d.startswith(spec["path"]) for d in design)
    for coll in FROZEN["reference"]["collections"]:
        assert any(coll["path"].startswith(d) for d in design)
    assert bqs.wilson(0, 120)[1] <= 0.0311 and bqs.wilson(120, 120)[0] >= 0.9689
    groups = {"clean/r": {"keep_rate": 0.98}, "k": {"keep_rate": 0.11}}
    checks = bqs.verdict(FROZEN["decision_rule"], ["r"], ["k"], {"a": groups})["checks"]
    assert [c["holds"] for c in checks] == [True, False]


def test_shuffle_words_keeps_every_word_and_each_line_its_length():
    out = bqs.shuffle_words(TEXT, random.Random(5))
    assert out != TEXT and out == bqs.shuffle_words(TEXT, random.Random(5))
    for before, after in zip(TEXT.split("\n\n"), out.split("\n\n"), strict=True):
        assert sorted(before.split()) == sorted(after.split())  # words stay in their paragraph
        assert [len(line.split()) for line in before.split("\n")] == [len(line.split()) for line in after.split("\n")]


def test_keyboard_typos_hit_about_the_rate_and_only_ascii_letters():
    long = TEXT * 40
    out = bqs.keyboard_typos(long, random.Random(7), 0.1)
    assert out == bqs.keyboard_typos(long, random.Random(7), 0.1)
    words = [(a, b) for a, b in zip(long.split(), out.split()) if a.isalpha()]
    if len(long.split()) == len(out.split()):  # a typo never adds or removes a space
        changed = sum(a != b for a, b in words) / len(words)
        assert 0.2 < changed < 0.5  # about 1 - 0.9 ** 4.5 for words of 4-5 letters
    assert bqs.keyboard_typos("ÉÉÉ 123 ---", random.Random(1), 1.0) == "ÉÉÉ 123 ---"
    assert set(bqs._neighbours("g")) == set("fhrtvb")  # the scorer's rows are not staggered (see its docstring)


def test_render_html_drops_navigation_scripts_and_head():
    page = ("<html><head><title>T</title><style>p{}</style></head><body>"
            "<div class='navheader'>Prev Up Next</div><h1>Title</h1><p>One  paragraph\n here.</p>"
            "<script>var x;</script><pre>a\n  b</pre><p>Two</p><div class='navfooter'>Home</div></body></html>")
    assert bqs.render_html(page) == "Title\n\nOne paragraph here.\n\na\nb\n\nTwo"


def test_read_text_gunzips_and_decodes_as_a_row_says(tmp_path):
    import gzip

    path = tmp_path / "guide.txt.gz"
    path.write_bytes(gzip.compress("Memória Auxiliar".encode("latin-1")))
    assert bqs.read_text(path, "text", "latin-1") == "Memória Auxiliar"
    assert "\ufffd" in bqs.read_text(path, "text")  # the default, UTF-8: what quality_signal2's FocaLinux row got


def test_extra_kinds_take_their_own_held_out_blocks():
    frozen3 = json.loads((bqs.FROZEN.parent / "quality_signal3.json").read_text())
    ev = frozen3["evaluation"]
    k = ev["junk_per_row_per_kind"]
    need = 4 * k + ev["junk_kinds"]["markov_chain"]["train_passages"] + 2 * k
    names = " The carts went to Dunmore with Hartley and Quince from Ashford."
    held = [(f"f{i}#0", TEXT.replace("miller", f"miller{i}") + names) for i in range(need)]
    docs = bqs.row_junk("r", held, ev)
    by_kind = {d["kind"]: [x for x in docs if x["kind"] == d["kind"]] for d in docs}
    assert len(by_kind) == 7 and all(len(v) == k for v in by_kind.values())
    base = 4 * k + ev["junk_kinds"]["markov_chain"]["train_passages"]
    assert [d["from"] for d in by_kind["shuffled_words"]] == [[f"f{base + i}#0"] for i in range(k)]
    assert [d["from"] for d in by_kind["keyboard_typos"]] == [[f"f{base + k + i}#0"] for i in range(k)]
    try:
        bqs.row_junk("r", held[:-1], ev)
    except ValueError as e:
        assert "the recipe needs" in str(e)
    else:
        raise AssertionError("a row one passage short must be refused")
