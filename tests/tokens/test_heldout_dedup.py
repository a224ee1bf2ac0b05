import random

from tokenmill.config import MinHashConfig
from tokenmill.tokens.heldout_dedup import exact_key, training_duplicates

CFG = MinHashConfig()


def _text(seed: int, n: int = 120) -> str:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "paper", "light", "green", "metal",
             "ocean", "field", "tower", "glass", "sound", "north", "quiet", "amber", "cedar"]
    return " ".join(rng.choice(words) + str(rng.randint(0, 50)) for _ in range(n))


def test_exact_key_ignores_case_punctuation_and_spacing():
    assert exact_key("Hello, World!\n") == exact_key("hello   world")
    assert exact_key("hello world") != exact_key("hello there")


def test_exact_and_near_duplicates_of_training_documents_are_found():
    base = _text(1)
    words = base.split()
    near = " ".join(words[:-3] + ["zz1", "zz2", "zz3"])  # 3 of 120 words changed: Jaccard ~0.93
    texts = {"t1": base, "t2": _text(2), "h_exact": base.upper() + " !!", "h_near": near, "h_new": _text(3)}
    found = training_duplicates(texts, {"h_exact", "h_near", "h_new"}, CFG, seed=7)
    assert set(found) == {"h_exact", "h_near"}
    assert found["h_exact"] == {"reason": "exact", "match": "t1", "jaccard": 1.0}
    assert found["h_near"]["reason"] == "near" and found["h_near"]["match"] == "t1"
    assert CFG.threshold <= found["h_near"]["jaccard"] < 1.0


def test_held_out_documents_are_never_matched_to_each_other():
    base = _text(5)
    texts = {"t": _text(6), "h1": base, "h2": base}  # duplicates inside the held-out split only
    assert training_duplicates(texts, {"h1", "h2"}, CFG, seed=7) == {}
    assert training_duplicates({"t": base}, set(), CFG, seed=7) == {}
