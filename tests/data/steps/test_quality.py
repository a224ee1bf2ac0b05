"""Quality rules: each rejects a crafted document with its rule and a measured value equal to an
independent computation; a real passage passes every rule; the step's contract holds."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
from pydantic import ValidationError

from tokenmill.config import CURATE_STEPS, CurateConfig, QualityConfig
from tokenmill.data.document import QUALITY_FIELDS, Doc
from tokenmill.data.steps.quality import (BOOK_UNIT_WORDS, Quality, book_units, check_gopher, check_min_chars,
                                    check_rules, quality_signals, split_text)

# Real prose written by others (seed 002, §2.1 and §2.5): it must pass every rule.
REAL = (
    "The most common and most dangerous illusion in pretraining is to think of “data” as a static "
    "asset, as if you already had a few hundred GB or a few TB of text, and the only remaining step "
    "were to push it into a dataloader. In reality, pretraining data is closer to a continuously "
    "running data system. It has to answer at least four questions:\n\n"
    "  1. Where did the text come from, and what are the license and usage boundaries?\n"
    "  2. What filtering, modifications, and removals did the text go through before the model ever saw it?\n\n"
    "Lee et al. showed this clearly: stronger deduplication on standard corpora not only reduces "
    "verbatim memorization, but can reach equivalent or better quality in fewer training steps, while "
    "also reducing overlap between training and validation data (Lee et al., 2022).\n\n"
    "So train–train deduplication protects generalization quality and token efficiency. Train–test "
    "contamination auditing protects evaluation credibility. You need both. Neither substitutes for the other."
)
CFG = QualityConfig()
FAMILIES = ("gopher", "gopher_repetition", "c4", "fineweb")
VOCAB = ("river delta wetland heron salmon flood season water reed mud current bank tide estuary "
         "willow otter gravel channel basin marsh").split()


def _prose(n_words: int) -> str:
    base = "the committee reviewed the proposal with care and decided to publish its findings".split()
    return " ".join(base[i % len(base)] for i in range(n_words))


def _sentence(k: int, n_words: int = 9) -> str:
    """A distinct sentence: words drawn from VOCAB by a seeded generator, ending with a period."""
    rng = random.Random(k)
    return " ".join(rng.choice(VOCAB) for _ in range(n_words)).capitalize() + "."


def _only(family: str, **overrides) -> QualityConfig:
    """A config where only `family` is on (the others cannot mask or pre-empt its rules); kinds
    follow the input format, not the text (these test the rules, not data/steps/kind_detect.py)."""
    return QualityConfig(**{f: f == family for f in FAMILIES}, **{"detect_kinds": False, **overrides})


# --------------------------------------------------------------------------- independent references
def ref_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def ref_paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n[ \t]*(?:\n[ \t]*)+", text) if p.strip()]


def ref_dups(units: list[str]) -> tuple[float, float]:
    seen: set[str] = set()
    dup = dup_chars = 0
    for u in units:
        if u in seen:
            dup, dup_chars = dup + 1, dup_chars + len(u)
        seen.add(u)
    return dup / len(units), dup_chars / sum(len(u) for u in units)


def ref_top_ngram(words: list[str], n: int) -> float:
    grams = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    top = max(grams.values(), default=0)
    if top < 2:
        return 0.0
    longest = max(sum(map(len, g)) for g, k in grams.items() if k == top)
    return top * longest / sum(map(len, words))


def ref_dup_ngram(words: list[str], n: int) -> float:
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    count = Counter(grams)
    covered = [False] * len(words)
    for i, g in enumerate(grams):
        if count[g] > 1:
            for j in range(i, i + n):
                covered[j] = True
    return sum(len(w) for w, c in zip(words, covered) if c) / sum(map(len, words))


# --------------------------------------------------------------------------- signals
def test_signals_match_schema_and_hand_counts():
    s = quality_signals("The cat ...\n# and the dog\n\n- with hat…")
    assert s.keys() == QUALITY_FIELDS.keys()
    assert s["n_words"] == 10 and s["n_lines"] == 3
    assert s["hash_word_ratio"] == pytest.approx(1 / 10)
    assert s["ellipsis_word_ratio"] == pytest.approx(2 / 10)
    assert s["symbol_word_ratio"] == pytest.approx(2 / 10)
    assert s["bullet_line_frac"] == pytest.approx(1 / 3)
    assert s["ellipsis_line_frac"] == pytest.approx(2 / 3)
    assert s["alpha_word_frac"] == pytest.approx(7 / 10)
    assert s["n_stop_words"] == 3  # the, and, with (distinct, case-folded)


def test_alpha_and_stop_words_match_per_word_definitions():
    text = "Über 42 naïve (the) 3.14 'And' x_1 ___ ... ¿qué? 日本語 #7 WITH 100% the"
    words = text.split()
    s = quality_signals(text)
    assert s["alpha_word_frac"] == pytest.approx(sum(any(c.isalpha() for c in w) for w in words) / len(words))
    assert s["n_stop_words"] == 3  # the, and, with


def test_empty_text_has_zero_signals():
    s = quality_signals("")
    assert s.keys() == QUALITY_FIELDS.keys()
    assert all(v == 0 for v in s.values())


@pytest.mark.parametrize("seed", range(12))
def test_repetition_signals_equal_naive_computation(seed):
    rng = random.Random(seed)
    vocab = VOCAB[: rng.randint(3, len(VOCAB))]  # small vocabularies repeat a lot
    lines = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(1, 40))]
    lines += rng.sample(lines, min(len(lines), rng.randint(0, 5)))  # some repeated lines
    text = "".join(line + rng.choice(["\n", "\n", "\n\n", "\n \n"]) for line in lines)
    s, words = quality_signals(text), text.split()
    assert (s["dup_line_frac"], s["dup_line_char_frac"]) == pytest.approx(ref_dups(ref_lines(text)), rel=1e-12)
    assert (s["dup_para_frac"], s["dup_para_char_frac"]) == pytest.approx(ref_dups(ref_paragraphs(text)), rel=1e-12)
    for n in (2, 3, 4):
        assert s[f"top_{n}gram_char_frac"] == pytest.approx(ref_top_ngram(words, n), rel=1e-12)
    for n in range(5, 11):
        assert s[f"dup_{n}gram_char_frac"] == pytest.approx(ref_dup_ngram(words, n), rel=1e-12)


def test_fully_repeated_text_measures_one():
    words = [_sentence(k) for k in range(12)]
    s = quality_signals(" ".join(words) + "\n" + " ".join(words))
    assert all(s[f"dup_{n}gram_char_frac"] == 1.0 for n in range(5, 11))


# --------------------------------------------------------------------------- real text passes
def test_real_passage_passes_every_rule():
    s = quality_signals(REAL)
    assert check_rules(s, CFG) is None
    assert s["c4_sentences"] >= CFG.c4_min_sentences and s["line_punct_frac"] > 0.5


# --------------------------------------------------------------------------- Gopher quality (v1 rules)
@pytest.mark.parametrize("text, rule, value", [
    (_prose(20), "min_words", "20"),
    (_prose(120), None, None),
    ("the and " + " ".join(["a"] * 60), "min_mean_word_len", None),
    ("the and " + " ".join(["supercalifragilistic"] * 60), "max_mean_word_len", None),
    (_prose(60) + " #tag" * 10, "max_symbol_word_ratio", None),
    (_prose(60) + " ..." * 10, "max_symbol_word_ratio", None),
    ("\n".join("- " + _prose(12) for _ in range(12)), "max_bullet_line_frac", "1"),
    ("\n".join(_prose(14) + " and so on…" for _ in range(10)), "max_ellipsis_line_frac", "1"),
    (_prose(50) + " 12345" * 20, "min_alpha_word_frac", "0.714286"),  # 50 / 70 words
    (" ".join(["lorem", "ipsum", "dolor"] * 30), "min_stop_words", "0"),
])
def test_gopher_rules(text, rule, value):
    rejection = check_gopher(quality_signals(text), CFG)
    if rule is None:
        assert rejection is None
        return
    assert rejection is not None and rejection.rule == rule and rejection.step == "quality"
    if value is not None:
        assert rejection.value == value
    assert rule in rejection.reason and "gopher" in rejection.reason


def test_gopher_value_is_the_measurement():
    rejection = check_gopher(quality_signals(_prose(60) + " #tag" * 12), CFG)
    assert rejection.rule == "max_symbol_word_ratio"
    assert float(rejection.value) == pytest.approx(12 / 72, rel=1e-5)


def test_gopher_thresholds_follow_config():
    assert check_gopher(quality_signals(_prose(120)), QualityConfig(max_words=100)).rule == "max_words"
    assert check_gopher(quality_signals(_prose(20)), QualityConfig(min_words=10)) is None


# --------------------------------------------------------------------------- Gopher repetition
def _unique_lines(k: int, start: int = 0) -> list[str]:
    return [_sentence(start + i) for i in range(k)]


def _repetition_cases():
    long_line = " ".join(_sentence(100 + i) for i in range(12))
    para_note = "A short note that repeats."
    cases = {
        "max_dup_line_frac": "\n".join(_unique_lines(10) + ["Same line again."] * 6),
        "max_dup_para_frac": "\n\n".join(["\n".join(_unique_lines(10)), "\n".join(_unique_lines(10, 50))]
                                         + [para_note] * 3),
        "max_dup_line_char_frac": "\n".join(_unique_lines(8) + [long_line, long_line]),
        "max_dup_para_char_frac": "\n\n".join(_unique_lines(8) + [long_line, long_line]),
        "max_top_2gram_char_frac": " ".join(_unique_lines(6)) + " " + "heron salmon " * 40,
        "max_top_3gram_char_frac": " ".join(_unique_lines(6)) + " " + "heron salmon otter " * 30,
        "max_top_4gram_char_frac": " ".join(_unique_lines(6)) + " " + "heron salmon otter reed " * 25,
    }
    for n in range(5, 11):  # one n-gram repeated once in otherwise distinct words
        words = [f"w{i}x" for i in range(30)]
        phrase = [f"p{i}q" for i in range(n)]
        cases[f"max_dup_{n}gram_char_frac"] = " ".join(phrase + words + phrase)
    return cases


def _isolating_config(rule: str) -> QualityConfig:
    """Only `rule` of the repetition family can fire: the other limits are out of reach."""
    limits = {k: 2.0 for k in ("max_dup_line_frac", "max_dup_para_frac", "max_dup_line_char_frac",
                               "max_dup_para_char_frac")}
    top, dup = {}, {}
    if m := re.fullmatch(r"max_top_(\d+)gram_char_frac", rule):
        top = {int(m.group(1)): CFG.max_top_ngram_char_frac[int(m.group(1))]}
    elif m := re.fullmatch(r"max_dup_(\d+)gram_char_frac", rule):
        dup = {int(m.group(1)): CFG.max_dup_ngram_char_frac[int(m.group(1))]}
    else:
        limits[rule] = getattr(CFG, rule)
    return _only("gopher_repetition", **limits, max_top_ngram_char_frac=top, max_dup_ngram_char_frac=dup)


def _reference(rule: str, text: str) -> float:
    words = text.split()
    if m := re.fullmatch(r"max_top_(\d+)gram_char_frac", rule):
        return ref_top_ngram(words, int(m.group(1)))
    if m := re.fullmatch(r"max_dup_(\d+)gram_char_frac", rule):
        return ref_dup_ngram(words, int(m.group(1)))
    units = ref_lines(text) if "line" in rule else ref_paragraphs(text)
    frac, char_frac = ref_dups(units)
    return char_frac if "char" in rule else frac


@pytest.mark.parametrize("rule", list(_repetition_cases()))
def test_each_repetition_rule(rule):
    text = _repetition_cases()[rule]
    rejection = check_rules(quality_signals(text), _isolating_config(rule))
    assert rejection is not None and (rejection.step, rejection.rule) == ("quality", rule)
    expected = _reference(rule, text)
    assert float(rejection.value) == pytest.approx(expected, rel=1e-5)
    assert "gopher_repetition" in rejection.reason


def test_dup_ngram_covers_overlaps_once():
    # "a b c d e" twice: 5-grams repeat only there; the words between are not covered.
    text = "a1 b1 c1 d1 e1 f1 g1 a1 b1 c1 d1 e1 h1"
    assert quality_signals(text)["dup_5gram_char_frac"] == pytest.approx(20 / 26)
    assert quality_signals(text)["dup_6gram_char_frac"] == 0.0


def test_repetition_default_order_reports_first_rule():
    text = _repetition_cases()["max_dup_line_frac"]
    assert check_rules(quality_signals(text), _only("gopher_repetition")).rule == "max_dup_line_frac"


# --------------------------------------------------------------------------- C4
def _c4_doc(*extra: str, sentences: int = 6) -> str:
    return "\n".join([*_unique_lines(sentences), *extra])


def test_c4_lorem_ipsum():
    s = quality_signals(_c4_doc("Lorem ipsum dolor sit amet, consectetur adipiscing elit."))
    rejection = check_rules(s, _only("c4"))
    assert (rejection.rule, rejection.value) == ("c4_lorem_ipsum", "1")


def test_c4_curly_bracket_only_in_kept_lines():
    kept_brace = _c4_doc("Write the mapping as {1: 2} in the file.")
    code_brace = _c4_doc("config = {1: 2}")  # no end mark: C4 drops the line before looking
    assert check_rules(quality_signals(kept_brace), _only("c4")).rule == "c4_curly_bracket"
    assert check_rules(quality_signals(code_brace), _only("c4")) is None
    assert check_rules(quality_signals(kept_brace), _only("c4", c4_curly_bracket=False)) is None


def test_c4_min_sentences_counts_kept_lines_only():
    text = "\n".join([
        "Rivers carry silt to the sea. Deltas grow where it settles.",  # 2 sentences
        "Herons wait in the reeds for the fish!",  # 1
        "A heading without an end mark",  # dropped: no terminal punctuation
        "Too short.",  # dropped: 2 words
        "Enable JavaScript to see the map of the delta.",  # dropped: javascript
        "Read our privacy policy before you visit the delta.",  # dropped: policy
        "Tides rise twice a day [3].",  # kept after the citation is removed: 1
    ])
    s = quality_signals(text)
    assert s["c4_sentences"] == 4
    assert (s["c4_javascript_lines"], s["c4_policy_lines"]) == (1, 1)
    assert s["c4_kept_line_frac"] == pytest.approx(3 / 7)
    rejection = check_rules(s, _only("c4"))
    assert (rejection.rule, rejection.value) == ("c4_min_sentences", "4")
    assert check_rules(s, _only("c4", c4_min_sentences=4)) is None


def test_c4_remove_lines_rewrites_text():
    cfg = CurateConfig(min_chars=10, quality=_only("c4", c4_remove_lines=True))
    text = _c4_doc("A heading without an end mark", "Enable JavaScript to see the map of the delta.")
    doc = _doc(text)
    assert Quality(cfg).process(doc) is None
    assert doc.text == "\n".join(_unique_lines(6))
    assert doc.quality["n_chars"] == len(text)  # signals describe the text as it came in
    doc = _doc(text)
    assert Quality(CurateConfig(min_chars=10, quality=_only("c4"))).process(doc) is None and doc.text == text


# --------------------------------------------------------------------------- FineWeb
def test_fineweb_line_punct():
    text = "\n".join([" ".join(VOCAB[i:i + 8]) for i in range(10)] + ["The last line ends with a period."])
    rejection = check_rules(quality_signals(text), _only("fineweb"))
    assert rejection.rule == "min_line_punct_frac"
    assert float(rejection.value) == pytest.approx(1 / 11, rel=1e-5)


def test_fineweb_terminal_punctuation_of_other_scripts():
    s = quality_signals("日本語の文です。\nЭто предложение!\nهل هذا سؤال؟\nno end mark here")
    assert s["line_punct_frac"] == pytest.approx(3 / 4)


def test_fineweb_short_lines():
    lines = [f"Short line number {i}." for i in range(8)] + _unique_lines(2, 20)
    text = "\n".join(lines)
    rejection = check_rules(quality_signals(text), _only("fineweb"))
    assert rejection.rule == "max_short_line_frac"
    assert float(rejection.value) == pytest.approx(sum(len(x) <= 30 for x in lines) / 10, rel=1e-5)


def test_fineweb_char_duplicates():
    lines = _unique_lines(30) + [_sentence(3)]  # one repeated line among 31
    text = "\n".join(lines)
    rejection = check_rules(quality_signals(text), _only("fineweb"))
    assert rejection.rule == "max_char_dup_frac"
    assert float(rejection.value) == pytest.approx(len(_sentence(3)) / len(text.replace("\n", "")), rel=1e-5)


def test_fineweb_newline_ratio():
    text = "\n".join(f"Item {i}." for i in range(40))  # 2 words per line
    cfg = _only("fineweb", max_short_line_frac=1.0)
    rejection = check_rules(quality_signals(text), cfg)
    assert rejection.rule == "max_newline_word_ratio"
    assert float(rejection.value) == pytest.approx(text.count("\n") / len(text.split()), rel=1e-5)


# --------------------------------------------------------------------------- families and config
def test_family_switches():
    text = _c4_doc("Lorem ipsum dolor sit amet, consectetur adipiscing elit.")
    s = quality_signals(text)
    assert check_rules(s, _only("c4")) is not None
    assert check_rules(s, QualityConfig(**{f: False for f in FAMILIES})) is None


def test_ngram_limits_are_validated():
    with pytest.raises(ValidationError):
        QualityConfig(max_top_ngram_char_frac={5: 0.1})
    with pytest.raises(ValidationError):
        QualityConfig(max_dup_ngram_char_frac={4: 0.1})


def test_split_text_interns_words():
    p = split_text("b a b c\n\nb")
    assert [p.vocab[i] for i in p.ids] == p.words and p.word_counts.tolist() == [3, 1, 1]
    assert p.paragraphs == ["b a b c", "b"]


# --------------------------------------------------------------------------- the step
def _doc(text: str, bucket: str = "web", fmt: str = "html", language: str | None = None) -> Doc:
    """An HTML page by default: the web kind, every prose family (data/steps/text_kinds.py)."""
    return Doc(id="x", text=text, source="s", url="u", bucket=bucket, license="l", format=fmt, language=language)


def test_step_contract():
    assert Quality.name == "quality" and Quality.name in CURATE_STEPS
    step = Quality(CurateConfig())
    assert step.enabled() and step.applies(_doc("x", "code"))
    doc = _doc(REAL)
    assert step.process(doc) is None and doc.text == REAL
    assert doc.quality == quality_signals(REAL)


def test_step_length_floor_applies_to_every_bucket():
    step = Quality(CurateConfig(min_chars=200))
    for bucket in ("web", "code"):
        doc = _doc("short text", bucket)
        rejection = step.process(doc)
        assert (rejection.step, rejection.rule, rejection.value) == ("quality", "min_chars", "10")
        assert doc.quality is not None and doc.quality["n_chars"] == 10  # signals kept on rejected rows
    assert check_min_chars(200, 200) is None


def test_step_skips_rules_on_skip_buckets():
    junk = "\n".join(["x = {1: 2}"] * 40)
    step = Quality(CurateConfig(min_chars=10))
    assert step.process(_doc(junk, "code")) is None
    rejection = step.process(_doc(junk, "web"))
    assert rejection is not None and rejection.step == "quality"


# --------------------------------------------------------------------------- languages and kinds
ZH_PAGE = "\n".join([
    "软件包管理系统是发行版的核心部分，它负责安装、升级和删除系统中的软件。",
    "每一个软件包都包含程序文件、配置文件以及描述依赖关系的元数据，管理工具会根据这些信息自动完成安装。",
    "在安装新的软件之前，管理员应当先更新软件包列表，这样才能得到最新的版本和安全修复。",
    "如果两个软件包之间存在冲突，系统会提示用户做出选择，而不是直接覆盖已经存在的文件。",
    "配置文件在升级的时候会被保留下来，用户修改过的设置也不会因为更新而丢失。",
    "对于服务器来说，稳定性比新功能更加重要，所以很多管理员只使用稳定版本中的软件。",
    "这些工具也可以记录每一次操作的历史，出现问题时可以很快找到原因并恢复到以前的状态。",
])
DE_PAGE = "\n".join([
    "Die Paketverwaltung ist der Kern jeder Distribution und kümmert sich um Installation und Aktualisierung.",
    "Jedes Paket enthält Programmdateien, Konfigurationsdateien und Metadaten, die seine Abhängigkeiten beschreiben.",
    "Bevor ein Administrator neue Software installiert, sollte er die Paketlisten aktualisieren.",
    "Wenn zwei Pakete miteinander in Konflikt stehen, fragt das System nach einer Entscheidung des Benutzers.",
    "Geänderte Konfigurationsdateien bleiben bei einer Aktualisierung erhalten und gehen nicht verloren.",
    "Für Server ist Stabilität wichtiger als neue Funktionen, deshalb nutzen viele nur die stabile Version.",
])


def test_a_chinese_page_is_judged_by_its_own_profile_not_by_english_rules():
    english_rules = CurateConfig(min_chars=10, quality=QualityConfig(language_rules=False))
    doc = _doc(ZH_PAGE, language="zh")
    rejection = Quality(english_rules).process(doc)
    assert rejection is not None and rejection.rule in ("min_words", "max_mean_word_len")  # whitespace "words"
    doc = _doc(ZH_PAGE, language="zh")
    assert Quality(CurateConfig(min_chars=10)).process(doc) is None
    assert 1.0 < doc.quality["mean_word_len"] < 4.0 and doc.quality["n_stop_words"] >= 2
    assert doc.quality["c4_sentences"] >= 5  # "。" ends a sentence with no space after it


def test_a_german_page_needs_german_stop_words_not_english_ones():
    doc = _doc(DE_PAGE, language="de")
    assert Quality(CurateConfig(min_chars=10, quality=QualityConfig(language_rules=False))).process(doc).rule \
        == "min_stop_words"
    doc = _doc(DE_PAGE, language="de")
    assert Quality(CurateConfig(min_chars=10)).process(doc) is None and doc.quality["n_stop_words"] >= 2
    # Without a profile (a language the shipped file lacks) the fallback keeps it too.
    doc = _doc(DE_PAGE, language="xx")
    assert Quality(CurateConfig(min_chars=10)).process(doc) is None


def test_books_have_no_word_cap_and_their_repetition_is_judged_per_chapter():
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(20_000)] + ["the", "of", "and", "to", "with"] * 400
    book = "\n\n".join(" ".join(rng.choice(vocab) for _ in range(14)) + "." for _ in range(8_000))
    assert len(book.split()) > 100_000
    cfg = CurateConfig(min_chars=10, quality=QualityConfig(kinds={"books": "books"}, c4=False, fineweb=False))
    assert Quality(cfg).process(_doc(book, bucket="books", fmt="text")) is None
    as_prose = CurateConfig(min_chars=10, quality=QualityConfig(kinds={"books": "prose"}))
    prose = Quality(as_prose).process(_doc(book, bucket="books", fmt="text"))
    assert prose is not None and prose.rule == "max_words"
    undeclared = _doc(book, bucket="any", fmt="text")  # detected as books by its length (issue 41)
    assert Quality(CurateConfig(min_chars=10, quality=QualityConfig(c4=False, fineweb=False))).process(undeclared) is None
    assert undeclared.kind == "books"


def test_book_units_cut_at_paragraphs_into_chapter_sized_pieces():
    paras = [" ".join(["w"] * 700) for _ in range(30)]  # 21,000 words
    units = book_units("\n\n".join(paras))
    assert "\n\n".join(units) == "\n\n".join(paras)
    assert [len(u.split()) for u in units] == [5600, 5600, 5600, 4200]  # a tail of >= half a unit stands alone
    assert len(book_units("\n\n".join(paras[:9])).__iter__().__next__().split()) == 6300  # a shorter tail joins
    assert BOOK_UNIT_WORDS == 5000
    assert book_units("short text") == ["short text"]


def test_reference_pages_may_show_code_braces():
    text = _c4_doc("Write the block as int main() { return 0; } in the file.")
    only_c4 = _only("c4")
    assert Quality(CurateConfig(min_chars=10, quality=only_c4)).process(_doc(text)).rule == "c4_curly_bracket"
    cfg = CurateConfig(min_chars=10, quality=only_c4.model_copy(update={"kinds": {"web": "reference"}}))
    assert Quality(cfg).process(_doc(text)) is None


def test_code_gets_code_rules_and_every_row_carries_code_signals():
    minified = "var a=1;" * 200  # one 1,600-character line
    module = "def f(x):\n    return x + 1\n\n\nclass A:\n    pass\n" * 5
    step = Quality(CurateConfig(min_chars=10))
    assert step.process(_doc(minified, bucket="code", fmt="code")).rule == "max_line_len"
    assert step.process(_doc(module, bucket="code", fmt="code")) is None
    doc = _doc(ZH_PAGE, language="zh")
    step.process(doc)
    assert {"max_line_len", "mean_line_len", "alnum_frac", "autogenerated"} <= set(doc.quality)
