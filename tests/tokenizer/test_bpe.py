from tokenmill.config import TokenizerConfig
from tokenmill.tokenizer.bpe import sample_texts, train_bpe
from tokenmill.tokenizer.special import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID

from tests.conftest import real_documents


def _trained(vocab=400):
    docs = real_documents()
    return train_bpe(docs["prose"] + docs["code"], TokenizerConfig(vocab_size=vocab)), docs


def test_special_ids_vocab_size_and_lossless_roundtrip():
    tok, docs = _trained()
    assert tok.get_vocab_size() == 400
    assert [tok.token_to_id(t) for t in (EOS, BOS, PAD)] == [EOS_ID, BOS_ID, PAD_ID]
    odd = "naïve café — 東京 🚀\ttabs\r\n  spaces\x00"
    for text in [*docs["code"][:2], odd]:
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text


def test_merges_compress_below_one_token_per_byte():
    tok, docs = _trained()
    text = docs["prose"][0]
    n = len(tok.encode(text, add_special_tokens=False).ids)
    assert n < 0.6 * len(text.encode("utf-8"))


def test_special_token_text_is_matched_as_one_token():
    tok, _ = _trained()
    assert tok.encode(f"a{EOS}b", add_special_tokens=False).ids.count(EOS_ID) == 1


def test_sample_is_seeded_and_near_budget():
    texts = [f"document number {i} " * 10 for i in range(2000)]
    total = sum(len(t.encode()) for t in texts)
    a = list(sample_texts(iter(texts), total, total // 4, seed=3))
    b = list(sample_texts(iter(texts), total, total // 4, seed=3))
    assert a == b
    got = sum(len(t.encode()) for t in a)
    assert 0.8 * total / 4 < got < 1.2 * total / 4
    assert list(sample_texts(iter(texts), total, total * 2, seed=3)) == texts
