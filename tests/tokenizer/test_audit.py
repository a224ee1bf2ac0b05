from tokenmill.config import TokenizerConfig
from tokenmill.tokenizer.audit import audit_bucket
from tokenmill.tokenizer.bpe import train_bpe

from tests.conftest import real_documents


def test_audit_counts_match_independent_encoding():
    docs = real_documents()["prose"]
    tok = train_bpe(docs, TokenizerConfig(vocab_size=300))
    a = audit_bucket(tok, docs[:5])
    n_tokens = sum(len(tok.encode(t, add_special_tokens=False).ids) for t in docs[:5])
    n_bytes = sum(len(t.encode()) for t in docs[:5])
    assert a["tokens"] == n_tokens and a["bytes"] == n_bytes
    assert a["bytes_per_token"] == n_bytes / n_tokens
    assert a["roundtrip_exact"] == 1.0


def test_empty_bucket():
    tok = train_bpe(["hello world"] * 3, TokenizerConfig(vocab_size=300, min_frequency=1))
    assert audit_bucket(tok, [])["docs"] == 0
