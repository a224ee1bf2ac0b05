"""The tokenizer stage: byte-level BPE trained on a sample of the curated text.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from tokenmill.config_base import Strict


class TokenizerConfig(Strict):
    """Byte-level BPE trained with HF `tokenizers` on a sample of the curated text."""

    vocab_size: int = Field(4096, ge=1, description="Vocabulary size including special tokens.")
    file: str | None = Field(
        None,
        description="A tokenizer.json trained by tokenmill to use instead of training one (the same tokenizer across runs: ablations, continued pretraining); its vocabulary size is its own. None: train.",
    )
    min_frequency: int = Field(2, ge=1, description="A pair must occur this often to be merged.")
    sample_bytes: int = Field(
        30_000_000,
        ge=1,
        description="Train on at most this many bytes of text (split over buckets by their size unless bucket_bytes is set).",
    )
    bucket_bytes: dict[str, Annotated[int, Field(ge=0)]] | None = Field(
        None,
        description="Training-sample bytes per bucket (an unlisted bucket gives none); None: sample_bytes in proportion to each bucket's training bytes.",
    )
    sample_partition_docs: int = Field(
        4_000_000,
        ge=1,
        description="Documents per partition of the sample's priority order on disk (one task holds one partition: ~32 bytes per document with its sort).",
    )
    max_token_bytes: int = Field(32, ge=1, description="Longest token, in characters, BPE may create.")
    n_sentinels: int = Field(
        32, ge=0, description="Span-corruption sentinels <|extra_id_0|>... after EOS, BOS, PAD, MASK (ids 4..)."
    )
    key_terms: list[str] = Field(
        ["function", "return", "__init__", "isinstance", "UnicodeDecodeError", "tokenizer", "2024", "naïve", "東京"],
        description="Terms whose split into tokens the audit shows (docs/curation.md, the tokenizer audit).",
    )
    audit_docs: int = Field(200, ge=1, description="Held-out documents per bucket the audit encodes.")

    @model_validator(mode="after")
    def _room_for_merges(self) -> "TokenizerConfig":
        from tokenmill.tokenizer.special import special_tokens  # lazy: keeps this module free of imports

        floor = len(special_tokens(self.n_sentinels)) + 256
        if self.file is None and self.vocab_size < floor:
            raise ValueError(
                f"tokenizer.vocab_size={self.vocab_size}: must be at least {floor} ({floor - 256} special tokens + 256 bytes)"
            )
        return self
