"""The paraphrase builder of the labelled contamination set."""

from __future__ import annotations

import random

import pytest

from tokenmill.eval.paraphrase import paraphrase, plant, wordnet_synonyms

HEADER = "  1 This software and database is being provided to you, the LICENSEE, by Princeton University\n"


def test_wordnet_synsets_become_synonyms(tmp_path):
    (tmp_path / "data.noun").write_text(HEADER + "00001740 03 n 02 car 0 automobile 0 001 @ 00001 n 0000 | a motor vehicle\n"
                                        "00001741 03 n 02 dog 0 domestic_dog 0 000 | a pet\n")
    (tmp_path / "data.verb").write_text(HEADER + "00002000 29 v 03 leave 0 exit 0 go_out 0 000 | move out\n")
    (tmp_path / "data.adj").write_text(HEADER + "00003000 00 a 02 big(a) 0 large 0 000 | above average\n")
    (tmp_path / "data.adv").write_text(HEADER)
    syn = wordnet_synonyms(tmp_path)
    assert syn["car"] == ["automobile"] and syn["leave"] == ["exit"] and syn["big"] == ["large"]
    assert "dog" not in syn  # its only other lemma has two words
    with pytest.raises(FileNotFoundError, match="data.noun"):
        wordnet_synonyms(tmp_path / "nowhere")


def test_a_paraphrase_swaps_words_and_clauses_deterministically():
    text = "To leave a loop before it ends, write the statement break"
    syn = {"leave": ["exit"], "write": ["use"], "statement": ["instruction"]}
    a = paraphrase(text, syn, random.Random(0), p_synonym=1.0)
    assert a == paraphrase(text, syn, random.Random(0), p_synonym=1.0)
    assert a == "Use a instruction break, to exit the loop before it ends."


def test_plant_labels_half_of_each_task_and_plants_each_once():
    items = {"t": [f"item number {i} says something about topic {i}, and then some more words" for i in range(6)]}
    docs = [(f"d{k}", "One sentence here. Another sentence there. A third one.") for k in range(4)]
    new, labels, texts = plant(items, docs, {}, seed=1)
    assert sum(labels["t"]) == 3 and sorted(texts["t"]) == [i for i, y in enumerate(labels["t"]) if y]
    body = " ".join(t for _, t in new)
    assert all(body.count(p) == 1 for p in texts["t"].values())
    assert [d for d, _ in new] == [d for d, _ in docs]
