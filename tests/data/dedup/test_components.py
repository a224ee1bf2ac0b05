"""Connected components over edges only, rooted at the smallest node: equal to a breadth-first
search of the same graph."""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

from tokenmill.data.dedup.components import components


def bfs_roots(edges: np.ndarray) -> dict[int, int]:
    adj: dict[int, set[int]] = defaultdict(set)
    for a, b in edges.tolist():
        adj[a].add(b)
        adj[b].add(a)
    root: dict[int, int] = {}
    for start in sorted(adj):
        if start in root:
            continue
        seen, todo = {start}, deque([start])
        while todo:
            for nxt in adj[todo.popleft()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        for node in seen:
            root[node] = min(seen)
    return root


def test_roots_match_a_breadth_first_search_on_random_sparse_graphs():
    rng = np.random.default_rng(0)
    for trial in range(20):
        n_nodes = 10**9  # global row indices: sparse, large
        nodes = rng.choice(n_nodes, size=int(rng.integers(2, 300)), replace=False)
        edges = nodes[rng.integers(0, len(nodes), size=(int(rng.integers(1, 400)), 2))]
        parts = np.array_split(edges, int(rng.integers(1, 5)))  # as several shards' edge files
        got_nodes, got_roots = components(parts)
        want = bfs_roots(edges)
        assert got_nodes.tolist() == sorted(want)
        assert dict(zip(got_nodes.tolist(), got_roots.tolist())) == want


def test_no_edges_no_nodes():
    nodes, roots = components([np.zeros((0, 2), np.int64)])
    assert nodes.size == 0 and roots.size == 0
