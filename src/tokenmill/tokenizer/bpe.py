"""Train a byte-level BPE with HF `tokenizers` on a seeded sample of the curated training text.

Byte-level means every string round-trips exactly: no unknown token, no normalizer that would
change the text curation already normalized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tokenmill.config import TokenizerConfig
from tokenmill.tokenizer.special import SPECIAL_TOKENS


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    # GPT-2-style split (words, numbers, punctuation, whitespace) before merges, over bytes.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(texts: Iterable[str], cfg: TokenizerConfig) -> Tokenizer:
    """Special tokens first (ids 0, 1, 2), then the 256 byte symbols, then merges."""
    if cfg.vocab_size < len(SPECIAL_TOKENS) + 256:
        raise ValueError(f"tokenizer.vocab_size={cfg.vocab_size}: must be at least {len(SPECIAL_TOKENS) + 256}")
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=cfg.max_token_bytes,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def sample_texts(texts: Iterable[str], total_bytes: int, budget_bytes: int, seed: int) -> Iterator[str]:
    """A seeded uniform sample of a text stream up to ~budget bytes, in stream order.

    Every document is kept with the same probability budget/total, so each bucket is
    represented in proportion to its size, and the stream is never held in memory.
    """
    p = 1.0 if total_bytes <= budget_bytes else budget_bytes / total_bytes
    rng = np.random.default_rng([seed, 0x70C])
    for text in texts:
        if p >= 1.0 or rng.random() < p:
            yield text


def load_tokenizer(path: Path) -> Tokenizer:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no tokenizer here (run `tokenmill tokenizer train`)")
    return Tokenizer.from_file(str(path))
