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


def star_rounds(edges: np.ndarray, parts: int) -> tuple[dict[int, int], int]:
    """The partitioned rounds in memory: each step on the pairs of one hash partition at a time,
    stopping when a round leaves the (digest of the) edge set unchanged, as the stage does."""
    from tokenmill.data.dedup.components import edge_set_digest, large_star, small_star, unique_pairs
    from tokenmill.data.dedup.shuffle import hash_partition

    lo, hi = edges.min(axis=1), edges.max(axis=1)
    u, v = np.concatenate([hi, lo]), np.concatenate([lo, hi])
    previous = None
    for r in range(64):
        part = hash_partition(u, parts)
        outs = [large_star(u[part == p], v[part == p]) for p in range(parts)]
        digests = [edge_set_digest(*unique_pairs(u[part == p], v[part == p])) for p in range(parts)]
        total = (sum(d[0] for d in digests), sum(d[1] for d in digests) % 2**64, sum(d[2] for d in digests) % 2**64)
        if total == previous:
            centre = u < v
            roots = dict(zip(v[centre].tolist(), u[centre].tolist()))
            roots.update({m: m for m in u[centre].tolist()})
            return roots, r
        previous = total
        x, m = (np.concatenate(a) for a in zip(*outs))
        part = hash_partition(x, parts)
        outs = [small_star(x[part == p], m[part == p]) for p in range(parts)]
        x, m = (np.concatenate(a) for a in zip(*outs))
        u, v = np.concatenate([x, m]), np.concatenate([m, x])
    raise AssertionError("no convergence")


def test_partitioned_star_rounds_match_a_breadth_first_search():
    rng = np.random.default_rng(1)
    for trial in range(15):
        nodes = rng.choice(10**9, size=int(rng.integers(2, 200)), replace=False)
        edges = nodes[rng.integers(0, len(nodes), size=(int(rng.integers(1, 250)), 2))]
        edges = edges[edges[:, 0] != edges[:, 1]]
        if not len(edges):
            continue
        roots, _ = star_rounds(edges, int(rng.integers(1, 6)))
        assert roots == bfs_roots(edges)


def test_a_long_chain_in_shuffled_order_converges_to_its_first_node():
    # the worst case for label propagation (a path): the star rounds still end in a few rounds
    path = np.random.default_rng(2).permutation(np.arange(500) * 7919 + 11)
    edges = np.stack([path[:-1], path[1:]], axis=1)
    roots, rounds = star_rounds(edges, 4)
    assert set(roots.values()) == {int(path.min())} and len(roots) == 500
    assert rounds <= 20


def test_the_digest_is_a_set_digest():
    from tokenmill.data.dedup.components import edge_set_digest

    u, v = np.array([5, 1, 9, 2]), np.array([1, 0, 3, 2])
    whole = edge_set_digest(u, v)
    halves = [edge_set_digest(u[:2], v[:2]), edge_set_digest(u[2:], v[2:])]
    assert whole == (4, sum(h[1] for h in halves) % 2**64, sum(h[2] for h in halves) % 2**64)
    assert edge_set_digest(u[::-1], v[::-1]) == whole
    assert edge_set_digest(v, u) != whole  # direction matters
