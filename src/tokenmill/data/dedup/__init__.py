"""Deduplication: exact (exact.py), near-duplicate MinHash-LSH (minhash.py), repeated lines
(lines.py) and exact substrings (substring.py), and the machinery that makes them global steps
over a corpus of any size: hash-partitioned shuffles on disk (shuffle.py), a pair join that brings
two rows of different shards together (join.py), connected components over the duplicate edges
(components.py), and the curation stages built from them (stages.py, workspace.py)."""
