import pytest

from tokenmill.config import TokenizerConfig
from tokenmill.tokenizer.audit import audit_bucket, key_term_splits
from tokenmill.tokenizer.bpe import train_bpe

from tests.conftest import real_documents


@pytest.fixture(scope="module")
def tok():
    return train_bpe(real_documents()["prose"], TokenizerConfig(vocab_size=600))


def test_audit_counts_match_independent_encoding(tok):
    docs = real_documents()["prose"][:5]
    a = audit_bucket(tok, docs)
    n_tokens = sum(len(tok.encode(t, add_special_tokens=False).ids) for t in docs)
    n_bytes = sum(len(t.encode()) for t in docs)
    n_words = sum(len(t.split()) for t in docs)
    assert a["tokens"] == n_tokens and a["bytes"] == n_bytes and a["words"] == n_words
    assert a["bytes_per_token"] == n_bytes / n_tokens
    assert a["tokens_per_word"] == n_tokens / n_words
    assert a["roundtrip_exact"] == 1.0


def test_byte_fallback_counts_lone_non_ascii_bytes(tok):
    # The prose has no CJK: no merge covers a CJK character's 3 bytes, so each becomes 3 lone bytes.
    cjk = audit_bucket(tok, ["東京都 日本語"])
    assert cjk["tokens"] == 6 * 3 + 1  # six characters, one space
    assert cjk["byte_fallback_rate"] == 18 / 19 and cjk["partial_char_rate"] == 18 / 19
    ascii_only = audit_bucket(tok, [t for t in real_documents()["prose"] if t.isascii()])
    assert ascii_only["byte_fallback_rate"] == 0.0 and ascii_only["partial_char_rate"] == 0.0
    assert cjk["roundtrip_exact"] == 1.0


def test_key_terms_show_their_tokens(tok):
    got = key_term_splits(tok, ["the", "東", "__init__"])
    assert got["the"]["spaced"] == [" the"]  # a frequent word: one token after a space
    assert got["東"]["tokens"] == ["\\xe6", "\\x9d", "\\xb1"]  # lone bytes shown escaped
    assert "".join(got["__init__"]["tokens"]) == "__init__"
    assert "".join(got["__init__"]["spaced"]) == " __init__"


def test_empty_bucket(tok):
    a = audit_bucket(tok, [])
    assert a["docs"] == 0 and a["byte_fallback_rate"] == 0.0
