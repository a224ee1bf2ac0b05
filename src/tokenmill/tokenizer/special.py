"""Special tokens: fixed ids at the start of the vocabulary, the same in every run.

EOS, BOS, PAD (ids 0, 1, 2) serve the causal objective and packing; MASK (3) the masked-LM
objective; the sentinels `<|extra_id_0|>`, `<|extra_id_1|>`, ... (ids 4, 5, ...) stand for the
dropped spans of T5-style span corruption. Their number is `tokenizer.n_sentinels`; the ids below
are those of the default count, and a trained tokenizer's own are in `tokens/_meta.json`.

Special tokens are never produced from text: a document that contains the string
`<|endoftext|>` is encoded as ordinary text (see `bpe.load_tokenizer`), so data cannot inject an
EOS, a document boundary or a sentinel.
"""

from __future__ import annotations

EOS = "<|endoftext|>"
BOS = "<|bos|>"
PAD = "<|pad|>"
MASK = "<|mask|>"
EOS_ID, BOS_ID, PAD_ID, MASK_ID = 0, 1, 2, 3
FIRST_SENTINEL_ID = 4
DEFAULT_N_SENTINELS = 32


def sentinel(i: int) -> str:
    """The i-th span-corruption sentinel (T5 spelling)."""
    return f"<|extra_id_{i}|>"


def special_tokens(n_sentinels: int = DEFAULT_N_SENTINELS) -> tuple[str, ...]:
    """Every special token in id order: EOS, BOS, PAD, MASK, then the sentinels."""
    return (EOS, BOS, PAD, MASK, *(sentinel(i) for i in range(n_sentinels)))


def sentinel_ids(n_sentinels: int = DEFAULT_N_SENTINELS) -> tuple[int, ...]:
    return tuple(range(FIRST_SENTINEL_ID, FIRST_SENTINEL_ID + n_sentinels))


SPECIAL_TOKENS: tuple[str, ...] = special_tokens()
SENTINEL_IDS: tuple[int, ...] = sentinel_ids()
