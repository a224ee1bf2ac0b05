"""Curation: sources, extraction, filters, dedup, decontamination, canaries.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from tokenmill.config_base import Strict
from tokenmill.ownership import FolderName

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
# An upper limit on a share: 1 or more never removes anything, which is how a rule is turned off alone.
ShareLimit = Annotated[float, Field(ge=0.0)]


class SourceConfig(Strict):
    """One input of the curation stage."""

    kind: Literal["files", "python_stdlib"] = Field(
        "files", description="'files': paths on disk; 'python_stdlib': the embedded demo corpus."
    )
    path: str | None = Field(None, description="File, directory or glob (kind=files).")
    part: Literal["code", "pydoc_html", "reference", "system_html"] | None = Field(
        None, description="Which part of the Python installation to read (kind=python_stdlib)."
    )
    format: str = Field(
        "auto",
        description="How to read each file: a reader's name (html, text, code, jsonl, parquet, warc; "
        "data/readers/) or 'auto', which decides by file extension.",
    )
    bucket: str = Field(..., description="Bucket (slice of the mixture) the documents go to.")
    license: str = Field("unknown", description="License recorded on every document of this source.")
    text_field: str = Field("text", description="Field holding the text in jsonl/parquet records.")
    max_docs: int | None = Field(None, ge=1, description="Read at most this many documents (None: all).")
    max_bytes: int | None = Field(None, ge=1, description="Read at most this many raw bytes (None: all).")
    synthetic: bool = Field(
        False,
        description="Model-generated JSONL (`tokenmill synth`): every record's lineage is checked and kept on its row; a record without one counts as generation 1 of an outside teacher.",
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        from tokenmill.data.readers import reader_names  # lazy: every reader loads only when a format is named

        if v != "auto" and v not in reader_names():
            raise ValueError(f"unknown format {v!r}: 'auto' or one of {', '.join(reader_names())}")
        return v


# The kinds of text the quality step knows (data/steps/text_kinds.py says which rule families each gets).
QualityKind = Literal["web", "reference", "prose", "books", "code"]


class QualityConfig(Strict):
    """Heuristic rules on prose buckets, published thresholds as defaults: Gopher quality and
    repetition (Rae et al. 2021, §A.1.1 / Table A1), C4 (Raffel et al. 2020), FineWeb (Penedo et al. 2024)."""

    skip_buckets: list[str] = Field([], description="Buckets no rule applies to (signals and the length floor still do).")
    kinds: dict[str, QualityKind] = Field(
        {"code": "code"},
        description="Bucket -> kind of text, whose rule families apply (data/steps/text_kinds.py); "
        "a bucket not listed: code for code input, else each document's kind is detected from its text.",
    )
    detect_kinds: bool = Field(
        True,
        description="Detect the kind of each document of an undeclared bucket from its text (data/steps/kind_detect.py); False: web for html/warc input, prose otherwise.",
    )
    language_profiles: str | None = Field(
        None, description="JSON of per-language profiles (`tokenmill quality-calibrate`); None: the shipped ones."
    )
    language_rules: bool = Field(
        True, description="Measure and judge each document by its language's profile (False: English rules for all)."
    )
    # Gopher quality rules
    gopher: bool = Field(True, description="Apply the Gopher quality rules.")
    min_words: int = Field(50, ge=0, description="Fewer words than this: rejected.")
    max_words: int = Field(100_000, ge=1, description="More words than this: rejected.")
    min_mean_word_len: float = Field(3.0, ge=0.0, description="Mean word length below this: rejected.")
    max_mean_word_len: float = Field(10.0, gt=0.0, description="Mean word length above this: rejected.")
    max_symbol_word_ratio: float = Field(0.1, ge=0.0, description="'#' and '...' per word above this: rejected.")
    max_bullet_line_frac: float = Field(0.9, ge=0.0, description="Fraction of lines starting with a bullet.")
    max_ellipsis_line_frac: float = Field(0.3, ge=0.0, description="Fraction of lines ending with an ellipsis.")
    min_alpha_word_frac: float = Field(0.8, ge=0.0, le=1.0, description="Fraction of words with a letter, below: rejected.")
    min_stop_words: int = Field(2, ge=0, description="Fewer English stop words than this: rejected.")
    # Gopher repetition rules (Table A1); a max_* share limit of 1 or more turns that rule off
    gopher_repetition: bool = Field(True, description="Apply the Gopher repetition rules.")
    max_dup_line_frac: float = Field(0.30, ge=0.0, description="Share of lines that repeat an earlier line.")
    max_dup_para_frac: float = Field(0.30, ge=0.0, description="Share of paragraphs that repeat an earlier paragraph.")
    max_dup_line_char_frac: float = Field(0.20, ge=0.0, description="Share of line characters in repeated lines.")
    max_dup_text_line_char_frac: float = Field(
        1.0,
        ge=0.0,
        description="Share of text-line characters in repeated text lines (lines that are not code and have at least "
        "4 words). Off (1.0) but for manuals (kind reference), where it takes max_dup_line_char_frac's limit in its "
        "place: a manual's examples repeat their imports and brackets and its entries their labels.",
    )
    max_dup_para_char_frac: float = Field(0.20, ge=0.0, description="Share of paragraph characters in repeated paragraphs.")
    max_top_ngram_char_frac: dict[int, ShareLimit] = Field(
        {2: 0.20, 3: 0.18, 4: 0.16}, description="n (2-4) -> limit on the word characters of the most frequent word n-gram."
    )
    max_dup_ngram_char_frac: dict[int, ShareLimit] = Field(
        {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},
        description="n (5-10) -> limit on the share of word characters inside repeated word n-grams.",
    )
    # C4 rules
    c4: bool = Field(True, description="Apply the C4 document rules (lorem ipsum, curly bracket, minimum sentences).")
    c4_min_sentences: int = Field(5, ge=0, description="Fewer sentences in the lines C4 keeps: rejected.")
    c4_min_words_per_line: int = Field(3, ge=0, description="C4 keeps only lines with at least this many words.")
    c4_max_word_len: int = Field(1000, ge=1, description="C4 drops lines with a word longer than this.")
    c4_curly_bracket: bool = Field(True, description="Reject documents with '{' in a line C4 keeps (off for code-rich prose).")
    c4_remove_lines: bool = Field(
        False, description="Also delete the lines C4's line rules drop (False: measure and filter only)."
    )
    # Garbled words (data/steps/garble.py)
    garble: bool = Field(True, description="Apply the garbled-word rule (OCR damage, typo spam) to every kind but code.")
    max_near_miss_word_frac: float = Field(
        0.06,
        ge=0.0,
        le=1.0,
        description="Share of words that are rare one-letter variants of a common word of the same text, above: rejected.",
    )
    # FineWeb rules
    fineweb: bool = Field(True, description="Apply the FineWeb rules.")
    min_line_punct_frac: float = Field(
        0.12, ge=0.0, le=1.0, description="Share of lines ending in terminal punctuation, below: rejected."
    )
    max_short_line_frac: float = Field(0.67, ge=0.0, description="Share of short lines, above: rejected.")
    short_line_chars: int = Field(30, ge=0, description="A line of at most this many characters is short (FineWeb).")
    max_char_dup_frac: float = Field(
        0.01, ge=0.0, description="Share of characters in repeated lines, above: rejected (FineWeb)."
    )
    max_newline_word_ratio: float = Field(0.3, ge=0.0, description="Line breaks per word, above: rejected (FineWeb list pages).")
    # Code rules (StarCoder / The Stack), for the code kind
    code_max_line_len: int = Field(1000, ge=1, description="Code: a line longer than this many characters: rejected.")
    code_max_mean_line_len: float = Field(100.0, gt=0.0, description="Code: mean line length above this: rejected.")
    code_min_alnum_frac: float = Field(
        0.25, ge=0.0, le=1.0, description="Code: share of alphanumeric characters below this: rejected."
    )
    code_autogenerated: bool = Field(True, description="Code: reject files whose head says they were generated.")

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
    "select",
    "license",
    "extract",
    "normalize",
    "url",
    "langid",
    "quality",
    "model_quality",
    "classify",
    "safety",
    "pii",
    "exact_dedup",
    "minhash_dedup",
    "line_dedup",
    "substring_dedup",
    "decontaminate",
    "bucket",
)


class SelectConfig(Strict):
    """Curate only the records a list names (data/steps/select.py): labels or a peer's filter decided elsewhere."""

    ids: str | None = Field(
        None,
        description='File of record ids, one per line (or JSONL with "id"); other records are removed (rule not_selected). None: step off.',
    )


class ExtractConfig(Strict):
    """HTML main-content extraction."""

    fallback: bool = Field(True, description="When the main extractor finds nothing, try the fallback extractor.")
    doc_generators: bool = Field(
        True,
        description='A page whose <meta name="generator"> names a documentation toolchain (DocBook, Docutils/Sphinx, '
        "Publican, AsciiDoc, Texinfo, Doxygen, javadoc, MkDocs, rustdoc, GTK-Doc), or whose head links Sphinx's "
        "genindex.html, is a manual's page: it is judged as kind "
        "`reference` unless its bucket declares a kind, and one with under `curate.min_chars` characters of text "
        "keeps its table of contents.",
    )


class DocLimitsConfig(Strict):
    """Bounded work per document (docs/curation.md: Bounded work per document)."""

    doc_seconds: float | None = Field(
        20.0,
        gt=0,
        description="Wall-clock seconds one document may spend in a phase's per-document steps; over it, it is quarantined with rule `timeout` (None: no limit).",
    )
    kill_factor: float = Field(
        3.0,
        ge=1,
        description="A step stuck in native code past kill_factor x doc_seconds of CPU time kills its worker; the retried task quarantines the document (workers >= 2 or Ray).",
    )
    max_html_depth: int | None = Field(
        2000,
        ge=1,
        description="HTML nested deeper than this many elements is quarantined with rule `nesting_depth` before any parser sees it (None: no check).",
    )


class NormalizeConfig(Strict):
    """Unicode and whitespace normalization."""

    fix_mojibake: bool = Field(True, description="Repair UTF-8 decoded as Latin-1/cp1252 (ftfy).")
    unwrap_books: bool = Field(
        True, description="Join hard-wrapped paragraphs of plain-text books (the books kind) into one line each."
    )


class UrlFilterConfig(Strict):
    """Domain block / allow lists (one domain per line; a domain matches its subdomains)."""

    block_lists: list[str] = Field(default_factory=list, description="Files of blocked domains.")
    allow_lists: list[str] = Field(default_factory=list, description="Files of allowed domains; when set, only these pass.")


class LangIdConfig(Strict):
    """Offline language identification (model shipped inside its wheel)."""

    languages: list[str] | None = Field(None, description="ISO 639-1 codes to keep (None: keep every language).")
    min_score: float = Field(0.65, ge=0.0, le=1.0, description="Documents whose top language scores below this are removed.")
    paragraph_check: bool = Field(True, description="Score paragraphs too and flag mixed-language documents.")
    mixed_min_frac: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="Flag a document mixed when this share of its paragraphs' text is confidently another language.",
    )
    max_foreign_frac: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Remove documents whose share of paragraphs in another language exceeds this (None: flag only).",
    )
    skip_buckets: list[str] = Field(["code"], description="Buckets language ID does not apply to.")


class ModelQualityConfig(Strict):
    """Model-based quality: an n-gram LM perplexity (CCNet) and a linear classifier, both trained here."""

    reference: str | None = Field(
        None, description="Reference corpus (file or dir of text/jsonl) the models learn 'good' from; None: step off."
    )
    ngram_order: int = Field(3, ge=1, description="Order of the n-gram language model.")
    max_perplexity: Annotated[float, Field(gt=0.0)] | Literal["auto"] | None = Field(
        "auto",
        description='Remove documents above this perplexity; "auto": documents of a judged language whose word order a one-sided test does not show (the previous word predicts no better than nearby words); None: score only.',
    )
    order_significance: float = Field(
        0.01,
        gt=0.0,
        lt=0.5,
        description="With max_perplexity \"auto\": the word-order test's one-sided level; a document whose z is below the standard normal's 1 - this quantile (2.33 at 0.01) is removed.",
    )
    min_held_out: int = Field(
        20,
        ge=1,
        description='With max_perplexity "auto": a language needs this many held-out reference passages to be judged; documents in others are scored, not removed.',
    )
    min_held_out_pass: float = Field(
        0.95,
        ge=0.0,
        le=1.0,
        description='With max_perplexity "auto": a language is judged only when at least this share of its tested held-out reference passages pass the word-order test.',
    )
    classifier: bool = Field(True, description="Also train a reference-vs-random linear classifier.")
    labelled: str | None = Field(
        None,
        description='JSONL of {"text", "label": "good"|"bad"} the classifier learns from instead of reference vs random (DCLM); None: reference vs random.',
    )
    min_classifier_score: float | None = Field(
        None, ge=0.0, le=1.0, description="Remove documents below this score (None: score only)."
    )
    max_nonword_frac: float | None = Field(
        0.13,
        ge=0.0,
        le=1.0,
        description="Remove a document of a judged language whose share of 4+-letter words the reference never saw, one edit from one of its 1,000 commonest words (OCR damage, typos), exceeds this; the 99.9th percentile of clean design text, rounded up (benchmarks/design_nonword_cut.py). None: score only.",
    )
    keep_top_percent: float | None = Field(
        None,
        gt=0,
        le=100,
        description="Keep only the documents whose classifier score is in the top this-many percent of all the documents the step scores, corpus-wide (DCLM keeps 10); exact and the same for any worker count (data/classifiers/top_percent.py). None: no cut.",
    )
    tier_perplexities: list[Annotated[float, Field(gt=0.0)]] | None = Field(
        None,
        description="Perplexity cut-points of the tiers head/middle/tail; None: the 30th and 60th percentiles of the random sample's (CCNet).",
    )
    skip_buckets: list[str] = Field(["code"], description="Buckets the step does not apply to.")
    negative_every: int = Field(
        10, ge=1, description="Every k-th raw record of the run's sources is a 'random' example for the classifier."
    )
    max_examples: int = Field(20_000, ge=10, description="At most this many training passages per class for the classifier.")

    @field_validator("tier_perplexities")
    @classmethod
    def _two_increasing_cuts(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (len(v) != 2 or not v[0] < v[1]):
            raise ValueError(f"needs two increasing cut-points (head < first <= middle < second <= tail), got {v}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _removed_fields(cls, data: object) -> object:
        """A key an older tokenmill wrote (a run directory's saved config.yaml) still loads: it is
        dropped with a warning that says what replaced it, instead of failing the run or report."""
        if isinstance(data, dict) and "perplexity_quantile" in data:
            data = {k: v for k, v in data.items() if k != "perplexity_quantile"}
            warnings.warn(
                "model_quality.perplexity_quantile no longer has an effect and is ignored: the auto cut is no "
                "longer fitted between held-out passages and their shuffles but is a word-order test at "
                "order_significance (default 0.01)",
                UserWarning,
                stacklevel=2,
            )
        return data

    @model_validator(mode="after")
    def _cut_needs_classifier(self) -> "ModelQualityConfig":
        if self.keep_top_percent is not None and not self.classifier:
            raise ValueError("keep_top_percent ranks documents by the classifier's score: it needs classifier: true")
        return self


class ClassifierConfig(Strict):
    """One named classifier of the classify step, trained here from the user's labelled texts (data/steps/classify.py)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$", description="Name of the classifier: its key in the `classes` column and in _classify.json."
    )
    labelled: str = Field(
        description='JSONL of {"text": ..., "label": ...} with two or more labels, relative to the config file.'
    )
    action: Literal["tag", "filter", "bucket"] = Field(
        "tag", description="tag: label and probabilities on the row; filter: remove `remove` labels; bucket: route by `buckets`."
    )
    remove: list[str] = Field(default_factory=list, description="With action filter: the labels whose documents are removed.")
    min_probability: float = Field(
        0.5, ge=0.0, le=1.0, description="With action filter: remove only when the label's probability is at least this."
    )
    buckets: dict[str, FolderName] = Field(
        default_factory=dict, description="With action bucket: label -> bucket; a label not listed keeps the document's bucket."
    )
    skip_buckets: list[str] = Field(default_factory=list, description="Buckets the classifier does not apply to.")
    holdout_every: int = Field(
        10, ge=2, description="About one labelled text in this many (by hash of the text) is held out for the metrics."
    )
    dim_bits: int = Field(18, ge=8, le=24, description="Hashed feature buckets: 2^dim_bits per class.")
    epochs: int = Field(8, ge=1, description="Passes over the training texts.")
    seed: int = Field(0, description="Seed of the training batch order.")
    max_examples: int = Field(
        20_000,
        ge=1,
        description="At most this many labelled texts per label train the classifier (a sample by hash of the text): bounds the memory of training whatever the file's size.",
    )

    @model_validator(mode="after")
    def _action_needs_its_fields(self) -> "ClassifierConfig":
        if self.action == "filter" and not self.remove:
            raise ValueError(f"classifier {self.name!r}: action filter needs `remove` (the labels to remove)")
        if self.action == "bucket" and not self.buckets:
            raise ValueError(f"classifier {self.name!r}: action bucket needs `buckets` (label -> bucket)")
        hidden = sorted(b for b in self.buckets.values() if b.startswith("_"))
        if hidden:
            raise ValueError(
                f"classifier {self.name!r}: bucket names starting with '_' are not buckets (curated/_* is metadata): {hidden}"
            )
        return self


class SafetyConfig(Strict):
    """Toxicity in layers: a word list (share of listed words) first; with `labelled`, a classifier
    trained here decides the documents whose word-list score falls inside `band`."""

    word_list: str | None = Field(None, description="File of terms, one per line (None: the built-in list).")
    threshold: float = Field(0.02, ge=0.0, description="Remove documents whose toxicity score exceeds this.")
    skip_buckets: list[str] = Field(["code"], description="Buckets the step does not apply to.")
    labelled: str | None = Field(
        None, description='JSONL of {"text", "label": "toxic" | "offensive" | "clean"} training the second pass (None: none).'
    )
    band: tuple[float, float] = Field(
        (0.005, 0.25), description="Word-list scores in [low, high] go to the classifier; below kept, above removed."
    )
    classifier_threshold: float = Field(
        0.5, ge=0.0, le=1.0, description="The second pass removes an in-band document whose P(toxic) exceeds this."
    )
    max_examples: int = Field(
        20_000,
        ge=1,
        description="At most this many labelled texts per class (toxic, clean) train the classifier (a sample by hash of the text): bounds the memory of training whatever the file's size.",
    )

    @model_validator(mode="after")
    def _band_around_threshold(self) -> "SafetyConfig":
        low, high = self.band
        if self.labelled is not None and not 0.0 <= low <= self.threshold <= high:
            raise ValueError(
                f"safety.band [{low}, {high}] must hold the threshold {self.threshold} (0 <= low <= threshold <= high)"
            )
        return self


class PiiConfig(Strict):
    """PII replaced by typed placeholders; counts stored on the row.

    `name` and `address` are on by default. The danger of names is masking ordinary capitalised
    words, so a name needs evidence — a context (changelog trailer, e-mail display name, From:/
    Signed-off-by:/Copyright holder, honorific, sign-off, a credit such as "Contributed by" or
    "Thanks to", where a name wrapped over a line break counts whole) or a given name from the shipped
    list followed by a surname that is not an English word — and capitalised dictionary words and code
    identifiers are never masked, a lone first name only right after a credit ("Thanks, Kirk").

    `names="private"` (the default) replaces a name only where the text marks a private person:
    e-mail display names, changelog trailers and mail/patch header fields (From:, To:, Cc:,
    Signed-off-by:, Maintainer: ...) always; a sign-off, honorific, credit, copyright holder,
    "Author:" or listed given name only with an e-mail address, phone number or postal address on
    the same or an adjacent line. Characters of novels and plays, figures of scripture and history,
    public figures and credited authors have no contact details beside them, so they stay: they are
    not private persons, and replacing them ("Mr. <NAME>" thousands of times in a novel) loses text
    without protecting anyone. `names="any"` keeps the earlier rule (every evidenced name). Drop
    `name` or `address` from `kinds` for corpora where even that trade is wrong.
    """

    kinds: list[Literal["email", "phone", "ip", "card", "iban", "national_id", "name", "address"]] = Field(
        ["email", "phone", "ip", "card", "iban", "national_id", "name", "address"], description="What to find and replace."
    )
    names: Literal["private", "any"] = Field(
        "private",
        description="Which names to replace: 'private' only where the text marks a private person (contact or "
        "signature blocks, or contact details beside the name); 'any' every name with evidence (honorifics, "
        "credits, the given-name list too, so characters and credited authors as well).",
    )


class MinHashConfig(Strict):
    """Near-duplicate removal: shingles, MinHash with bands × rows permutations, LSH, verification."""

    shingle: Literal["word", "char"] = Field("word", description="Shingle unit.")
    k: int = Field(5, ge=1, description="Shingle length in units.")
    bands: int = Field(25, ge=1, description="LSH bands b (candidate probability 1-(1-J^r)^b: 0.99995 at J=0.8 with r=5).")
    rows: int = Field(5, ge=1, description="Rows per band r; permutations R = b × r.")
    threshold: float = Field(0.8, ge=0.0, le=1.0, description="Verified Jaccard at or above which two documents are duplicates.")
    verify: bool = Field(
        True, description="Check candidate pairs with their exact shingle Jaccard (False: with the MinHash estimate)."
    )
    bucket_window: int = Field(
        64,
        ge=1,
        description="In an LSH bucket each document is paired with the next this-many members (all pairs in smaller buckets).",
    )


class LineDedupConfig(Strict):
    """Lines or paragraphs repeated across many documents (menus, footers) removed inside documents."""

    unit: Literal["line", "paragraph"] = Field("line", description="What counts as one repeated unit.")
    min_docs: int = Field(10, ge=2, description="A unit in at least this many documents is boilerplate.")
    min_chars: int = Field(10, ge=0, description="Shorter units are never removed (blank lines, '}', bullets).")
    skip_buckets: list[str] = Field(
        ["code"], description="Buckets whose lines are never removed (a repeated import line is code, not boilerplate)."
    )


class SubstringDedupConfig(Strict):
    """Exact-substring dedup (Lee et al. 2022): spans of >= k units repeated anywhere in the corpus, found with suffix arrays."""

    enabled: bool = Field(False, description="Run the step (off by default: it builds suffix arrays over all kept text).")
    k: int = Field(50, ge=1, description="Shortest repeated span that counts, in units (Lee et al.: 50 tokens).")
    unit: Literal["word", "byte"] = Field(
        "word",
        description="One unit: a word or one punctuation mark (about one BPE token; whitespace ignored), or one UTF-8 byte (the reference tool's unit).",
    )
    mode: Literal["spans", "documents"] = Field(
        "spans",
        description="spans: cut later copies of repeated spans out of the text (the first copy stays); documents: drop a document whose later-copy share exceeds max_dup_share.",
    )
    max_dup_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="documents mode: a document with more than this share of its characters in later copies is removed.",
    )
    shard_tokens: int = Field(
        50_000_000,
        ge=1,
        description="Units per suffix-array shard (whole documents); building one holds about 80 bytes per unit, so curation caps it at memory_per_task / 80.",
    )
    skip_buckets: list[str] = Field(default_factory=list, description="Buckets whose documents neither take part nor lose spans.")


class DecontaminateConfig(Strict):
    """n-gram overlap against the evaluation sets the user lists."""

    eval_sets: list[str] = Field(default_factory=list, description="JSONL files of evaluation items (a text field each).")
    text_fields: list[str] = Field(["text", "question", "answer", "context"], description="Fields whose text forms an item.")
    n: int = Field(13, ge=1, description="n-gram length in words.")
    max_overlap: float = Field(
        0.0, ge=0.0, le=1.0, description="Remove documents with more than this share of an item's n-grams (0: any shared n-gram)."
    )
    set_max_overlap: dict[str, Fraction] = Field(
        default_factory=dict,
        description="max_overlap of particular eval sets (keyed as listed in eval_sets), e.g. whole held-out documents whose shared boilerplate is no contamination.",
    )

    @model_validator(mode="after")
    def _known_sets(self) -> "DecontaminateConfig":
        unknown = sorted(set(self.set_max_overlap) - set(self.eval_sets))
        if unknown:
            raise ValueError(f"set_max_overlap names {unknown}, which eval_sets does not list")
        return self


class BucketRule(Strict):
    """Documents matching every given condition go to `bucket` (first matching rule wins)."""

    bucket: str = Field(..., description="Target bucket.")
    source: str | None = Field(None, description="Glob on the source name.")
    domain: str | None = Field(None, description="Glob on the URL's domain.")
    language: str | None = Field(None, description="Language code.")
    tier: str | None = Field(None, description="Quality tier (head / middle / tail).")


# What a license grants (a document whose license lacks one cannot be used that way), and the
# conditions it sets on the use it grants (data/licenses.py).
LicenseGrant = Literal["training", "redistribution", "commercial_use"]
LicenseCondition = Literal["attribution_required", "share_alike"]


class LicenseSpec(Strict):
    """A license's permissions, as curation's license policy reads them (data/licenses.py)."""

    training: bool = Field(..., description="Documents may be used to train a model.")
    redistribution: bool = Field(..., description="Documents (and copies of them) may be passed on.")
    commercial_use: bool = Field(..., description="Use for commercial purposes is allowed.")
    attribution_required: bool = Field(..., description="Use or redistribution must credit the authors / keep the notice.")
    share_alike: bool = Field(False, description="Derived works passed on must carry the same license (copyleft).")
    notice: str | None = Field(None, description="Free text: the license's name or the notice to keep.")
    url: str | None = Field(None, description="Where the license text is.")


class LicensePolicy(Strict):
    """What curation does with a document by its source's license (data/steps/license.py); empty: nothing."""

    require: list[LicenseGrant] = Field(
        default_factory=list, description="Remove documents whose license does not grant all of these (rule missing_<grant>)."
    )
    exclude_if: list[LicenseCondition] = Field(
        default_factory=list, description="Remove documents whose license sets any of these conditions (rule has_<condition>)."
    )
    bucket_by_permission: dict[LicenseGrant | LicenseCondition, str] = Field(
        default_factory=dict,
        description="Grant or condition -> bucket: a kept document whose license lacks the grant (or sets the condition) goes to that bucket; first listed wins, over bucket_rules.",
    )

    @property
    def removes(self) -> bool:
        return bool(self.require or self.exclude_if)


class CanaryConfig(Strict):
    """Memorization canaries (Carlini et al. 2019, "The Secret Sharer"): a template with a random
    digit secret, inserted into the training data a chosen number of times during curation; the
    eval stage measures each canary's exposure. The secrets derive from the run seed."""

    counts: list[int] = Field(
        default_factory=list, description="Repetition counts, one group of canaries each (e.g. [1, 8, 64]); empty: no canaries."
    )
    per_count: int = Field(1, ge=1, description="Distinct canaries (secrets) per repetition count.")
    secret_digits: int = Field(
        9, ge=1, le=30, description="Length of the random digit secret; |R| = 10**secret_digits candidate secrets."
    )
    template: str = Field(
        "my secret code is {secret}", description="Canary text with one '{secret}' (the digits, space-separated)."
    )
    bucket: str = Field(
        "", description="Bucket the canary documents go to; must be a bucket of the sources (empty: the first source's)."
    )
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
    select: SelectConfig = Field(default_factory=SelectConfig, description="Curate only the records a list names.")
    extract: ExtractConfig = Field(default_factory=ExtractConfig)
    limits: DocLimitsConfig = Field(default_factory=DocLimitsConfig, description="Time and nesting-depth limits per document.")
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    url: UrlFilterConfig = Field(default_factory=UrlFilterConfig)
    langid: LangIdConfig = Field(default_factory=LangIdConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig, description="Heuristic filters.")
    model_quality: ModelQualityConfig = Field(default_factory=ModelQualityConfig)
    classify: list[ClassifierConfig] = Field(
        default_factory=list, description="Named classifiers trained from labelled JSONL: tag, filter or bucket documents."
    )
    safety: SafetyConfig = Field(default_factory=SafetyConfig)
    pii: PiiConfig = Field(default_factory=PiiConfig)
    minhash_dedup: MinHashConfig = Field(default_factory=MinHashConfig)
    line_dedup: LineDedupConfig = Field(default_factory=LineDedupConfig)
    substring_dedup: SubstringDedupConfig = Field(default_factory=SubstringDedupConfig)
    decontaminate: DecontaminateConfig = Field(default_factory=DecontaminateConfig)
    bucket_rules: list[BucketRule] = Field(
        default_factory=list, description="Bucket assignment rules (none: the source's bucket)."
    )
    licenses: dict[str, LicenseSpec] = Field(
        default_factory=dict,
        description="License id -> permissions, added to (or replacing) the built-in table of data/licenses.py.",
    )
    license_policy: LicensePolicy = Field(
        default_factory=LicensePolicy, description="Remove or bucket documents by their source's license permissions."
    )
    min_chars: int = Field(200, ge=0, description="Documents shorter than this after extraction are dropped.")
    max_doc_bytes: int = Field(2_000_000, ge=1, description="Larger raw records are quarantined, not parsed.")
    max_decompression_ratio: float = Field(
        500.0,
        gt=1,
        description="A compressed input (.gz, .zst, .warc.gz) inflating past this many times its compressed size is a bomb: the rest of the file is quarantined (rule decompression_ratio).",
    )
    max_lines_per_file: int = Field(
        50_000_000,
        ge=1,
        description="A line-format file (JSONL) past this many lines, blank ones included: the rest is quarantined (rule too_many_lines).",
    )
    shard_docs: int = Field(5000, ge=1, description="Kept documents per Parquet part.")
    chunk_docs: int = Field(1000, ge=1, description="Records per resumable chunk inside a shard.")
    workers: int = Field(2, ge=1, description="Processes for extraction and filtering.")
    executor: Literal["local", "ray"] = Field("local", description="Run shards in local processes or as Ray tasks.")
    memory_per_task: int = Field(
        2 << 30,
        ge=64 << 20,
        description="Bytes one global dedup task may hold; sets the number of hash partitions (docs/curation.md: Memory per task).",
    )
    dedup_partitions: int | None = Field(
        None, ge=1, description="Hash partitions of the global dedup shuffles (None: from memory_per_task and the row count)."
    )
    component_edges_per_task: int | None = Field(
        None,
        ge=1,
        description="Near-duplicate edges one connected-components task may hold (None: from memory_per_task); more run as partitioned rounds.",
    )
    max_removal_share: float = Field(
        0.9, ge=0.0, le=1.0, description="A step removing more than this share of its input stops the run."
    )
    allow_empty_bucket: bool = Field(False, description="Let a bucket end up empty instead of stopping the run.")
    canaries: CanaryConfig = Field(
        default_factory=CanaryConfig, description="Memorization canaries inserted into training (off by default)."
    )

    @field_validator("steps")
    @classmethod
    def _known_steps(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            unknown = [s for s in v if s not in CURATE_STEPS]
            if unknown:
                raise ValueError(f"unknown step(s) {unknown}; steps are {', '.join(CURATE_STEPS)}")
        return v

    @field_validator("classify")
    @classmethod
    def _unique_classifier_names(cls, v: list[ClassifierConfig]) -> list[ClassifierConfig]:
        names = [c.name for c in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"classifier names must be unique, repeated: {dupes}")
        return v
