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
