"""Train, load and identify a byte-level BPE built with HF `tokenizers`.

Byte-level means every string round-trips exactly: no unknown token, no normalizer that would
change the text curation already normalized.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tokenmill.tokenizer.config import TokenizerConfig
from tokenmill.tokenizer.special import special_tokens


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    # GPT-2-style split (words, numbers, punctuation, whitespace) before merges, over bytes.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(texts: Iterable[str], cfg: TokenizerConfig) -> Tokenizer:
    """Special tokens first (ids 0, 1, ...), then the 256 byte symbols, then merges in order."""
    specials = special_tokens(cfg.n_sentinels)
    if cfg.vocab_size < len(specials) + 256:
        raise ValueError(
            f"tokenizer.vocab_size={cfg.vocab_size}: must be at least {len(specials) + 256} "
            f"({len(specials)} special tokens + 256 bytes)"
        )
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=cfg.max_token_bytes,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.encode_special_tokens = True
    return tok


def load_tokenizer(path: Path) -> Tokenizer:
    """The tokenizer, set to encode special-token strings found in text as ordinary text.

    The flag is not saved in tokenizer.json, so every load sets it: a document containing
    `<|endoftext|>` must not gain an EOS in the middle.
    """
    if not path.exists():
        raise FileNotFoundError(f"{path}: no tokenizer here (run `tokenmill tokenizer train CONFIG`)")
    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = True
    return tok


def tokenizer_sha256(path: Path) -> str:
    """Identity of a trained tokenizer: sha256 of its tokenizer.json bytes."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no tokenizer here (run `tokenmill tokenizer train CONFIG`)")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte, the alphabet HF ByteLevel writes tokens in:
    printable Latin-1 bytes stand for themselves, the other 68 map to U+0100 upwards in order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def token_bytes(tok: Tokenizer) -> list[bytes]:
    """Raw bytes of every token, indexed by id (a special token: its UTF-8 text)."""
    to_byte = {c: b for b, c in byte_to_unicode().items()}
    specials = {t.content for t in tok.get_added_tokens_decoder().values()}
    out: list[bytes] = [b""] * tok.get_vocab_size()
    for text, i in tok.get_vocab().items():
        out[i] = text.encode("utf-8") if text in specials else bytes(to_byte[c] for c in text)
    return out
