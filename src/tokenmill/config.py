"""Pydantic models for every stage: YAML in, unknown keys rejected with their path.

A run is described by one `RunConfig`. The CLI only picks the YAML file and applies
`--set section.key=value` overrides; every knob lives here with a default and a one-line
description, and the fully resolved config is written to the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from tokenmill.errors import UserError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(UserError, ValueError):
    """A config file or override that cannot be used; the message names the file and key."""


class Strict(BaseModel):
    """Base for config sections: unknown keys are errors, not silently ignored typos."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --------------------------------------------------------------------------- curate
class SourceConfig(Strict):
    """One input of the curation stage."""

    kind: Literal["files", "python_stdlib"] = Field(
        "files", description="'files': paths on disk; 'python_stdlib': the embedded demo corpus."
    )
    path: str | None = Field(None, description="File, directory or glob (kind=files).")
    part: Literal["code", "pydoc_html", "reference", "system_html"] | None = Field(
        None, description="Which part of the Python installation to read (kind=python_stdlib)."
    )
    format: Literal["auto", "html", "text", "code", "jsonl", "parquet", "warc"] = Field(
        "auto", description="How to read each file; 'auto' decides by file extension."
    )
    bucket: str = Field(..., description="Bucket (slice of the mixture) the documents go to.")
    license: str = Field("unknown", description="License recorded on every document of this source.")
    text_field: str = Field("text", description="Field holding the text in jsonl/parquet records.")
    max_docs: int | None = Field(None, description="Read at most this many documents (None: all).")
    max_bytes: int | None = Field(None, description="Read at most this many raw bytes (None: all).")
    synthetic: bool = Field(False, description="Model-generated JSONL (`tokenmill synth`): every record's lineage is checked and kept on its row; a record without one counts as generation 1 of an outside teacher.")


class QualityConfig(Strict):
    """Heuristic rules on prose buckets, published thresholds as defaults: Gopher quality and
    repetition (Rae et al. 2021, §A.1.1 / Table A1), C4 (Raffel et al. 2020), FineWeb (Penedo et al. 2024)."""

    skip_buckets: list[str] = Field(["code"], description="Buckets the rules do not apply to (signals and the length floor still do).")
    # Gopher quality rules
    gopher: bool = Field(True, description="Apply the Gopher quality rules.")
    min_words: int = Field(50, description="Fewer words than this: rejected.")
    max_words: int = Field(100_000, description="More words than this: rejected.")
    min_mean_word_len: float = Field(3.0, description="Mean word length below this: rejected.")
    max_mean_word_len: float = Field(10.0, description="Mean word length above this: rejected.")
    max_symbol_word_ratio: float = Field(0.1, description="'#' and '...' per word above this: rejected.")
    max_bullet_line_frac: float = Field(0.9, description="Fraction of lines starting with a bullet.")
    max_ellipsis_line_frac: float = Field(0.3, description="Fraction of lines ending with an ellipsis.")
    min_alpha_word_frac: float = Field(0.8, description="Fraction of words with a letter, below: rejected.")
    min_stop_words: int = Field(2, description="Fewer English stop words than this: rejected.")
    # Gopher repetition rules (Table A1)
    gopher_repetition: bool = Field(True, description="Apply the Gopher repetition rules.")
    max_dup_line_frac: float = Field(0.30, description="Share of lines that repeat an earlier line.")
    max_dup_para_frac: float = Field(0.30, description="Share of paragraphs that repeat an earlier paragraph.")
    max_dup_line_char_frac: float = Field(0.20, description="Share of line characters in repeated lines.")
    max_dup_para_char_frac: float = Field(0.20, description="Share of paragraph characters in repeated paragraphs.")
    max_top_ngram_char_frac: dict[int, float] = Field(
        {2: 0.20, 3: 0.18, 4: 0.16}, description="n (2-4) -> limit on the word characters of the most frequent word n-gram.")
    max_dup_ngram_char_frac: dict[int, float] = Field(
        {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},
        description="n (5-10) -> limit on the share of word characters inside repeated word n-grams.")
    # C4 rules
    c4: bool = Field(True, description="Apply the C4 document rules (lorem ipsum, curly bracket, minimum sentences).")
    c4_min_sentences: int = Field(5, description="Fewer sentences in the lines C4 keeps: rejected.")
    c4_min_words_per_line: int = Field(3, description="C4 keeps only lines with at least this many words.")
    c4_max_word_len: int = Field(1000, description="C4 drops lines with a word longer than this.")
    c4_curly_bracket: bool = Field(True, description="Reject documents with '{' in a line C4 keeps (off for code-rich prose).")
    c4_remove_lines: bool = Field(False, description="Also delete the lines C4's line rules drop (False: measure and filter only).")
    # FineWeb rules
    fineweb: bool = Field(True, description="Apply the FineWeb rules.")
    min_line_punct_frac: float = Field(0.12, description="Share of lines ending in terminal punctuation, below: rejected.")
    max_short_line_frac: float = Field(0.67, description="Share of short lines, above: rejected.")
    short_line_chars: int = Field(30, description="A line of at most this many characters is short (FineWeb).")
    max_char_dup_frac: float = Field(0.01, description="Share of characters in repeated lines, above: rejected (FineWeb).")
    max_newline_word_ratio: float = Field(0.3, description="Line breaks per word, above: rejected (FineWeb list pages).")

    @field_validator("max_top_ngram_char_frac")
    @classmethod
    def _top_ngram_sizes(cls, v: dict[int, float]) -> dict[int, float]:
        if not set(v) <= {2, 3, 4}:
            raise ValueError(f"n must be 2, 3 or 4 (the measured top n-grams), got {sorted(v)}")
        return v

    @field_validator("max_dup_ngram_char_frac")
    @classmethod
    def _dup_ngram_sizes(cls, v: dict[int, float]) -> dict[int, float]:
        if not set(v) <= set(range(5, 11)):
            raise ValueError(f"n must be 5 to 10 (the measured duplicate n-grams), got {sorted(v)}")
        return v


CURATE_STEPS: tuple[str, ...] = (
    "extract", "normalize", "url", "langid", "quality", "model_quality", "safety", "pii",
    "exact_dedup", "minhash_dedup", "line_dedup", "substring_dedup", "decontaminate", "bucket",
)


class ExtractConfig(Strict):
    """HTML main-content extraction."""

    fallback: bool = Field(True, description="When the main extractor finds nothing, try the fallback extractor.")


class NormalizeConfig(Strict):
    """Unicode and whitespace normalization."""

    fix_mojibake: bool = Field(True, description="Repair UTF-8 decoded as Latin-1/cp1252 (ftfy).")


class UrlFilterConfig(Strict):
    """Domain block / allow lists (one domain per line; a domain matches its subdomains)."""

    block_lists: list[str] = Field(default_factory=list, description="Files of blocked domains.")
    allow_lists: list[str] = Field(default_factory=list, description="Files of allowed domains; when set, only these pass.")


class LangIdConfig(Strict):
    """Offline language identification (model shipped inside its wheel)."""

    languages: list[str] | None = Field(None, description="ISO 639-1 codes to keep (None: keep every language).")
    min_score: float = Field(0.65, description="Documents whose top language scores below this are removed.")
    paragraph_check: bool = Field(True, description="Score paragraphs too and flag mixed-language documents.")
    mixed_min_frac: float = Field(0.2, description="Flag a document mixed when this share of its paragraphs' text is confidently another language.")
    max_foreign_frac: float | None = Field(
        None, description="Remove documents whose share of paragraphs in another language exceeds this (None: flag only)."
    )
    skip_buckets: list[str] = Field(["code"], description="Buckets language ID does not apply to.")


class ModelQualityConfig(Strict):
    """Model-based quality: an n-gram LM perplexity (CCNet) and a linear classifier, both trained here."""

    reference: str | None = Field(None, description="Reference corpus (file or dir of text/jsonl) the models learn 'good' from; None: step off.")
    ngram_order: int = Field(3, ge=1, description="Order of the n-gram language model.")
    max_perplexity: float | None = Field(None, description="Remove documents above this perplexity (None: score only).")
    classifier: bool = Field(True, description="Also train a reference-vs-random linear classifier.")
    min_classifier_score: float | None = Field(None, description="Remove documents below this score (None: score only).")
    tier_perplexities: list[float] | None = Field(None, description="Perplexity cut-points of the tiers head/middle/tail; None: the 30th and 60th percentiles of the random sample's (CCNet).")
    skip_buckets: list[str] = Field(["code"], description="Buckets the step does not apply to.")
    negative_every: int = Field(10, ge=1, description="Every k-th raw record of the run's sources is a 'random' example for the classifier.")
    max_examples: int = Field(20_000, ge=10, description="At most this many training passages per class for the classifier.")

    @field_validator("tier_perplexities")
    @classmethod
    def _two_increasing_cuts(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (len(v) != 2 or not v[0] < v[1]):
            raise ValueError(f"needs two increasing cut-points (head < first <= middle < second <= tail), got {v}")
        return v


class SafetyConfig(Strict):
    """Toxicity scoring with a word list (and an optional trained classifier)."""

    word_list: str | None = Field(None, description="File of terms, one per line (None: the built-in list).")
    threshold: float = Field(0.02, description="Remove documents whose toxicity score exceeds this.")
    skip_buckets: list[str] = Field(["code"], description="Buckets the step does not apply to.")


class PiiConfig(Strict):
    """PII replaced by typed placeholders; counts stored on the row."""

    kinds: list[Literal["email", "phone", "ip", "card", "iban", "national_id"]] = Field(
        ["email", "phone", "ip", "card", "iban", "national_id"], description="What to find and replace."
    )


class MinHashConfig(Strict):
    """Near-duplicate removal: shingles, MinHash with bands × rows permutations, LSH, verification."""

    shingle: Literal["word", "char"] = Field("word", description="Shingle unit.")
    k: int = Field(5, ge=1, description="Shingle length in units.")
    bands: int = Field(25, ge=1, description="LSH bands b (candidate probability 1-(1-J^r)^b: 0.99995 at J=0.8 with r=5).")
    rows: int = Field(5, ge=1, description="Rows per band r; permutations R = b × r.")
    threshold: float = Field(0.8, ge=0.0, le=1.0, description="Verified Jaccard at or above which two documents are duplicates.")
    verify: bool = Field(True, description="Check candidate pairs with their exact shingle Jaccard (False: with the MinHash estimate).")
    bucket_window: int = Field(64, ge=1, description="In an LSH bucket each document is paired with the next this-many members (all pairs in smaller buckets).")


class LineDedupConfig(Strict):
    """Lines or paragraphs repeated across many documents (menus, footers) removed inside documents."""

    unit: Literal["line", "paragraph"] = Field("line", description="What counts as one repeated unit.")
    min_docs: int = Field(10, description="A unit in at least this many documents is boilerplate.")
    min_chars: int = Field(10, description="Shorter units are never removed (blank lines, '}', bullets).")
    skip_buckets: list[str] = Field(["code"], description="Buckets whose lines are never removed (a repeated import line is code, not boilerplate).")


class SubstringDedupConfig(Strict):
    """Exact-substring dedup (Lee et al. 2022): spans of >= k units repeated anywhere in the corpus, found with suffix arrays."""

    enabled: bool = Field(False, description="Run the step (off by default: it builds suffix arrays over all kept text).")
    k: int = Field(50, ge=1, description="Shortest repeated span that counts, in units (Lee et al.: 50 tokens).")
    unit: Literal["word", "byte"] = Field("word", description="One unit: a word or one punctuation mark (about one BPE token; whitespace ignored), or one UTF-8 byte (the reference tool's unit).")
    mode: Literal["spans", "documents"] = Field("spans", description="spans: cut later copies of repeated spans out of the text (the first copy stays); documents: drop a document whose later-copy share exceeds max_dup_share.")
    max_dup_share: float = Field(0.5, ge=0.0, le=1.0, description="documents mode: a document with more than this share of its characters in later copies is removed.")
    shard_tokens: int = Field(50_000_000, ge=1, description="Units per suffix-array shard (whole documents); building one holds about 80 bytes per unit.")
    skip_buckets: list[str] = Field(default_factory=list, description="Buckets whose documents neither take part nor lose spans.")


class DecontaminateConfig(Strict):
    """n-gram overlap against the evaluation sets the user lists."""

    eval_sets: list[str] = Field(default_factory=list, description="JSONL files of evaluation items (a text field each).")
    text_fields: list[str] = Field(["text", "question", "answer", "context"], description="Fields whose text forms an item.")
    n: int = Field(13, description="n-gram length in words.")
    max_overlap: float = Field(0.0, description="Remove documents with more than this share of an item's n-grams (0: any shared n-gram).")


class BucketRule(Strict):
    """Documents matching every given condition go to `bucket` (first matching rule wins)."""

    bucket: str = Field(..., description="Target bucket.")
    source: str | None = Field(None, description="Glob on the source name.")
    domain: str | None = Field(None, description="Glob on the URL's domain.")
    language: str | None = Field(None, description="Language code.")
    tier: str | None = Field(None, description="Quality tier (head / middle / tail).")


class CanaryConfig(Strict):
    """Memorization canaries (Carlini et al. 2019, "The Secret Sharer"): a template with a random
    digit secret, inserted into the training data a chosen number of times during curation; the
    eval stage measures each canary's exposure. The secrets derive from the run seed."""

    counts: list[int] = Field(default_factory=list, description="Repetition counts, one group of canaries each (e.g. [1, 8, 64]); empty: no canaries.")
    per_count: int = Field(1, ge=1, description="Distinct canaries (secrets) per repetition count.")
    secret_digits: int = Field(9, ge=1, le=30, description="Length of the random digit secret; |R| = 10**secret_digits candidate secrets.")
    template: str = Field("my secret code is {secret}", description="Canary text with one '{secret}' (the digits, space-separated).")
    bucket: str = Field("", description="Bucket the canary documents go to; must be a bucket of the sources (empty: the first source's).")
    candidates: int = Field(1000, ge=10, description="Random reference secrets the exposure estimate ranks each canary against.")

    @field_validator("counts")
    @classmethod
    def _positive_counts(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError(f"canary counts must be >= 1, got {v}")
        return v

    @field_validator("template")
    @classmethod
    def _one_secret(cls, v: str) -> str:
        if v.count("{secret}") != 1:
            raise ValueError(f"canary template must hold exactly one '{{secret}}', got {v!r}")
        return v


class CurateConfig(Strict):
    """Curation: raw sources in, curated Parquet shards + rejected log + funnel out."""

    sources: list[SourceConfig] = Field(default_factory=list, description="Inputs of the run.")
    steps: list[str] | None = Field(None, description=f"Steps to run, in canonical order (None: all): {', '.join(CURATE_STEPS)}.")
    extract: ExtractConfig = Field(default_factory=ExtractConfig)
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    url: UrlFilterConfig = Field(default_factory=UrlFilterConfig)
    langid: LangIdConfig = Field(default_factory=LangIdConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig, description="Heuristic filters.")
    model_quality: ModelQualityConfig = Field(default_factory=ModelQualityConfig)
    safety: SafetyConfig = Field(default_factory=SafetyConfig)
    pii: PiiConfig = Field(default_factory=PiiConfig)
    minhash_dedup: MinHashConfig = Field(default_factory=MinHashConfig)
    line_dedup: LineDedupConfig = Field(default_factory=LineDedupConfig)
    substring_dedup: SubstringDedupConfig = Field(default_factory=SubstringDedupConfig)
    decontaminate: DecontaminateConfig = Field(default_factory=DecontaminateConfig)
    bucket_rules: list[BucketRule] = Field(default_factory=list, description="Bucket assignment rules (none: the source's bucket).")
    min_chars: int = Field(200, description="Documents shorter than this after extraction are dropped.")
    max_doc_bytes: int = Field(2_000_000, description="Larger raw records are quarantined, not parsed.")
    shard_docs: int = Field(5000, description="Kept documents per Parquet part.")
    chunk_docs: int = Field(1000, description="Records per resumable chunk inside a shard.")
    workers: int = Field(2, description="Processes for extraction and filtering.")
    executor: Literal["local", "ray"] = Field("local", description="Run shards in local processes or as Ray tasks.")
    max_removal_share: float = Field(0.9, description="A step removing more than this share of its input stops the run.")
    allow_empty_bucket: bool = Field(False, description="Let a bucket end up empty instead of stopping the run.")
    canaries: CanaryConfig = Field(default_factory=CanaryConfig, description="Memorization canaries inserted into training (off by default).")

    @field_validator("steps")
    @classmethod
    def _known_steps(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            unknown = [s for s in v if s not in CURATE_STEPS]
            if unknown:
                raise ValueError(f"unknown step(s) {unknown}; steps are {', '.join(CURATE_STEPS)}")
        return v


# --------------------------------------------------------------------------- tokenizer
class TokenizerConfig(Strict):
    """Byte-level BPE trained with HF `tokenizers` on a sample of the curated text."""

    vocab_size: int = Field(4096, description="Vocabulary size including special tokens.")
    min_frequency: int = Field(2, description="A pair must occur this often to be merged.")
    sample_bytes: int = Field(30_000_000, description="Train on at most this many bytes of text (split over buckets by their size unless bucket_bytes is set).")
    bucket_bytes: dict[str, int] | None = Field(
        None, description="Training-sample bytes per bucket (an unlisted bucket gives none); None: sample_bytes in proportion to each bucket's training bytes.")
    max_token_bytes: int = Field(32, description="Longest token, in characters, BPE may create.")
    n_sentinels: int = Field(32, ge=0, description="Span-corruption sentinels <|extra_id_0|>... after EOS, BOS, PAD, MASK (ids 4..).")
    key_terms: list[str] = Field(
        ["function", "return", "__init__", "isinstance", "UnicodeDecodeError", "tokenizer", "2024", "naïve", "東京"],
        description="Terms whose split into tokens the audit shows (seed 002's pre-tokenization audit).")
    audit_docs: int = Field(200, ge=1, description="Held-out documents per bucket the audit encodes.")


# --------------------------------------------------------------------------- tokenize
class TokenizeConfig(Strict):
    """Turn curated documents into memmapped token shards with document offsets."""

    val_fraction: float = Field(0.05, ge=0.0, lt=1.0, description="Documents held out per bucket.")
    min_val_docs: int = Field(2, description="At least this many held-out documents per bucket.")
    dedup_heldout: bool = Field(True, description="Move held-out documents that duplicate a training document (exact or MinHash, curate.minhash_dedup settings) to training.")
    shard_tokens: int = Field(50_000_000, description="Start a new shard after this many tokens.")
    batch_docs: int = Field(512, description="Documents encoded per batch.")
    workers: int = Field(2, ge=1, description="Cores to encode with: processes over curated parts when the data is large, else threads (the output does not depend on it).")
    encoder: Literal["auto", "hf"] = Field(
        "auto", description="auto: tiktoken running the trained merges when verified identical to HF on the training sample, else HF; hf: always HF tokenizers.")
    verify_chars: int = Field(4096, ge=0, description="Characters at the start of each curated part also encoded with HF and compared (a mismatch re-encodes the part with HF; 0: off).")


# --------------------------------------------------------------------------- mixture
class PhaseConfig(Strict):
    """One curriculum phase: a share of the token budget with its own mixture and sequence length."""

    name: str = Field(..., min_length=1, description="Phase name, shown in plans, events and checkpoints.")
    fraction: float = Field(..., gt=0.0, le=1.0, description="Share of the token budget (= of the optimizer steps).")
    weights: dict[str, float] | None = Field(
        None, description="Bucket weights in this phase (None: mixture.weights).")
    seq_len: int | None = Field(
        None, ge=1, description="Sequence length in this phase (None: train.seq_len); rows per micro-batch "
                                "become micro_batch·train.seq_len/seq_len so tokens per step stay constant.")
    anneal: bool = Field(False, description="Annealing phase: the trainer decays the LR over its steps; "
                                            "anneal phases come last.")


class SyntheticLimitsConfig(Strict):
    """The model-collapse guard (seed 004; Shumailov et al. 2024): limits on synthetic documents in
    the planned mixture, checked before training starts."""

    max_share: float = Field(0.5, ge=0.0, le=1.0, description="Most of a phase's tokens that may come from synthetic documents (seed 004: 50-70% human, 30-50% synthetic).")
    max_generation: int = Field(2, ge=0, description="Newest synthetic generation allowed (1: sampled from a model trained on real data; each model in between adds 1; 0: none).")


class MixtureConfig(Strict):
    """How training batches draw from buckets: weights, curriculum phases, packing, prefetch."""

    weights: dict[str, float] | None = Field(
        None, description="Sampling weight per bucket (None: proportional to training tokens)."
    )
    phases: list[PhaseConfig] = Field(
        default_factory=list, description="Curriculum phases in order, fractions summing to 1 "
                                          "(empty: one phase 'main' with `weights` and train.seq_len).")
    packing: Literal["packed", "padded"] = Field(
        "packed", description="'packed': documents concatenated with EOS into full rows; 'padded': one "
                              "document per row, truncated or padded with PAD (for comparison).")
    doc_masking: bool = Field(
        True, description="Block attention across documents, restart positions at each document and "
                          "leave cross-document targets out of the loss.")
    shuffle: Literal["block", "epoch"] = Field(
        "block", description="'block': a bucket's samples shuffled within blocks of 4096 (a short run reads "
                             "the first documents of the shuffled stream); 'epoch': drawn from a permutation "
                             "of all the bucket's windows of an epoch, so any prefix of a run, however short, "
                             "samples every document (scaling sweeps).")
    max_epochs_warn: float = Field(
        4.0, gt=0.0, description="Warn when a bucket is repeated more than this many epochs (seed 004).")
    prefetch: int = Field(8, ge=0, description="Micro-batches a background thread prepares ahead (0: off).")
    synthetic: SyntheticLimitsConfig = Field(default_factory=SyntheticLimitsConfig, description="Limits on synthetic data (the collapse guard).")

    @field_validator("phases")
    @classmethod
    def _phases_partition_the_budget(cls, v: list[PhaseConfig]) -> list[PhaseConfig]:
        if not v:
            return v
        names = [p.name for p in v]
        if len(set(names)) != len(names):
            raise ValueError(f"phase names must be unique, got {names}")
        total = sum(p.fraction for p in v)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"phase fractions must sum to 1, got {total:g} ({[p.fraction for p in v]})")
        flags = [p.anneal for p in v]
        if True in flags and not all(flags[flags.index(True):]):
            raise ValueError(f"anneal phases must be the last ones, got anneal flags {flags}")
        return v


# --------------------------------------------------------------------------- model
class ModelConfig(Strict):
    """Llama-style decoder: RMSNorm pre-norm, RoPE, SwiGLU, untied or tied embeddings; options for
    LayerNorm, GELU, learned positions, RoPE scaling, QK-norm, sliding window, z-loss, MoE and μP."""

    vocab_size: int | None = Field(None, description="None: take the tokenizer's vocabulary size.")
    d_model: int = Field(256, description="Width of the residual stream.")
    n_layers: int = Field(4, description="Transformer blocks.")
    n_heads: int = Field(4, description="Attention (query) heads.")
    n_kv_heads: int | None = Field(None, description="Key/value heads (GQA); None: n_heads.")
    ffn_hidden: int | None = Field(None, description="SwiGLU hidden size; None: 8/3·d rounded to 64.")
    max_seq_len: int = Field(256, description="Longest sequence the RoPE tables cover.")
    rope_theta: float = Field(10_000.0, description="RoPE base frequency.")
    norm_eps: float = Field(1e-5, description="RMSNorm epsilon.")
    tie_embeddings: bool = Field(True, description="Share input embedding and output head.")
    init_std: float = Field(0.02, description="Std of the normal init; residual outputs scaled by 1/√(2L).")
    # Architecture options (seeds 000/001); the defaults are the Llama recipe above.
    norm: Literal["rmsnorm", "layernorm"] = Field("rmsnorm", description="Pre-norm type (LayerNorm has no bias).")
    ffn: Literal["swiglu", "gelu"] = Field("swiglu", description="FFN type; GELU's default hidden size is 4·d.")
    position: Literal["rope", "learned"] = Field("rope", description="Rotary or learned absolute positions.")
    rope_scaling: Literal["none", "linear", "ntk"] = Field(
        "none", description="Context extension: linear divides positions by the factor, ntk raises the base.")
    rope_scaling_factor: float = Field(1.0, description="Factor of rope_scaling (ignored for 'none').")
    qk_norm: bool = Field(False, description="Normalize queries and keys per head before RoPE (seed 000).")
    sliding_window: int | None = Field(None, description="A query sees only keys fewer than this many tokens away.")
    z_loss: float = Field(0.0, description="Coefficient of the z-loss on the output log-partition (0: off).")
    n_experts: int = Field(0, description="MoE experts per FFN (0: dense FFN).")
    top_k: int = Field(2, description="Experts each token is routed to (MoE).")
    moe_aux_coef: float = Field(0.01, description="Load-balancing auxiliary loss coefficient (MoE).")
    moe_z_coef: float = Field(0.0, description="Router z-loss coefficient (MoE; 0: off).")
    mup: bool = Field(False, description="μP: width-scaled init, output multiplier and per-layer LR (seed 004).")
    mup_base_width: int = Field(256, description="μP base width: the d_model whose hyperparameters transfer.")

    @field_validator("n_heads")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be positive")
        return v


# --------------------------------------------------------------------------- train
class GuardConfig(Strict):
    """The stability guard (seed 000 "When training goes wrong", 002 §5.5, 004): skip non-finite and
    spiking steps, roll back when the loss does not recover."""

    enabled: bool = Field(True, description="Run the guard (off: a non-finite loss stops the run).")
    spike_factor: float = Field(5.0, gt=1.0, description="Skip a batch whose gradient norm exceeds this × the running median.")
    window: int = Field(50, ge=3, description="Accepted steps the running medians of gradient norm and loss cover.")
    min_history: int = Field(10, ge=1, description="Accepted steps before spikes are judged (early training is noisy).")
    loss_spike_factor: float = Field(1.5, gt=1.0, description="A loss above this × its running median opens a spike.")
    recover_steps: int = Field(50, ge=1, description="Steps the loss has to come back within before a rollback (M).")
    recover_tolerance: float = Field(0.1, ge=0.0, description="'Back' means loss <= (1 + this) × the pre-spike median.")
    lr_backoff: float = Field(0.7, gt=0.0, le=1.0, description="LR multiplier applied at every rollback.")
    max_rollbacks: int = Field(3, ge=0, description="Rollbacks before the run is declared diverged.")
    max_consecutive_skips: int = Field(20, ge=1, description="Skipped steps in a row that force a rollback.")
    rebaseline_after: int = Field(5, ge=1, description="Gradient spikes in a row with the loss at its usual level that "
                                  "make the high norm the new normal (the median restarts) instead of a spike.")


class FaultConfig(Strict):
    """Deliberate faults, to prove the guard and the resume path on a real run (off by default)."""

    nan_steps: list[int] = Field(default_factory=list, description="Steps whose loss is made NaN.")
    corrupt_steps: list[int] = Field(default_factory=list, description="Steps whose batch tokens are replaced by random ids (a corrupted batch).")
    lr_blowup: list[int] | None = Field(None, description="[first, last] steps whose LR is multiplied by lr_blowup_factor.")
    lr_blowup_factor: float = Field(100.0, gt=0.0, description="LR multiplier inside the lr_blowup window.")


class ParallelConfig(Strict):
    """How a torchrun job's ranks split the work: world size = dp · tp · pp (checked against the
    model before any process starts: train/layout.py)."""

    dp: int | None = Field(None, ge=1, description="Data-parallel ranks (None: world size / (tp · pp)).")
    tp: int = Field(1, ge=1, description="Tensor-parallel ranks: each block's attention heads and FFN columns split tp ways (DTensor).")
    pp: int = Field(1, ge=1, description="Pipeline stages: the blocks cut into pp equal stages, the step's micro-batches (grad_accum) pipelined.")
    pp_schedule: Literal["1f1b", "gpipe"] = Field("1f1b", description="Pipeline schedule: 1F1B (activations of <= pp micro-batches alive) or GPipe (all of them).")


class TrainConfig(Strict):
    """The training recipe: AdamW, warmup + cosine/linear/WSD, clipping, mixed precision,
    checkpoints, the stability guard, periodic eval, data parallelism under torchrun."""

    seq_len: int = Field(256, description="Tokens per training sequence.")
    micro_batch: int = Field(16, description="Sequences per forward/backward.")
    grad_accum: int = Field(1, description="Micro-batches per optimizer step (per rank).")
    global_batch_tokens: int | None = Field(
        None, description="Tokens per optimizer step over all ranks; sets grad_accum = this / "
        "(micro_batch · seq_len · world size), which must divide (None: use grad_accum).")
    max_steps: int = Field(1000, description="Optimizer steps.")
    max_tokens: int | None = Field(None, description="Token budget; sets max_steps = ⌈max_tokens / tokens per step⌉ (None: use max_steps).")
    seed: int | None = Field(None, description="Seed of the initialization and the batch order (None: the run seed); "
                                               "a second seed of the same run measures its run-to-run noise.")
    lr: float = Field(3e-3, description="Peak learning rate.")
    schedule: Literal["cosine", "linear", "wsd"] = Field(
        "cosine", description="After warmup: cosine or linear decay to min_lr_ratio·lr, or warmup-stable-decay.")
    min_lr_ratio: float = Field(0.1, description="Final LR as a fraction of peak.")
    warmup_steps: int = Field(50, description="Linear warmup steps.")
    warmup_tokens: int | None = Field(None, description="Warmup length in tokens; overrides warmup_steps (None: warmup_steps).")
    decay_fraction: float = Field(0.2, gt=0.0, le=1.0, description="WSD: final share of the run over which the LR decays linearly.")
    weight_decay: float = Field(0.1, description="AdamW decoupled weight decay (matrices only).")
    decay_embeddings: bool = Field(False, description="Also decay the embedding table (and a tied head).")
    beta1: float = Field(0.9, description="AdamW β1.")
    beta2: float = Field(0.95, description="AdamW β2.")
    eps: float = Field(1e-8, description="AdamW ε.")
    grad_clip: float = Field(1.0, description="Global gradient-norm clip (0: off).")
    device: str = Field("auto", description="'auto' (cuda if present, else cpu), 'cpu', 'cuda', 'cuda:1'.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="Autocast dtype (fp32 master weights); 'auto': bf16 on CUDA and on CPUs with "
        "AVX512-BF16/AMX, fp32 elsewhere."
    )
    activation_checkpointing: bool = Field(False, description="Recompute each block's activations in backward (less memory, ~1/3 more compute).")
    compile: bool | Literal["auto"] = Field(
        "auto", description="torch.compile the model: true, false, or 'auto' (when at least compile_min_steps steps remain).")
    compile_min_steps: int = Field(1000, ge=0, description="'auto' compiles runs with at least this many steps left (a cold compile breaks even after ~600-1000 demo steps).")
    threads: int | None = Field(None, description="torch CPU threads (None: torch's default).")
    ckpt_every: int = Field(100, description="Save a checkpoint every this many steps.")
    keep_checkpoints: int = Field(2, description="Keep this many most recent checkpoints.")
    keep_every: int = Field(0, ge=0, description="Also keep every checkpoint whose step is a multiple of this (0: none).")
    distributed: Literal["ddp", "fsdp"] = Field("ddp", description="Data parallelism under torchrun: DDP, or FSDP2 (fully_shard); with tp or pp > 1 the data axis is always FSDP2.")
    parallel: ParallelConfig = Field(default_factory=ParallelConfig, description="Data × tensor × pipeline layout of a torchrun job.")
    checksum_every: int = Field(50, ge=0, description="Compare a gradient checksum across ranks every this many steps (0: off).")
    metrics_every: int = Field(1, ge=0, description="Log per-layer-group gradient norms and the update/parameter ratio every this many steps (0: never); each costs a pass over the gradients or a copy of the parameters.")
    spectrum_every: int = Field(0, ge=0, description="Log the embedding's top-2 singular-value ratio every this many steps (0: at eval steps).")
    guard: GuardConfig = Field(default_factory=GuardConfig)
    faults: FaultConfig = Field(default_factory=FaultConfig)
    eval_every: int = Field(0, description="Evaluate held-out loss every this many steps (0: only at end).")
    eval_docs: int = Field(32, description="Held-out documents per bucket for in-training evals.")
    log_every: int = Field(10, description="Print a progress line every this many steps.")
    peak_tflops: float | None = Field(
        None, description="Device peak for MFU; None: the `tokenmill calibrate` entry for this device/threads/dtype, "
        "else the GPU table, else a quick measured matmul peak."
    )
    objective: Literal["clm", "mlm", "span", "prefix_lm"] = Field(
        "clm", description="Pretraining objective (seed 000): causal LM, masked LM, T5 span corruption "
        "(as a prefix LM over corrupted input + targets), or prefix LM."
    )
    mlm_prob: float = Field(0.15, gt=0, lt=1, description="MLM: share of (non-special) positions selected.")
    span_noise_density: float = Field(0.15, gt=0, lt=1, description="Span corruption: share of tokens dropped.")
    span_mean_length: float = Field(3.0, ge=1, description="Span corruption: mean dropped-span length.")
    prefix_fraction: float | None = Field(
        None, gt=0, lt=1, description="Prefix LM: prefix length as a fraction of the row (None: uniform per row)."
    )


# --------------------------------------------------------------------------- eval
class TaskConfig(Strict):
    """A downstream task read from a local JSONL file in a public layout."""

    name: str = Field(..., min_length=1, description="Task name shown in eval results and the report.")
    path: str = Field(..., description="JSONL file of the task's items ('package:tasks/NAME.jsonl': a file shipped with tokenmill).")
    format: Literal["hellaswag", "arc", "piqa", "winogrande", "lambada"] = Field(
        ..., description="Item layout: multiple choice by log-likelihood (hellaswag, arc, piqa, winogrande) or cloze last word (lambada).")
    shots: int = Field(0, ge=0, description="Solved examples prepended to each prompt (taken deterministically from the file, never the item itself).")
    limit: int | None = Field(None, ge=1, description="Score at most this many items (None: all).")


class ProbeConfig(Strict):
    """A small fixed text set scored at every evaluation (seed 002 §5.8)."""

    name: str = Field(..., min_length=1, description="Probe set name shown on the timeline and in the report.")
    path: str = Field(..., description="JSONL with a 'text' field per line, or plain text with probes separated by blank lines "
                                       "('package:probes/NAME.txt': a file shipped with tokenmill).")


class SemanticContaminationConfig(Strict):
    """The embedding back-check beside the 13-gram rule: items whose meaning is in the training text."""

    enabled: bool = Field(False, description="Run the semantic back-check of every task against the training documents.")
    threshold: float = Field(0.75, gt=0.0, le=1.0, description="Cosine similarity at which an item counts as found in a training window (BENCHMARKS.md: best F1 on verbatim copies, precision 0.87 on paraphrases).")
    dim: int = Field(128, gt=1, description="Dimensions of the word vectors tokenmill trains (PPMI + SVD) on the training text.")
    max_train_words: int = Field(5_000_000, gt=0, description="Words of training text the embedder is trained on (every document is still scanned).")


class EvalConfig(Strict):
    """Held-out loss / perplexity / bits-per-byte per bucket, unigram baseline, samples, tasks,
    contamination and memorization audits."""

    tasks: list[TaskConfig] = Field(default_factory=list, description="Downstream tasks scored by `tokenmill eval` (and in training, see tasks_in_training).")
    tasks_in_training: bool = Field(True, description="Also score the tasks at every in-training evaluation, so their curves share the loss timeline.")
    probes: list[ProbeConfig] = Field(default_factory=list, description="Probe sets scored at every evaluation, in training too.")
    contamination_n: int = Field(13, ge=1, description="Token n-gram length of the contamination check.")
    contamination_threshold: float = Field(0.01, ge=0.0, le=1.0, description="An eval set with more than this share of its n-grams in the training tokens is flagged.")
    semantic_contamination: SemanticContaminationConfig = Field(default_factory=SemanticContaminationConfig)
    memorization_docs: int = Field(32, ge=0, description="Training and held-out documents per bucket whose prefixes are continued greedily (0: off).")
    memorization_prefix: int = Field(32, ge=1, description="Prefix tokens given to the model.")
    memorization_suffix: int = Field(32, ge=1, description="Continuation tokens that must match exactly.")

    max_docs: int | None = Field(200, description="Held-out documents per bucket (None: all).")
    batch_size: int = Field(16, description="Windows per forward pass.")
    num_samples: int = Field(3, description="Generated samples written with every eval, in training too.")
    sample_tokens: int = Field(64, description="New tokens per sample.")
    temperature: float = Field(0.8, description="Sampling temperature.")
    top_k: int = Field(50, description="Sample from the k most likely tokens.")
    prompt_tokens: int = Field(16, description="Prompt length taken from the start of held-out documents.")


class ReportConfig(Strict):
    """The self-contained HTML report."""

    title: str | None = Field(None, description="Title shown on the report (None: the run name).")
    tensorboard: Literal["auto", "on", "off"] = Field(
        "auto", description="Write the events as TensorBoard scalars to <run>/tensorboard: 'auto' when tensorboard is installed.")


class RunConfig(Strict):
    """A whole run: every stage's config plus where the run directory lives."""

    name: str = Field("run", description="Run name; the run directory is <root>/<name>.")
    root: str = Field("runs", description="Directory holding run directories.")
    seed: int = Field(1234, description="Seed every stage's generators derive from.")
    curate: CurateConfig = Field(default_factory=CurateConfig)
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    tokenize: TokenizeConfig = Field(default_factory=TokenizeConfig)
    mixture: MixtureConfig = Field(default_factory=MixtureConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)

    @model_validator(mode="after")
    def _layout_fits_model(self) -> "RunConfig":
        from tokenmill.train.layout import layout_problems  # the layout rules live with the trainer

        problems = layout_problems(self.model, self.train)
        if problems:
            raise ValueError("train.parallel does not fit this model: " + "; ".join(problems))
        return self

    @property
    def train_seed(self) -> int:
        """Seed of the model's initialization and the batch order: train.seed, else the run seed."""
        return self.seed if self.train.seed is None else self.train.seed

    @property
    def run_dir(self) -> Path:
        return Path(self.root) / self.name


# --------------------------------------------------------------------------- loading
def _format_errors(err: ValidationError, origin: str) -> str:
    lines = [f"{origin}: invalid config"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"  {key}: {msg}")
    return "\n".join(lines)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.lr=3e-4` -> (["train", "lr"], 0.0003); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected section.key=value")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"override {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {exc}") from exc
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set nested keys; a key that does not exist is reported by validation with its path."""
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {'.'.join(path[: i + 1])} is not a section")
            node = child
        node[path[-1]] = value
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML config (or the defaults when path is None), apply overrides, validate."""
    origin = str(path) if path is not None else "<defaults>"
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: top level must be a mapping, got {type(loaded).__name__}")
        data = loaded or {}
    data = apply_overrides(data, overrides or [])
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, origin)) from None


def dump_config(cfg: RunConfig) -> str:
    """The resolved config as YAML, every default filled in."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
