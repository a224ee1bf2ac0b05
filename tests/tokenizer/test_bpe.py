import hashlib

import pytest
from tokenizers import Tokenizer, pre_tokenizers

from tokenmill.config import TokenizerConfig
from tokenmill.tokenizer.bpe import byte_to_unicode, load_tokenizer, token_bytes, tokenizer_sha256, train_bpe
from tokenmill.tokenizer.special import BOS, BOS_ID, EOS, EOS_ID, MASK, MASK_ID, PAD, PAD_ID, sentinel

from tests.conftest import real_documents


def _trained(vocab=400, **kw):
    docs = real_documents()
    return train_bpe(docs["prose"] + docs["code"], TokenizerConfig(vocab_size=vocab, **kw)), docs


def test_special_ids_vocab_size_and_lossless_roundtrip():
    tok, docs = _trained(n_sentinels=5)
    assert tok.get_vocab_size() == 400
    assert [tok.token_to_id(t) for t in (EOS, BOS, PAD, MASK)] == [EOS_ID, BOS_ID, PAD_ID, MASK_ID]
    assert [tok.token_to_id(sentinel(i)) for i in range(6)] == [4, 5, 6, 7, 8, None]
    odd = "naïve café — 東京 🚀\ttabs\r\n  spaces\x00"
    for text in [*docs["code"][:2], odd]:
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text


def test_vocab_too_small_for_specials_and_bytes():
    with pytest.raises(ValueError, match="at least 292"):
        _trained(vocab=291)


def test_merges_compress_below_one_token_per_byte():
    tok, docs = _trained()
    text = docs["prose"][0]
    n = len(tok.encode(text, add_special_tokens=False).ids)
    assert n < 0.6 * len(text.encode("utf-8"))


def test_special_token_text_in_data_stays_text(tmp_path):
    tok, _ = _trained()
    path = tmp_path / "tokenizer.json"
    path.write_text(tok.to_str())
    text = f"a{EOS}b {BOS}{PAD}{MASK}{sentinel(0)}"
    specials = set(range(4 + 32))
    # Without the flag HF would cut out the special tokens: the check below can fail.
    assert EOS_ID in Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids
    for t in (tok, load_tokenizer(path)):
        ids = t.encode(text, add_special_tokens=False).ids
        assert not specials & set(ids)
        assert t.decode(ids) == text


def test_tokenizer_hash_is_sha256_of_the_file(tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text("{}")
    assert tokenizer_sha256(p) == hashlib.sha256(b"{}").hexdigest()
    p.write_text("{ }")
    assert tokenizer_sha256(p) != hashlib.sha256(b"{}").hexdigest()
    with pytest.raises(FileNotFoundError, match="tokenizer train"):
        tokenizer_sha256(tmp_path / "none.json")


def test_byte_alphabet_matches_hf_and_token_bytes_rebuild_text():
    assert set(byte_to_unicode().values()) == set(pre_tokenizers.ByteLevel.alphabet())
    tok, docs = _trained()
    pieces = token_bytes(tok)
    assert pieces[EOS_ID] == EOS.encode() and len(set(pieces)) == len(pieces)
    for text in [docs["prose"][3], "naïve 東京 🚀 \x00\x7f"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert b"".join(pieces[i] for i in ids) == text.encode("utf-8")
