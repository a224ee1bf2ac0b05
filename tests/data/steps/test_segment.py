"""Words per language: segmented Chinese and Japanese, whitespace tokens everywhere else."""

from __future__ import annotations

import re

from tokenmill.data.steps.segment import SEGMENTED, glue_punctuation, segmenter_versions, words

ZH = "我们在服务器上安装了 Debian 系统。这个系统非常稳定，适合长期运行。"
JA = "このサーバーには Debian をインストールしました。とても安定しています！"


def test_whitespace_languages_keep_whitespace_tokens_exactly():
    text = "The cat, on the mat.\n\n  Der Hund (bellt)!"
    assert words(text, "en") == text.split()
    assert words(text, "de") == text.split()
    assert words(text, None) == text.split()


def test_chinese_is_split_into_words_with_the_text_preserved():
    out = words(ZH, "zh")
    assert "".join(out) == ZH.replace(" ", "")  # nothing lost or invented but the spaces
    assert len(out) >= 12 and "Debian" in out
    # Words of a few characters, as a Chinese reader counts them, not one clause per "word".
    cjk = [w for w in out if re.search(r"[\u4e00-\u9fff]", w)]
    assert 1.0 <= sum(map(len, cjk)) / len(cjk) <= 3.5
    assert len(ZH.split()) == 3  # what the whitespace rules saw before


def test_japanese_is_split_into_words_with_the_text_preserved():
    out = words(JA, "ja")
    assert "".join(out) == JA.replace(" ", "")
    assert len(out) >= 10 and "Debian" in out


def test_punctuation_is_glued_to_the_word_before_like_a_whitespace_token():
    assert glue_punctuation(["系统", "。", "这", " ", "，", "好"]) == ["系统。", "这，", "好"]
    assert glue_punctuation(["「", "テスト", "」"]) == ["「テスト」"]  # an opening mark joins the word after
    assert glue_punctuation(["。"]) == ["。"]
    # Every word holds a letter or digit except a line made only of punctuation.
    assert all(re.search(r"\w", w) for w in words(ZH, "zh"))


def test_lines_are_segmented_separately():
    out = words("第一行\n。第二行", "zh")
    assert out[0] == "第一行"  # the second line's leading mark does not glue back across the break
    assert "".join(out) == "第一行。第二行"


def test_segmenters_are_installed_and_named():
    assert set(SEGMENTED) == {"zh", "ja"}
    assert "missing" not in segmenter_versions().values()
