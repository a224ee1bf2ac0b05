"""Connected components of the verified duplicate edges, with the smallest index as the root.

Only documents that have an edge take part, so the work is proportional to the edges, which are
far fewer than the documents (a document without a near-duplicate never appears). Nodes are
renumbered densely in ascending order before the union-find, so the smallest local index is the
smallest global index: the root is the first copy in canonical order, as in the single-process
computation. Memory: about 56 bytes per edge (the edges, the renumbering, the parent array).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tokenmill.data.dedup.minhash import UnionFind

BYTES_PER_EDGE = 56


def components(edges: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, roots): every node of the (m, 2) edge arrays, ascending, and its component's
    smallest node."""
    arrays = [e.reshape(-1, 2) for e in edges if len(e)]
    if not arrays:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    flat = np.concatenate(arrays).astype(np.int64)
    nodes, local = np.unique(flat, return_inverse=True)
    uf = UnionFind(len(nodes))
    uf.union_pairs(local.reshape(-1, 2))
    return nodes, nodes[uf.roots()]


# --------------------------------------------------------------------------- partitioned
# When the edges do not fit one task, the components come from the alternating large-star /
# small-star rounds of Kiveris et al. ("Connected Components in MapReduce and Beyond", SoCC
# 2014): each step groups edges by one endpoint, so it runs as one task per hash partition, and
# the graph converges to one star per component centred on its smallest node (the same root as
# the union-find). Edges are (x, m) pairs with x > m.
PAIR = np.dtype([("u", "<i8"), ("v", "<i8")])
_K1, _K2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)


def unique_pairs(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (u, v) pairs, sorted by u then v."""
    x = np.empty(len(u), dtype=PAIR)
    x["u"], x["v"] = u, v
    x = np.unique(x)
    return x["u"].copy(), x["v"].copy()


def _groups(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start of each run of equal u (sorted) and the run index of every row."""
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
    return starts, np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(u)]))


def large_star(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Directed pairs (u, v), both directions of every edge, for the u of this partition: each
    neighbour v > u is linked to m(u), the smallest of u and its neighbours. Returns (x, m)."""
    u, v = unique_pairs(u, v)
    if not len(u):
        return u, v
    starts, run = _groups(u)
    m = np.minimum(u[starts], v[starts])[run]  # v is sorted within a run: its first is the smallest
    keep = v > u
    return v[keep], m[keep]


def small_star(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (u, v) with v < u for the u of this partition: u and its smaller neighbours are all
    linked to the smallest of them. Returns (x, m)."""
    u, v = unique_pairs(u, v)
    if not len(u):
        return u, v
    starts, run = _groups(u)
    m = v[starts]
    other = v != m[run]
    return np.concatenate([u[starts], v[other]]), np.concatenate([m, m[run][other]])


def edge_set_digest(u: np.ndarray, v: np.ndarray) -> tuple[int, int, int]:
    """(count, two 64-bit sums of a hash per pair) of distinct pairs: equal for equal sets, and
    additive over partitions that hold disjoint parts of a set."""
    with np.errstate(over="ignore"):
        a, b = u.astype(np.uint64), v.astype(np.uint64)
        h1 = (a * _K1) ^ (b + (b << np.uint64(17))) ^ ((a ^ b) >> np.uint64(31))
        h2 = (b * _K2) ^ (a + (a << np.uint64(23))) ^ ((a + b) >> np.uint64(29))
        h1 = h1 * _K2
        h2 = h2 * _K1
        return len(u), int(h1.sum(dtype=np.uint64)), int(h2.sum(dtype=np.uint64))
