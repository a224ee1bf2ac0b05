import json

import numpy as np
import pytest
from tokenizers import Tokenizer, normalizers

from tokenmill.config import TokenizerConfig
from tokenmill.tokenizer.bpe import train_bpe
from tokenmill.tokenizer.fast_encode import (FastEncodeUnsupported, HFEncoder, TiktokenEncoder, byte_level_encoding,
                                             choose_encoder, compare_encoders, load_encoder, verify_fast_encoder,
                                             write_record)
from tokenmill.tokenizer.special import EOS, sentinel

from tests.conftest import real_documents

# Characters from every class the split pattern tells apart: letters (several scripts,
# combining marks), digits (ASCII and others), punctuation, apostrophe contractions, spaces,
# tabs, line breaks, other whitespace, emoji (incl. ZWJ sequences), control characters.
ALPHABET = list("abcXYZ éüßñ東京語Ωжم\u0301\u0308 0123456789٣½ .,;:!?'\"-_()[]{}<>|/\\@#$%^&*+=~`") + [
    "'s", "'ll", "'re", "'ve", "'d", "'t", "'m", "  ", "   ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u2003",
    "\u3000", "🚀", "👩‍💻", "🇫🇷", "\x00", "\x1b", "\u200b", " the", " def ", "12345", EOS, sentinel(3)]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    docs = real_documents()
    return train_bpe(docs["prose"] + docs["code"], TokenizerConfig(vocab_size=1500, n_sentinels=4))


def _random_texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(ALPHABET, size=int(rng.integers(1, 120)))) for _ in range(n)]


def test_tiktoken_ids_identical_to_hf(tok):
    docs = real_documents()
    edge = ["", " ", "  x", "x  ", "\n\n\n", "a\u00a0\u00a0b", "1234567890123", "3.14159 1e-9 0x1F",
            "naïve café — 東京 🚀\ttabs\r\n  spaces\x00", "don't it's we'll THEY'RE", f"a{EOS}b", "    def f():\n\treturn 1\n"]
    texts = docs["prose"] + docs["code"] + edge + _random_texts(400, seed=0)
    hf, fast = HFEncoder(tok), TiktokenEncoder(byte_level_encoding(tok))
    got = compare_encoders(hf, fast, texts, batch_docs=64)
    assert got["docs"] == len(texts) and got["mismatched_docs"] == 0, got["first_mismatch"]
    # Same dtype/length as HF's own list, special-token text never an EOS.
    (ids,) = fast.encode([f"x{EOS}y"])
    assert ids.tolist() == tok.encode(f"x{EOS}y", add_special_tokens=False).ids and 0 not in ids.tolist()


def test_compare_finds_a_difference(tok):
    class OffByOne(HFEncoder):
        def encode(self, texts):
            out = super().encode(texts)
            if len(out) > 1:
                out[1] = out[1].copy()
                out[1][2] += 1
            return out

    got = compare_encoders(HFEncoder(tok), OffByOne(tok), ["a b c d", "e f g h", "i j"], batch_docs=8)
    assert got["mismatched_docs"] == 1 and got["first_mismatch"] == {"doc": 1, "token": 2}


def test_unsupported_tokenizers_are_refused(tok):
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    a, b = (x + y for x, y in spec["model"]["merges"][10:12])  # two merge results: swap their ids
    vocab[a], vocab[b] = vocab[b], vocab[a]
    with pytest.raises(FastEncodeUnsupported, match="merge order"):
        byte_level_encoding(Tokenizer.from_str(json.dumps(spec)))
    other = Tokenizer.from_str(tok.to_str())
    other.normalizer = normalizers.NFKC()
    with pytest.raises(FastEncodeUnsupported, match="normalizer"):
        byte_level_encoding(other)


def test_record_drives_the_choice(tok, tmp_path):
    (tmp_path / "tokenizer.json").write_text(tok.to_str())
    assert choose_encoder(tmp_path, "auto")[0] == "hf"  # no record yet
    record = verify_fast_encoder(tok, tmp_path / "tokenizer.json", real_documents()["prose"])
    assert record["identical"] and record["docs"] == 40 and record["mismatched_docs"] == 0
    write_record(record, tmp_path)
    assert choose_encoder(tmp_path, "auto") == ("tiktoken", None)
    assert choose_encoder(tmp_path, "hf") == ("hf", None)
    write_record({**record, "identical": False, "mismatched_docs": 1}, tmp_path)
    name, why = choose_encoder(tmp_path, "auto")
    assert name == "hf" and "differs" in why
    write_record(record, tmp_path)
    (tmp_path / "tokenizer.json").write_text(tok.to_str() + " ")
    name, why = choose_encoder(tmp_path, "auto")
    assert name == "hf" and "another tokenizer" in why


def test_load_encoder_builds_each_kind(tok, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(tok.to_str())
    fast, hf = load_encoder(path, "tiktoken"), load_encoder(path, "hf")
    assert (fast.name, hf.name) == ("tiktoken", "hf") and load_encoder(path, "tiktoken") is fast
    texts = real_documents()["prose"]
    threaded = load_encoder(path, "tiktoken", threads=3)
    assert threaded is not fast and load_encoder(path, "hf", threads=3) is hf
    for a, b, c in zip(fast.encode(texts), hf.encode(texts), threaded.encode(texts)):
        assert np.array_equal(a, b) and np.array_equal(a, c)
