"""A word-level n-gram language model with interpolated modified Kneser-Ney smoothing.

This is the scorer of CCNet's perplexity filter (Wenzek et al. 2020): a small LM trained on a reference corpus scores every document, and
documents the model finds surprising (high perplexity) are the unlike-the-reference tail.
CCNet uses KenLM 5-grams over SentencePiece pieces; tokenmill trains its own model here, so it
works on words, which need no tokenizer training.

Text -> tokens (CCNet's `text_normalizer.normalize`, then a punctuation split): lowercase,
accents stripped (NFD, combining marks dropped), Unicode punctuation mapped to ASCII, every digit
replaced by 0; tokens are runs of word characters or single punctuation characters. Each
non-empty line is one sentence, framed as <s> w1 .. wm </s>; as in CCNet a document's perplexity
pools all its lines: exp(-sum of log p / number of predicted tokens), where every line predicts
its words and its </s> (CCNet's `len(line.split()) + 1`). A hard-wrapped reference (Project
Gutenberg books) thus teaches </s> in mid-sentence, making line ends cheap everywhere; the
default tiers are percentiles of this same model's scores, so they move with it.

Smoothing: interpolated modified Kneser-Ney (Chen & Goodman 1998, the estimator KenLM's lmplz
uses), chosen over plain interpolated KN because three discounts per order (for n-grams seen
once, twice, three or more times) fit the count-of-counts better at no extra cost at scoring:

    p(w|h) = max(a(hw) - D(a(hw)), 0) / A(h) + gamma(h) p(w|h'),   A(h) = sum_w a(hw)
    gamma(h) = (D1 N1(h.) + D2 N2(h.) + D3 N3+(h.)) / A(h)
    Y = n1/(n1+2 n2),  D1 = 1-2Y n2/n1,  D2 = 2-3Y n3/n2,  D3 = 3-4Y n4/n3   (per order)

a() is the raw count at the highest order and for n-grams starting with <s> (nothing can precede
<s>), else the continuation count N1+(. g) (how many distinct words precede g). h' drops the
oldest word of h; a context never seen uses gamma = 1. The unigram level interpolates with the
uniform distribution over the predictable vocabulary V' (every training word, </s> and <unk>;
not <s>), so sum over V' of p(w|h) = 1 for every h. <unk> is a class for every word not seen in
training: it never has a count of its own, so it gets only the smoothing mass gamma()/|V'| of the
unigram level (KenLM's treatment) and garbage made of unseen words scores as very surprising.

Storage and speed: as in an ARPA file, each seen n-gram stores its interpolated log p and each
seen context its log gamma, so scoring backs off only through lookups. Unigrams are dense arrays
indexed by word id; an n-gram of order k >= 2 is a 64-bit hash of its word ids (a collision
among 10^7 n-grams has probability ~ 10^-5) kept in an open-addressing table (linear probing,
load <= 1/2) whose lookups run for a whole document at once in numpy: one gather per probe
round, no Python loop over tokens. Measured on a 3.3 M-trigram table, 1500-token documents:
~450 ns/token for `searchsorted` on sorted keys, ~150 ns/token for the table.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable

import numpy as np

VERSION = "1"

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
NEWLINE = "\n"  # the token that ends a sentence (the tokenizer keeps line breaks)
# ARPA's stand-in for log 0: the log probability of predicting <s>, which never happens.
LOG_ZERO = -99.0
# Modified-KN discounts for tiny corpora whose count-of-counts leave the formula undefined or
# out of range (KenLM refuses such corpora; a curation run should still score documents).
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)
CHUNK_TOKENS = 4_000_000  # tokens counted at once while training: bounds the working memory

# CCNet's UNICODE_PUNCT table: full-width and typographic punctuation to its ASCII form.
_PUNCT = str.maketrans(
    {
        "，": ",",
        "。": ".",
        "、": ",",
        "„": '"',
        "”": '"',
        "“": '"',
        "«": '"',
        "»": '"',
        "」": '"',
        "「": '"',
        "《": '"',
        "》": '"',
        "´": "'",
        "∶": ":",
        "：": ":",
        "？": "?",
        "！": "!",
        "（": "(",
        "）": ")",
        "；": ";",
        "–": "-",
        "—": "-",
        "．": ".",
        "～": "~",
        "’": "'",
        "‘": "'",
        "…": "...",
        "━": "-",
        "〈": "<",
        "〉": ">",
        "【": "[",
        "】": "]",
        "％": "%",
        "►": "-",
    }
)
# Combining marks left by NFD (the Unicode blocks of combining diacritics): accents.
_COMBINING = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_DIGIT = re.compile(r"\d")
_TOKEN = re.compile(r"\w+|[^\w\s]|\n")

# splitmix64 finalizer constants and a multiplier for chaining word hashes into n-gram hashes.
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


# --------------------------------------------------------------------------- text -> tokens
def normalize(text: str) -> str:
    """CCNet's normalization: lowercase, no accents, ASCII punctuation, digits -> 0."""
    text = text.lower()
    if not text.isascii():  # the three Unicode passes cost nothing to skip on ASCII text
        text = _COMBINING.sub("", unicodedata.normalize("NFD", text)).translate(_PUNCT)
    return _DIGIT.sub("0", text)


def tokenize(text: str) -> list[str]:
    """Normalized words and punctuation marks, with "\\n" tokens where lines end."""
    return _TOKEN.findall(normalize(text))


# --------------------------------------------------------------------------- ids -> sentences
def frame(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (line ends as EOS_ID) -> (sequence with <s> ... </s> per line, position in line).

    Empty lines vanish; position 0 is the <s> of a line, which is never predicted.
    """
    ids = np.asarray(ids, dtype=np.int64)
    eos = ids == EOS_ID
    ids = ids[~(eos & np.r_[True, eos[:-1]])]  # runs of line ends and leading ones: no sentence
    if ids.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if ids[-1] != EOS_ID:
        ids = np.append(ids, EOS_ID)
    eos = ids == EOS_ID
    reps = eos.astype(np.int64) + 1
    seq = np.repeat(ids, reps)  # every EOS twice: the second copy becomes the next line's <s>
    seq[(np.cumsum(reps) - 1)[eos]] = BOS_ID
    seq = np.concatenate(([BOS_ID], seq[:-1]))  # a <s> first; none after the last </s>
    index = np.arange(seq.size)
    pos = index - np.maximum.accumulate(np.where(seq == BOS_ID, index, 0))
    return seq, pos


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection of uint64 that spreads every input bit (wraps mod 2^64)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def ngram_keys(seq: np.ndarray, order: int) -> list[np.ndarray]:
    """keys[k-1][i]: the key of the k-gram ending at position i (meaningless when i < k-1).

    The key of a unigram is its word id; of a k-gram, hash(key of its first k-1 words, last word),
    so the key of a context and of a suffix are found by looking one position back or one order down.
    """
    ids = seq.astype(np.uint64)
    word = _mix(ids + _GOLDEN)
    keys = [ids]
    prev = ids
    for _ in range(2, order + 1):
        shifted = np.zeros_like(prev)
        shifted[1:] = prev[:-1]
        prev = _mix(shifted * _GOLDEN + word)
        keys.append(prev)
    return keys


# --------------------------------------------------------------------------- hash table
_EMPTY = np.uint64(0)
_S32 = np.uint64(32)
MAX_LOAD = 0.5  # linear probing stays short (expected ~1.5 probes for a hit, ~2.5 for a miss)


def _nonzero(keys: np.ndarray) -> np.ndarray:
    """0 marks an empty slot, so a key that hashes to 0 is stored as 1 (p = 2^-63 per key)."""
    return keys | (keys == _EMPTY).astype(np.uint64)


def _home(keys: np.ndarray, size: int) -> np.ndarray:
    """The first slot to probe: the key's top 32 bits scaled to [0, size) (Lemire's reduction)."""
    return (((keys >> _S32) * np.uint64(size)) >> _S32).astype(np.int64)


def build_table(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(table, slot of each key): linear probing, filled round by round, deterministic.

    In round r every key not yet placed tries slot home + r; where several want the same free
    slot the earliest key wins. A key placed in round r found slots home .. home+r-1 taken, and
    slots never empty again, so a lookup probing from home meets it before any empty slot.
    """
    keys = _nonzero(keys)
    size = max(1, int(np.ceil(keys.size / MAX_LOAD)))
    table = np.zeros(size, np.uint64)
    slots = np.full(keys.size, -1, np.int64)
    home = _home(keys, size)
    pending = np.arange(keys.size)
    probe = 0
    while pending.size:
        s = (home[pending] + probe) % size
        free = np.flatnonzero(table[s] == _EMPTY)
        _, first = np.unique(s[free], return_index=True)
        won = free[first]
        table[s[won]] = keys[pending[won]]
        slots[pending[won]] = s[won]
        pending = np.delete(pending, won)
        probe += 1
    return table, slots


def lookup(table: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slot, found) of every key; slot is 0 where not found."""
    keys = _nonzero(keys)
    size = table.size
    slot = np.zeros(keys.size, np.int64)
    found = np.zeros(keys.size, bool)
    active = np.arange(keys.size)
    probe_at = _home(keys, size)
    while active.size:
        got = table[probe_at]
        hit = got == keys[active]
        slot[active[hit]] = probe_at[hit]
        found[active[hit]] = True
        going = ~hit & (got != _EMPTY)
        active, probe_at = active[going], (probe_at[going] + 1) % size
    return slot, found


# --------------------------------------------------------------------------- the model
@dataclass
class NgramLM:
    """A trained model: vocabulary, dense unigram arrays, and per order k >= 2 a hash table."""

    order: int
    vocab: list[str]  # id -> word; ids 0, 1, 2 are <unk>, <s>, </s>
    uni_logp: np.ndarray  # float32 [V]: log p(w) (natural log), LOG_ZERO for <s>
    uni_backoff: np.ndarray  # float32 [V]: log gamma(w) of w as a context (0: not a context)
    tables: list[np.ndarray]  # tables[k-2]: uint64 hash table of the k-grams (0: empty), k = 2..order
    logp: list[np.ndarray]  # logp[k-2]: float32 interpolated log p, slot for slot with the table
    backoff: list[np.ndarray]  # backoff[k-2]: float32 log gamma of the k-gram as a context (0: none)
    discounts: list[tuple[float, float, float]]  # D1, D2, D3+ per order 1..order

    def __post_init__(self) -> None:
        self._ids = {w: i for i, w in enumerate(self.vocab)}
        del self._ids[UNK], self._ids[BOS]  # the tokenizer cannot produce them; keep it that way
        self._ids[NEWLINE] = self._ids.pop(EOS)

    # ------------------------------------------------------------------ scoring
    def encode(self, tokens: list[str]) -> np.ndarray:
        get = self._ids.get
        return np.fromiter((get(t, UNK_ID) for t in tokens), dtype=np.int64, count=len(tokens))

    def token_logprobs(self, seq: np.ndarray, pos: np.ndarray, max_order: int | None = None) -> np.ndarray:
        """log p of every position of a framed sequence (positions of <s> hold LOG_ZERO); with
        max_order, of the model cut to that order (as in ARPA, the lower orders alone are a model).

        ARPA back-off, vectorised: start from the unigram; at order k, a k-gram that was seen
        replaces the estimate with its interpolated log p; one that was not adds its context's
        log gamma (every lower-order suffix of a seen n-gram is seen, so once an order misses,
        every higher order misses too and keeps adding its gamma).
        """
        top = min(self.order, max_order or self.order)
        lp = self.uni_logp[seq].astype(np.float64)
        if top == 1 or seq.size == 0:
            return lp
        keys = ngram_keys(seq, top)
        ctx_bo = self.uni_backoff[seq].astype(np.float64)  # order-1 contexts: dense by id
        for k in range(2, top + 1):
            valid = np.flatnonzero(pos >= k - 1)
            slot, hit = lookup(self.tables[k - 2], keys[k - 1][valid])
            found = np.zeros(seq.size, bool)
            found[valid] = hit
            j = np.zeros(seq.size, np.int64)
            j[valid] = slot
            bo_prev = np.zeros_like(lp)
            bo_prev[1:] = ctx_bo[:-1]  # the context of position i is the (k-1)-gram ending at i-1
            lp[valid] += bo_prev[valid]  # a miss backs off: its context's log gamma ...
            lp[found] = self.logp[k - 2][j[found]]  # ... a hit is the interpolated estimate itself
            # For order k+1: gamma of the k-gram ending here when it was seen, else 1 (log 0).
            ctx_bo = np.where(found, self.backoff[k - 2][j], 0.0)
        return lp

    def pair_logprobs(self, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        """log p(nxt[i] | prev[i]) of the model cut to order 2, for any pairs of ids: what
        token_logprobs(..., max_order=2) gives at a position whose previous token is prev[i],
        without framing the pairs as lines (one table lookup per pair)."""
        lp = self.uni_logp[nxt].astype(np.float64)
        if self.order < 2 or nxt.size == 0:
            return lp
        word = _mix(nxt.astype(np.uint64) + _GOLDEN)
        slot, found = lookup(self.tables[0], _mix(prev.astype(np.uint64) * _GOLDEN + word))
        lp += self.uni_backoff[prev].astype(np.float64)  # a miss backs off: the context's log gamma
        lp[found] = self.logp[0][slot[found]]
        return lp

    def score(self, tokens: list[str]) -> tuple[float, int]:
        """(sum of natural-log probabilities, number of predicted tokens) of a token list."""
        seq, pos = frame(self.encode(tokens))
        if seq.size == 0:
            return 0.0, 0
        predicted = pos > 0
        return float(self.token_logprobs(seq, pos)[predicted].sum()), int(predicted.sum())

    def perplexity(self, tokens: list[str]) -> float | None:
        """exp(-mean log p) over the predicted tokens, pooled over lines (CCNet); None: no tokens."""
        total, n = self.score(tokens)
        return float(np.exp(-total / n)) if n else None

    def frequent_words(self, k: int) -> np.ndarray:
        """bool [V]: the k words of highest unigram probability (no <s>, </s>, <unk>); ties by id."""
        logp = self.uni_logp.astype(np.float64).copy()
        logp[[UNK_ID, BOS_ID, EOS_ID]] = -np.inf
        mask = np.zeros(len(self.vocab), bool)
        mask[np.argsort(-logp, kind="stable")[: min(k, len(self.vocab) - 3)]] = True
        return mask

    def bigram_ratio(self, tokens: list[str], frequent: np.ndarray, min_pairs: int) -> float | None:
        """exp(mean(log p_uni(w) - log p_bigram(w | v))) over the positions where v and w are both
        `frequent` words (None: fewer than min_pairs such positions). Below 1: the word before
        predicts the word (natural word order); 1 or more: it does not (word salad)."""
        seq, pos = frame(self.encode(tokens))
        if seq.size < 2:
            return None
        pairs = np.flatnonzero(frequent[seq[1:]] & frequent[seq[:-1]]) + 1
        if pairs.size < min_pairs:
            return None
        uni = self.uni_logp[seq[pairs]].astype(np.float64)
        big = self.token_logprobs(seq, pos, max_order=2)[pairs]
        return float(np.exp(np.mean(uni - big)))

    def next_logprobs(self, context: list[str]) -> np.ndarray:
        """log p(w | context) for every id w (a line starts just before the context): for tests."""
        ctx = frame(self.encode(context))[0][:-1] if context else np.array([BOS_ID])
        n = len(self.vocab)
        rows = np.concatenate([np.tile(ctx, (n, 1)), np.arange(n)[:, None]], axis=1)
        # One row per candidate word; rows can be concatenated because every row starts with <s>
        # at position 0, so no n-gram reaches into the row before.
        pos = np.tile(np.arange(rows.shape[1]), n)
        return self.token_logprobs(rows.ravel(), pos).reshape(n, -1)[:, -1]

    # ------------------------------------------------------------------ persistence
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain numeric arrays (no objects): saved with numpy's .npy format, loaded without pickle."""
        arrays: dict[str, np.ndarray] = {
            "order": np.array(self.order, np.int64),
            "vocab_utf8": np.frombuffer("\n".join(self.vocab).encode("utf-8"), np.uint8),
            "uni_logp": self.uni_logp,
            "uni_backoff": self.uni_backoff,
            "discounts": np.array(self.discounts, np.float64),
        }
        for k in range(2, self.order + 1):
            arrays[f"table{k}"] = self.tables[k - 2]
            arrays[f"logp{k}"] = self.logp[k - 2]
            arrays[f"backoff{k}"] = self.backoff[k - 2]
        return arrays

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray] | np.lib.npyio.NpzFile) -> "NgramLM":
        order = int(a["order"])
        vocab = bytes(a["vocab_utf8"]).decode("utf-8").split("\n")
        rng = range(2, order + 1)
        return cls(
            order,
            vocab,
            a["uni_logp"],
            a["uni_backoff"],
            [a[f"table{k}"] for k in rng],
            [a[f"logp{k}"] for k in rng],
            [a[f"backoff{k}"] for k in rng],
            [(float(d1), float(d2), float(d3)) for d1, d2, d3 in a["discounts"]],
        )

    def stats(self) -> dict[str, object]:
        return {
            "order": self.order,
            "vocab": len(self.vocab),
            "ngrams": [len(self.vocab) - 1] + [int(np.count_nonzero(t)) for t in self.tables],
            "discounts": [[round(d, 6) for d in ds] for ds in self.discounts],
        }


# --------------------------------------------------------------------------- training
def discounts(adjusted: np.ndarray) -> tuple[float, float, float]:
    """Chen & Goodman's D1, D2, D3+ from the count-of-counts n1..n4 of one order."""
    n1, n2, n3, n4 = (float(np.count_nonzero(adjusted == c)) for c in (1, 2, 3, 4))
    if min(n1, n2, n3, n4) == 0:
        return FALLBACK_DISCOUNTS
    y = n1 / (n1 + 2 * n2)
    d = (1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3)
    if not all(0 < di < c for di, c in zip(d, (1, 2, 3))):
        return FALLBACK_DISCOUNTS
    return d


@dataclass
class _Level:
    """The distinct k-grams of one order: key, raw count, key of context and suffix, starts with <s>."""

    keys: np.ndarray
    counts: np.ndarray
    ctx: np.ndarray
    suffix: np.ndarray
    bos: np.ndarray

    @classmethod
    def merge(cls, parts: list["_Level"]) -> "_Level":
        keys = np.concatenate([p.keys for p in parts])
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        counts = np.bincount(inverse, weights=np.concatenate([p.counts for p in parts]))
        pick = lambda name: np.concatenate([getattr(p, name) for p in parts])[first]  # noqa: E731
        return cls(uniq, counts.astype(np.int64), pick("ctx"), pick("suffix"), pick("bos"))


def _count_chunk(seq: np.ndarray, pos: np.ndarray, order: int) -> tuple[np.ndarray, list[_Level]]:
    """Unigram id counts and the distinct k-grams (k >= 2) of one framed chunk."""
    keys = ngram_keys(seq, order)
    levels = []
    for k in range(2, order + 1):
        at = np.flatnonzero(pos >= k - 1)
        uniq, first, counts = np.unique(keys[k - 1][at], return_index=True, return_counts=True)
        i = at[first]
        levels.append(_Level(uniq, counts, keys[k - 2][i - 1], keys[k - 2][i], pos[i] == k - 1))
    return seq[pos > 0], levels


def _continuation(level: _Level, higher: _Level | None) -> np.ndarray:
    """Adjusted counts a(): raw at the top order and after <s>, else distinct left extensions."""
    if higher is None:
        return level.counts
    ext_keys, ext_counts = np.unique(higher.suffix, return_counts=True)
    j = np.searchsorted(ext_keys, level.keys).clip(max=max(ext_keys.size - 1, 0))
    n_left = np.where(ext_keys[j] == level.keys, ext_counts[j], 0) if ext_keys.size else 0
    return np.where(level.bos, level.counts, n_left)


def _discounted(a: np.ndarray, d: tuple[float, float, float]) -> np.ndarray:
    """a - D(a): D1 for a = 1, D2 for a = 2, D3+ above (a >= 1)."""
    return a - np.asarray(d)[np.minimum(a, 3).astype(np.int64) - 1]


def _group_gamma(
    ctx: np.ndarray, a: np.ndarray, d: tuple[float, float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(distinct contexts, context number of each n-gram, A(h) and gamma(h) per context)."""
    uctx, inv = np.unique(ctx, return_inverse=True)
    total = np.bincount(inv, weights=a)
    mass = sum(di * np.bincount(inv, weights=sel) for di, sel in zip(d, (a == 1, a == 2, a >= 3)))
    return uctx, inv, total, mass / total


def _find(sorted_keys: np.ndarray, keys: np.ndarray, what: str) -> np.ndarray:
    """Positions of keys that must all be present (the suffix and the context of a seen n-gram)."""
    j = np.searchsorted(sorted_keys, keys).clip(max=max(sorted_keys.size - 1, 0))
    if not np.array_equal(sorted_keys[j], keys):
        raise AssertionError(f"a {what} of a seen n-gram is missing from the order below")
    return j


def train(docs: Iterable[list[str]], order: int) -> NgramLM:
    """Train on tokenized documents (each a `tokenize` result); deterministic for a given input."""
    if order < 1:
        raise ValueError(f"ngram order must be >= 1, got {order}")
    vocab: dict[str, int] = {UNK: UNK_ID, BOS: BOS_ID, NEWLINE: EOS_ID}
    uni_parts: list[np.ndarray] = []
    level_parts: list[list[_Level]] = [[] for _ in range(order - 1)]
    pending: list[np.ndarray] = []
    n_pending = 0

    def flush() -> None:
        nonlocal pending, n_pending
        if pending:
            # A chunk is a run of whole documents, so no n-gram crosses a chunk edge.
            seq, pos = frame(np.concatenate(pending))
            uni, levels = _count_chunk(seq, pos, order)
            uni_parts.append(np.bincount(uni, minlength=len(vocab)))
            for k, level in enumerate(levels):
                level_parts[k].append(level)
        pending, n_pending = [], 0

    for tokens in docs:
        setdefault = vocab.setdefault
        ids = np.fromiter((setdefault(t, len(vocab)) for t in tokens), np.int64, len(tokens))
        pending.append(np.append(ids, EOS_ID))  # a document ends its last line
        n_pending += ids.size
        if n_pending >= CHUNK_TOKENS:
            flush()
    flush()
    words = list(vocab)
    words[EOS_ID] = EOS
    v = len(words)
    uni_counts = sum((np.pad(u, (0, v - u.size)) for u in uni_parts), np.zeros(v, np.int64))
    if not uni_counts.any():
        raise ValueError("the reference corpus holds no tokens: nothing to train an n-gram model on")
    levels = [_Level.merge(parts) for parts in level_parts]
    return _estimate(order, words, uni_counts, levels)


def _estimate(order: int, words: list[str], uni_counts: np.ndarray, levels: list[_Level]) -> NgramLM:
    """Modified-KN estimates from the counts, bottom order first (each order needs the one below)."""
    v = len(words)
    # Unigrams: continuation counts are the distinct bigrams ending in w; <unk> has none.
    if order > 1:
        a1 = np.bincount(levels[0].suffix.astype(np.int64), minlength=v).astype(np.float64)
    else:
        a1 = uni_counts.astype(np.float64)
    a1[BOS_ID] = a1[UNK_ID] = 0.0
    seen = a1 > 0
    d1 = discounts(a1[seen])
    alpha1 = np.where(seen, _discounted(np.where(seen, a1, 1.0), d1), 0.0) / a1.sum()
    gamma1 = float(sum(di * np.count_nonzero(sel) for di, sel in zip(d1, (a1 == 1, a1 == 2, a1 >= 3))) / a1.sum())
    p1 = alpha1 + gamma1 / (v - 1)  # uniform over V' = every id except <s>
    p1[BOS_ID] = 0.0
    uni_logp = np.where(p1 > 0, np.log(np.maximum(p1, 1e-300)), LOG_ZERO).astype(np.float32)
    uni_backoff = np.zeros(v, np.float32)
    all_d = [d1]
    keys_out: list[np.ndarray] = []
    logp_out: list[np.ndarray] = []
    back_out: list[np.ndarray] = []
    lower_logp = uni_logp.astype(np.float64)  # log p of the order below, indexed like its keys
    lower_keys: np.ndarray | None = None  # None: the order below is the dense unigram table
    for k in range(2, order + 1):
        level = levels[k - 2]
        higher = levels[k - 1] if k < order else None
        a = _continuation(level, higher).astype(np.float64)
        d = discounts(a)
        all_d.append(d)
        uctx, inv, total, gamma_ctx = _group_gamma(level.ctx, a, d)
        if lower_keys is None:  # the order below is the unigram table, indexed by word id
            p_lower = np.exp(lower_logp[level.suffix.astype(np.int64)])
            uni_backoff[uctx.astype(np.int64)] = np.log(gamma_ctx)
        else:
            p_lower = np.exp(lower_logp[_find(lower_keys, level.suffix, "suffix")])
            back_out[-1][_find(lower_keys, uctx, "context")] = np.log(gamma_ctx)
        logp = np.log(_discounted(a, d) / total[inv] + gamma_ctx[inv] * p_lower)
        keys_out.append(level.keys)
        logp_out.append(logp.astype(np.float32))
        back_out.append(np.zeros(level.keys.size, np.float32))
        lower_logp, lower_keys = logp, level.keys
    tables, slot_logp, slot_back = [], [], []
    for keys, logp, back in zip(keys_out, logp_out, back_out):
        table, slots = build_table(keys)
        tables.append(table)
        slot_logp.append(np.zeros(table.size, np.float32))
        slot_logp[-1][slots] = logp
        slot_back.append(np.zeros(table.size, np.float32))
        slot_back[-1][slots] = back
    return NgramLM(order, words, uni_logp, uni_backoff, tables, slot_logp, slot_back, all_d)
