"""Near-duplicate removal: shingles, MinHash signatures, LSH banding, verification, clusters.

The second layer of the dedup cascade (Broder 1997; Leskovec et al.,
*Mining of Massive Datasets* ch. 3):

1. Shingles S_k(d): the set of hashed k-shingles of a document. `word` shingles are k
   consecutive words, where a word is what `normalized_words` yields: the text lowercased,
   every character that is neither a word character (Python's regex \\w: letters, digits) nor
   whitespace deleted (punctuation, symbols, combining marks), "_" too, then split on
   whitespace — the lm-eval janitor / GPT-3 decontamination convention extended to Unicode,
   so "Don't!" and "dont" are the same word. `char` shingles are k consecutive characters of the
   lowercased text with whitespace runs collapsed (for scripts written without spaces).
   A document with fewer than k units has one shingle: all its units. Each shingle is a
   64-bit hash: a word hashes to a polynomial of its bytes mod 2^64, a shingle to a
   polynomial of its k word hashes, each passed through the MurmurHash3 finalizer. All of it
   runs on whole batches of documents in numpy (prefix sums over the batch's bytes), with no
   Python object per word, so the exact Jaccard used in step 4 is computed on these sets.
2. Signatures: m_r(d) = min over s in S_k(d) of pi_r(s), r = 1..R with R = bands x rows.
   pi_r(x) = a_r * fmix32(x) + b_r mod 2^32 with a_r odd: each pi_r is a bijection of the
   32-bit range, applied to already random inputs (hashes), so P[m_r(d_i) = m_r(d_j)] =
   J(d_i, d_j) up to 32-bit collisions. This is datasketch's "affine32" scheme and the
   (a_r, b_r) are drawn exactly as datasketch draws them, so with the same seed and the same
   32-bit shingle hashes the signatures are identical (benchmarks/bench_minhash.py checks
   it). It is fast because it runs in uint32 lanes with no modulo, and because the documents
   of a batch are processed together: one (R x shingles) product per batch and a
   `np.minimum.reduceat` per document, instead of numpy calls per document.
3. LSH: the R rows are cut into b bands of r rows; a band's key is a 64-bit hash of its r
   values. Two documents are a candidate pair when they share a key in any band, which
   happens with probability P_cand(J) = 1 - (1 - J^r)^b:
       J                    0.3     0.5     0.6     0.7     0.75    0.8      0.9
       b=25 r=5 (default)  0.059   0.548   0.868   0.990   0.9989  0.99995  1.0
       b=20 r=6            0.014   0.270   0.615   0.918   0.980   0.9977   1.0
       b=16 r=8            0.001   0.061   0.237   0.613   0.815   0.947    0.9999
       b=9  r=13           0.000   0.001   0.012   0.084   0.195   0.399    0.929
   (b=9, r=13 is what datasketch's MinHashLSH picks for threshold 0.8 and 128 permutations:
   a sharp step whose midpoint sits at the threshold, so it misses ~60% of the pairs at
   J = 0.80-0.85.) The default puts the step well below the threshold: a pair at 0.8 is
   missed with probability 5e-5 and the extra candidates at J = 0.5-0.8 are removed by step 4,
   whose cost (one sorted-array intersection per candidate) is small next to signatures.
   Measured on real text with known pairs (benchmarks/bench_minhash.py): recall 1.0 for
   25x5, 0.996 for 20x6 and 16x8, against datasketch's 0.81 on the same set.
4. Verification: a candidate pair is a duplicate when the exact Jaccard of its shingle sets is
   at least `threshold` (0.8). LSH alone (datasketch's MinHashLSH) trades recall against
   precision around the threshold; with verification precision is exact and recall only
   depends on P_cand.
5. Clusters: connected components of the verified pairs (union-find, hooking the larger root
   under the smaller). The survivor of a cluster is its smallest index, i.e. the first
   document in canonical (shard, position) order; every other member is removed as
   "near_duplicate_of" the survivor. Like every transitive scheme, a chain A~B~C removes C
   even if J(A, C) is under the threshold; the reason records the survivor's own Jaccard.

Map-reduce use (the executor): map `MinHasher.signatures` + `band_keys` over shards; reduce by
concatenating band keys in canonical order, `candidate_pairs` (all bands at once, or one task per band), then `clusters` with a verifier
that fetches the two texts of each pair. `minhash_dedup_local` composes it in one process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tokenmill.data.config import MinHashConfig
from tokenmill.data.document import Rejection

VERSION = "affine32-1"
# The permutations are fixed, not drawn from the run seed: signatures of the same text stay
# comparable across runs and corpora (dedup against an earlier crawl needs that).
PERMUTATION_SEED = 0
STEP = "minhash_dedup"
RULE = "near_duplicate_of"

_U64 = np.uint64
_MAX32 = np.uint32(0xFFFFFFFF)
_POLY = _U64(0x9E3779B97F4A7C15)  # odd multiplier of the k-gram polynomial (golden ratio)
_BYTE_POLY = _U64(0x100000001B3)  # odd multiplier of the per-word byte polynomial
_BYTE_POLY_INV = _U64(pow(0x100000001B3, -1, 1 << 64))
_BAND_MUL = _U64(0x100000001B3)  # FNV-1a 64-bit prime, for folding a band's rows
# Shingles per signature batch: (R x batch) uint32 products stay a few MB.
_BATCH_SHINGLES = 16384
_BATCH_BYTES = 1 << 20  # text characters per shingling batch

# Characters deleted from words: everything that is neither a word character nor whitespace
# (punctuation, symbols), and "_" — string.punctuation for ASCII, as lm-eval does.
_DELETE = re.compile(r"[^\w\s]|_")


def _ascii_tables() -> tuple[bytes, bytes]:
    """bytes.translate tables equal to `_DELETE` + str.lower on ASCII; whitespace becomes b" "."""
    table = bytearray(range(256))
    delete = bytearray()
    for c in range(128):
        ch = chr(c)
        if _DELETE.match(ch):
            delete.append(c)
        elif ch.isspace():
            table[c] = 0x20  # \x1c-\x1f are whitespace to str.split, not to bytes.split
        else:
            table[c] = ord(ch.lower())
    return bytes(table), bytes(delete)


_ASCII_TABLE, _ASCII_DELETE = _ascii_tables()
_MULTIBYTE = re.compile(rb"[\xc0-\xff][\x80-\xbf]+")  # one UTF-8 encoded non-ASCII character
_NON_ASCII: dict[bytes, bytes | None] = {}
_UNSEEN = object()


def _non_ascii_replacement(char: bytes) -> bytes | None:
    """What a non-ASCII character (UTF-8) becomes: b"" (punctuation, symbol), b" " (space), or
    None (kept: a letter, digit or mark). Memoised: a corpus uses few distinct characters."""
    rep = _NON_ASCII.get(char, _UNSEEN)
    if rep is _UNSEEN:
        ch = char.decode("utf-8", "surrogatepass")
        rep = b"" if _DELETE.match(ch) else b" " if ch.isspace() else None
        _NON_ASCII[char] = rep
    return rep  # type: ignore[return-value]  # never the object() sentinel: replaced just above


def normalized_bytes(text: str) -> bytes:
    """The words of a text as UTF-8, separated by runs of b" ": lowercased, punctuation and
    symbols deleted, every kind of whitespace a separator. Same result on all three paths."""
    if text.isascii():  # the common case: one C-speed translate, no regex
        return text.encode("ascii").translate(_ASCII_TABLE, _ASCII_DELETE)
    low = text.lower()
    raw = low.encode("utf-8", "surrogatepass")
    if (len(raw) - len(low)) * 4 > len(low):  # mostly non-ASCII (Cyrillic, CJK): the regex is faster
        return " ".join(_DELETE.sub("", low).split()).encode("utf-8", "surrogatepass")
    # mostly ASCII with some curly quotes, dashes, accents: translate the ASCII bytes, then
    # visit only the non-ASCII characters (UTF-8 is self-synchronising: the pattern matches
    # whole characters, never bytes inside one)
    return _MULTIBYTE.sub(_replace_match, raw.translate(_ASCII_TABLE, _ASCII_DELETE))


def _replace_match(m: re.Match[bytes]) -> bytes:
    rep = _non_ascii_replacement(m.group())
    return m.group() if rep is None else rep


def normalized_words(text: str) -> list[bytes]:
    """The words of a text (for people and tests; the hashing path never splits into objects)."""
    return normalized_bytes(text).split()


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (a bijection that spreads every input bit), in place."""
    x ^= x >> _U64(33)
    x *= _U64(0xFF51AFD7ED558CCD)
    x ^= x >> _U64(33)
    x *= _U64(0xC4CEB9FE1A85EC53)
    x ^= x >> _U64(33)
    return x


def fmix32(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer (datasketch applies it before its affine permutations)."""
    x = x ^ (x >> np.uint32(16))
    x *= np.uint32(0x85EBCA6B)
    x ^= x >> np.uint32(13)
    x *= np.uint32(0xC2B2AE35)
    x ^= x >> np.uint32(16)
    return x


class _Powers:
    """P^j and P^-j mod 2^64 for j < n, grown on demand (a memo of a pure function)."""

    pw = np.ones(1, dtype=_U64)
    ipw = np.ones(1, dtype=_U64)

    @classmethod
    def upto(cls, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(cls.pw) < n:
            size = max(n, 2 * len(cls.pw), 1 << 16)
            pw = np.empty(size, dtype=_U64)
            ipw = np.empty(size, dtype=_U64)
            pw[0] = ipw[0] = 1
            np.cumprod(np.full(size - 1, _BYTE_POLY, dtype=_U64), out=pw[1:])
            np.cumprod(np.full(size - 1, _BYTE_POLY_INV, dtype=_U64), out=ipw[1:])
            cls.pw, cls.ipw = pw, ipw
        return cls.pw, cls.ipw


def _word_units(bufs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Hash of every word of every buffer (`normalized_bytes` output), and per-buffer offsets.

    All buffers at once, no Python object per word: a word w_0..w_m-1 hashes to
    fmix64(sum w_j * P^j mod 2^64), read off prefix sums of byte * P^pos.
    """
    big = b" ".join(bufs) + b" "  # every word ends with a space
    arr = np.frombuffer(big, dtype=np.uint8)
    # +1 where a word starts, -1 where a space follows a word
    edge = np.diff((arr != 0x20).view(np.int8), prepend=np.int8(0))
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)
    pw, ipw = _Powers.upto(len(arr))
    prefix = np.zeros(len(arr) + 1, dtype=_U64)
    # no byte is 0 (NUL is deleted as a control character), so b * P^pos never drops a byte
    np.cumsum(np.multiply(arr, pw[: len(arr)]), out=prefix[1:])
    words = prefix[ends] - prefix[starts]
    words *= ipw[starts]
    buf_starts = np.zeros(len(bufs), dtype=np.int64)
    if len(bufs) > 1:
        np.cumsum(np.fromiter((len(b) + 1 for b in bufs[:-1]), dtype=np.int64, count=len(bufs) - 1), out=buf_starts[1:])
    offsets = np.zeros(len(bufs) + 1, dtype=np.int64)
    offsets[1:] = np.searchsorted(starts, buf_starts[1:].tolist() + [len(arr)])
    return fmix64(words), offsets


def _char_units(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """A random 64-bit value per character of each lowercased, whitespace-collapsed text."""
    norm = [" ".join(t.lower().split()) for t in texts]
    cps = np.frombuffer("".join(norm).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, norm), dtype=np.int64, count=len(norm)), out=offsets[1:])
    return fmix64(cps.astype(_U64) + _U64(0x632BE59BD9B4E019)), offsets  # 0 must not stay 0


def _poly(units: np.ndarray, n: int, count: int) -> np.ndarray:
    """fmix64(sum_t u[i+t] * Q^(n-1-t)) for i < count: order-sensitive n-gram hashes."""
    acc = units[:count].copy()
    for t in range(1, n):
        acc *= _POLY
        acc += units[t : t + count]
    return fmix64(acc)


def ngram_hashes(units: np.ndarray, n: int) -> np.ndarray:
    """Hash of every run of n consecutive unit hashes of one document (all units when fewer)."""
    if len(units) == 0:
        return np.empty(0, dtype=_U64)
    m = min(n, len(units))
    return _poly(units, m, len(units) - m + 1)


def ngram_stream(units: np.ndarray, offsets: np.ndarray, n: int, short: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """n-gram hashes of many documents at once (none crosses a document boundary), in
    document order, with per-document offsets. short: a document with 0 < units < n gets one
    gram of all its units (else none)."""
    lens = np.diff(offsets)
    counts = np.maximum(lens - n + 1, 0)
    short_docs = np.flatnonzero((lens > 0) & (lens < n)) if short else np.empty(0, dtype=np.int64)
    counts[short_docs] = 1
    out_offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(counts, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=_U64)
    if len(units) >= n:
        full = _poly(units, n, len(units) - n + 1)
        ends = np.repeat(offsets[1:], lens)[: len(full)]  # end of each position's document
        inside = np.arange(len(full)) + n <= ends
        if len(short_docs):
            slot = np.ones(len(out), dtype=bool)
            slot[out_offsets[short_docs]] = False
            out[slot] = full[inside]
        else:
            out[:] = full[inside]
    for d in short_docs:
        out[out_offsets[d]] = ngram_hashes(units[offsets[d] : offsets[d + 1]], n)[0]
    return out, out_offsets


def _groups(texts: Sequence[str]) -> Iterator[tuple[int, int]]:
    """[i, j) ranges of consecutive texts of about _BATCH_BYTES characters (at least one text):
    the per-character temporaries of a batch stay tens of MB whatever the corpus size."""
    i = 0
    while i < len(texts):
        j, size = i, 0
        while j < len(texts) and (j == i or size + len(texts[j]) <= _BATCH_BYTES):
            size += len(texts[j])
            j += 1
        yield i, j
        i = j


def _concat(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    grams = np.concatenate([g for g, _ in parts]) if parts else np.empty(0, dtype=_U64)
    offsets = [np.zeros(1, dtype=np.int64)]
    base = 0
    for g, off in parts:
        offsets.append(off[1:] + base)
        base += len(g)
    return grams, np.concatenate(offsets)


def word_ngram_stream(texts: Sequence[str], n: int, short: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Word n-gram hashes of many texts (see `ngram_stream`), batch by batch."""
    parts = []
    for i, j in _groups(texts):
        units, offsets = _word_units([normalized_bytes(t) for t in texts[i:j]])
        parts.append(ngram_stream(units, offsets, n, short))
    return _concat(parts)


def char_ngram_stream(texts: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Character n-gram hashes of many texts (see `ngram_stream`), batch by batch."""
    return _concat([ngram_stream(*_char_units(texts[i:j]), n) for i, j in _groups(texts)])


def sorted_unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values; sorts `x` in place (sort + mask: several times faster than
    np.unique on the small arrays of one document)."""
    x.sort()
    if len(x) < 2:
        return x
    keep = np.empty(len(x), dtype=bool)
    keep[0] = True
    np.not_equal(x[1:], x[:-1], out=keep[1:])
    return x[keep]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted unique shingle arrays; 0.0 when both are empty."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    if len(a) > len(b):
        a, b = b, a
    pos = np.searchsorted(b, a)
    pos[pos == len(b)] = 0
    inter = int(np.count_nonzero(b[pos] == a))
    return inter / (len(a) + len(b) - inter)


def candidate_probability(j: float, bands: int, rows: int) -> float:
    """P_cand(J) = 1 - (1 - J^r)^b: the chance that LSH makes a pair of Jaccard J a candidate."""
    return 1.0 - (1.0 - j**rows) ** bands


class MinHasher:
    """Shingles, signatures and band keys of one run (picklable; seed fixes the permutations)."""

    def __init__(self, cfg: MinHashConfig, seed: int):
        self.cfg = cfg
        self.seed = seed
        self.num_perm = cfg.bands * cfg.rows
        self.a, self.b = self.permutations(self.num_perm, seed)

    @staticmethod
    def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) of the affine permutations, drawn as datasketch's affine32 scheme draws them."""
        gen = np.random.RandomState(seed % (1 << 32))
        a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
        return a, b

    # ----------------------------------------------------------------- shingles
    def shingle_stream(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Shingle hashes of many texts, in order and with repeats, plus per-text offsets."""
        if self.cfg.shingle == "word":
            return word_ngram_stream(texts, self.cfg.k)
        return char_ngram_stream(texts, self.cfg.k)

    def shingle_sets(self, texts: Sequence[str]) -> list[np.ndarray]:
        """`shingles` of many texts (batched)."""
        grams, offsets = self.shingle_stream(texts)
        return [sorted_unique(grams[offsets[i] : offsets[i + 1]].copy()) for i in range(len(texts))]

    def shingles(self, text: str) -> np.ndarray:
        """Sorted unique 64-bit hashes of the document's k-shingles (word or char)."""
        grams, _ = self.shingle_stream([text])
        return sorted_unique(grams)

    # ----------------------------------------------------------------- signatures
    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """(n, R) uint32 MinHash signatures; a text without shingles gets all 0xFFFFFFFF."""
        out = np.full((len(texts), self.num_perm), _MAX32, dtype=np.uint32)
        for i, j in _groups(texts):  # never all shingles of the corpus at once
            grams, offsets = self.shingle_stream(texts[i:j])
            self._fill(grams, offsets, out[i:j])
        return out

    def signatures_of(self, shingle_sets: Sequence[np.ndarray]) -> np.ndarray:
        """Signatures of precomputed shingle sets (`shingles` output)."""
        out = np.full((len(shingle_sets), self.num_perm), _MAX32, dtype=np.uint32)
        offsets = np.zeros(len(shingle_sets) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, shingle_sets), dtype=np.int64, count=len(shingle_sets)), out=offsets[1:])
        grams = np.concatenate(shingle_sets) if shingle_sets else np.empty(0, dtype=_U64)
        self._fill(grams, offsets, out)
        return out

    def _permuted(self, grams: np.ndarray) -> np.ndarray:
        """(R, m) uint32: every permutation of every shingle (uint32 arithmetic wraps mod 2^32)."""
        p = np.multiply(self.a[:, None], fmix32(grams.astype(np.uint32))[None, :])
        p += self.b[:, None]
        return p

    def _fill(self, grams: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
        """out[d] = per-permutation minimum over the shingles of document d, in batches of
        about _BATCH_SHINGLES shingles: one product and one np.minimum.reduceat per batch."""
        n = len(offsets) - 1
        d = 0
        while d < n:
            if offsets[d + 1] - offsets[d] > _BATCH_SHINGLES:  # a large document alone
                for s in range(int(offsets[d]), int(offsets[d + 1]), _BATCH_SHINGLES):
                    part = self._permuted(grams[s : min(s + _BATCH_SHINGLES, int(offsets[d + 1]))])
                    np.minimum(out[d], part.min(axis=1), out=out[d])
                d += 1
                continue
            e = int(np.searchsorted(offsets, offsets[d] + _BATCH_SHINGLES, side="right")) - 1
            e = max(min(e, n), d + 1)
            lo, hi = int(offsets[d]), int(offsets[e])
            nonempty = np.flatnonzero(offsets[d + 1 : e + 1] > offsets[d:e]) + d
            if len(nonempty):
                mins = np.minimum.reduceat(self._permuted(grams[lo:hi]), offsets[nonempty] - lo, axis=1)
                out[nonempty] = mins.T
            d = e

    # ----------------------------------------------------------------- LSH
    def band_keys(self, sigs: np.ndarray) -> np.ndarray:
        """(n, bands) uint64 band keys of signatures (see the module-level `band_keys`)."""
        return band_keys(sigs, self.cfg.bands, self.cfg.rows)

    def candidate_pairs(self, band_keys_all: np.ndarray) -> np.ndarray:
        """(m, 2) int64 pairs i<j sharing a key in some band, with the configured bucket window."""
        return candidate_pairs(band_keys_all, self.cfg.bucket_window)


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64: a 64-bit hash of each band's `rows` values (equal bands, equal keys;
    a per-band salt keeps equal values in different bands apart). Needs R == bands * rows."""
    n = len(sigs)
    vals = sigs.reshape(n, bands, rows).astype(_U64)
    salts = np.arange(1, bands + 1, dtype=_U64) * _U64(0xD6E8FEB86659FD93)
    keys = np.broadcast_to(fmix64(salts), (n, bands)).copy()
    for r in range(rows):  # FNV-1a over the rows, then a finalizer
        keys ^= vals[:, :, r]
        keys *= _BAND_MUL
    return fmix64(keys)


DEFAULT_WINDOW: int = MinHashConfig.model_fields["bucket_window"].default


def candidate_pairs(band_keys_all: np.ndarray, window: int | None = DEFAULT_WINDOW) -> np.ndarray:
    """Every pair i<j that shares a key in some band (column), deduplicated, sorted, (m, 2) int64.

    Per band: argsort the keys (stable, so a bucket lists its documents in index order) and
    pair each member of a bucket with the next `window` members of the same bucket. A bucket
    of up to window+1 documents gives all its pairs (window=None: every bucket does); a bigger
    one (a template copied 10^4 times) gives N*window pairs instead of N^2/2 and stays
    connected. Memory: one band's sort at a time plus the pairs; no per-bucket Python objects.
    Bands may be processed separately (one task per band) and their pairs concatenated.
    """
    n = len(band_keys_all)
    limit = n if window is None else max(1, window)
    codes: list[np.ndarray] = []
    for band in range(band_keys_all.shape[1]):
        col = band_keys_all[:, band]
        order = np.argsort(col, kind="stable")
        sk = col[order]
        same = sk[1:] == sk[:-1]
        if not same.any():
            continue
        # keep only the members of buckets with two or more documents
        member = np.zeros(n, dtype=bool)
        member[1:] |= same
        member[:-1] |= same
        idx = order[member]
        gid = np.cumsum(np.concatenate(([True], ~same)))[member]  # bucket id of each member
        biggest = int(np.max(np.bincount(gid - gid.min())))
        for d in range(1, min(biggest - 1, limit) + 1):
            ok = gid[:-d] == gid[d:]
            codes.append(idx[:-d][ok].astype(np.int64) * n + idx[d:][ok])
    if not codes:
        return np.empty((0, 2), dtype=np.int64)
    code = np.unique(np.concatenate(codes))
    return np.stack([code // n, code % n], axis=1)


class UnionFind:
    """Disjoint sets over 0..n-1 whose root is always the smallest member (min-root union)."""

    def __init__(self, n: int):
        self.parent = np.arange(n, dtype=np.int64)

    def find(self, i: int) -> int:
        """Root of i, halving the path on the way (path compression)."""
        p = self.parent
        while p[i] != i:
            p[i] = p[p[i]]
            i = int(p[i])
        return i

    def union(self, i: int, j: int) -> int:
        """Merge the sets of i and j; the smaller root becomes the root of both."""
        ri, rj = self.find(i), self.find(j)
        lo, hi = (ri, rj) if ri < rj else (rj, ri)
        self.parent[hi] = lo
        return lo

    def union_pairs(self, pairs: np.ndarray) -> None:
        """Union every pair at once: hook larger roots under smaller ones until no pair spans
        two sets (a parent is never larger than its child, so the roots stay the minima)."""
        a, b = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
        while len(a):
            self.compress()
            ra, rb = self.parent[a], self.parent[b]
            open_ = ra != rb
            if not open_.any():
                return
            a, b, ra, rb = a[open_], b[open_], ra[open_], rb[open_]
            np.minimum.at(self.parent, np.maximum(ra, rb), np.minimum(ra, rb))

    def compress(self) -> None:
        """Point every element straight at its root (pointer jumping)."""
        p = self.parent
        while True:
            grand = p[p]
            if np.array_equal(grand, p):
                return
            p[:] = grand

    def roots(self) -> np.ndarray:
        """The root (smallest member of its set) of every element."""
        self.compress()
        return self.parent.copy()


def clusters(n: int, pairs: np.ndarray, verify: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Root of every document: the smallest index of its cluster of verified pairs.

    `verify(pairs) -> bool[m]` says which candidate pairs are real duplicates (None: all).
    """
    uf = UnionFind(n)
    if len(pairs):
        if verify is not None:
            pairs = pairs[np.asarray(verify(pairs), dtype=bool)]
        uf.union_pairs(pairs)
    return uf.roots()


def estimated_jaccard(sigs: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Share of equal signature rows of each pair (the MinHash estimate of J)."""
    if len(pairs) == 0:
        return np.empty(0)
    return (sigs[pairs[:, 0]] == sigs[pairs[:, 1]]).mean(axis=1)


def exact_verifier(shingle_sets: Sequence[np.ndarray], threshold: float) -> Callable[[np.ndarray], np.ndarray]:
    """A `verify` for `clusters`: exact shingle Jaccard >= threshold."""

    def verify(pairs: np.ndarray) -> np.ndarray:
        return np.fromiter(
            (jaccard(shingle_sets[i], shingle_sets[j]) >= threshold for i, j in pairs), dtype=bool, count=len(pairs)
        )

    return verify


def signature_verifier(sigs: np.ndarray, threshold: float) -> Callable[[np.ndarray], np.ndarray]:
    """A `verify` without the texts: the MinHash estimate >= threshold (verify=False)."""
    return lambda pairs: estimated_jaccard(sigs, pairs) >= threshold


def cluster_sizes(roots: np.ndarray) -> np.ndarray:
    """Size of the cluster of every document (1 for a document without duplicates)."""
    return np.bincount(roots, minlength=len(roots))[roots]


def near_duplicate_rejection(survivor_id: str, estimated: float, verified: float | None, cfg: MinHashConfig) -> Rejection:
    """The rejection of a removed cluster member; its Jaccard with the survivor in the reason."""
    measured = f"verified Jaccard {verified:.3f}, " if verified is not None else ""
    return Rejection(
        STEP,
        RULE,
        survivor_id,
        f"near-duplicate of {survivor_id}: {measured}MinHash estimate {estimated:.3f} "
        f"({cfg.bands}x{cfg.rows} permutations, {cfg.shingle} {cfg.k}-shingles, threshold {cfg.threshold})",
    )


def minhash_dedup_local(texts: Sequence[str], cfg: MinHashConfig, seed: int) -> np.ndarray:
    """All of the above in one process: the root (survivor index) of every text."""
    hasher = MinHasher(cfg, seed)
    sets = hasher.shingle_sets(texts)
    sigs = hasher.signatures_of(sets)
    pairs = hasher.candidate_pairs(hasher.band_keys(sigs))
    verify = exact_verifier(sets, cfg.threshold) if cfg.verify else signature_verifier(sigs, cfg.threshold)
    return clusters(len(texts), pairs, verify)
