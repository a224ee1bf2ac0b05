"""Which bucket each sample of a phase comes from: a closed-form weighted interleave.

Bucket b's j-th sample (0-based) is given the virtual time (j + 1/2) / p_b, and the samples of a
phase are ordered by time, ties going to the bucket that sorts first. This is the sequential
Sainte-Laguë (Webster) apportionment: every prefix of n samples holds n·p_b samples of bucket b
up to (B+1)/2 samples for B buckets, whatever n is — independent seeded draws would drift by
about √(n·p_b) — and it is house-monotone, so the j-th sample drawn from a bucket is always that
bucket's j-th sample, which keeps each bucket's token stream contiguous.

Megatron's blended dataset reaches the same goal by a greedy error-minimising loop that writes a
sample -> dataset index array for the whole run and caches it on disk. Here both directions are
O(B) integer formulas, so nothing is precomputed and the samples of any step are found directly:

    position(b, j)  = j + Σ_{c<b} ⌊(⌊X_c/q_b⌋ + 1)/2⌋ + Σ_{c>b} ⌊⌈X_c/q_b⌉/2⌉,  X_c = (2j+1)·q_c
    count_before(b, i) = min { j : position(b, j) >= i }     (binary search near i·p_b)

where the first sum counts bucket c's samples whose time is <= b's (ties before b), the second
those strictly earlier. Shares are quantised to integers q_b (Σ q ≈ 2^20) so every comparison is
exact; the quantised shares are the ones reported in the plan.
"""

from __future__ import annotations

SHARE_RESOLUTION = 1 << 20


def quantize_shares(weights: dict[str, float]) -> dict[str, int]:
    """Positive weights -> integer shares summing to about 2^20 (each >= 1)."""
    total = sum(weights.values())
    return {b: max(1, round(w / total * SHARE_RESOLUTION)) for b, w in sorted(weights.items())}


class Interleave:
    """The order of buckets over the samples of one phase; `buckets` are sorted names."""

    def __init__(self, weights: dict[str, float]):
        positive = {b: float(w) for b, w in weights.items() if w > 0}
        if not positive:
            raise ValueError("an interleave needs at least one bucket with a positive weight")
        q = quantize_shares(positive)
        self.buckets: list[str] = list(q)
        self.q: list[int] = list(q.values())
        self.total = sum(self.q)

    @property
    def shares(self) -> dict[str, float]:
        """The exact share of each bucket this interleave realises (the quantised weights)."""
        return {b: qb / self.total for b, qb in zip(self.buckets, self.q)}

    def position(self, b: int, j: int) -> int:
        """Index in the phase of bucket b's j-th sample."""
        qb, x, pos = self.q[b], 2 * j + 1, j
        for c, qc in enumerate(self.q):
            if c < b:
                pos += ((x * qc) // qb + 1) // 2
            elif c > b:
                pos += (-((-x * qc) // qb)) // 2
        return pos

    def count_before(self, b: int, i: int) -> int:
        """How many of the first i samples come from bucket b."""
        if i <= 0:
            return 0
        margin = len(self.q) + 2  # |count - i·p_b| <= (B+1)/2, so the answer lies in the bracket
        guess = i * self.q[b] // self.total
        lo, hi = max(0, guess - margin), guess + margin
        while lo > 0 and self.position(b, lo - 1) >= i:  # never taken unless the bound is wrong
            lo = max(0, lo - margin)
        while self.position(b, hi) < i:
            hi += margin
        while lo < hi:  # smallest j in [lo, hi] with position(b, j) >= i
            mid = (lo + hi) // 2
            if self.position(b, mid) >= i:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def samples(self, i0: int, i1: int) -> list[tuple[int, int]]:
        """(bucket index, j) of samples i0 .. i1-1 of the phase, in order."""
        out: list[tuple[int, int] | None] = [None] * (i1 - i0)
        for b in range(len(self.q)):
            for j in range(self.count_before(b, i0), self.count_before(b, i1)):
                out[self.position(b, j) - i0] = (b, j)
        assert all(s is not None for s in out), "interleave positions must tile the range"
        return out  # type: ignore[return-value]
