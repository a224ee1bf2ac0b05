"""The tokenize stage: the token store and its held-out split.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenmill.config_base import Strict


class TokenizeConfig(Strict):
    """Turn curated documents into memmapped token shards with document offsets."""

    val_fraction: float = Field(0.05, ge=0.0, lt=1.0, description="Documents held out per bucket.")
    min_val_docs: int = Field(2, ge=0, description="At least this many held-out documents per bucket.")
    dedup_heldout: bool = Field(
        True,
        description="Move held-out documents that duplicate a training document (exact or MinHash, curate.minhash_dedup settings) to training.",
    )
    shuffle_records: int = Field(
        1_000_000,
        ge=1,
        description="Records per partition of the held-out duplicate check's shuffle on disk (one task holds one partition: ~150 bytes per record at peak).",
    )
    shard_tokens: int = Field(50_000_000, ge=1, description="Start a new shard after this many tokens.")
    batch_docs: int = Field(512, ge=1, description="Documents encoded per batch.")
    workers: int = Field(
        2,
        ge=1,
        description="Cores to encode with: processes over curated parts when the data is large, else threads (the output does not depend on it).",
    )
    encoder: Literal["auto", "hf"] = Field(
        "auto",
        description="auto: tiktoken running the trained merges when verified identical to HF on the training sample, else HF; hf: always HF tokenizers.",
    )
    verify_chars: int = Field(
        4096,
        ge=0,
        description="Characters at the start of each curated part also encoded with HF and compared (a mismatch re-encodes the part with HF; 0: off).",
    )
