"""Mixture stage: bucket weights, curriculum phases, packing and the resumable loader.

loader.py      Loader: batch(step, micro), provenance, plan, fingerprint, prefetch
curriculum.py  phases by share of the token budget (weights, seq_len, anneal)
schedule.py    closed-form weighted interleave of buckets over a phase's samples
stream.py      one bucket's epoch-shuffled document stream
packing.py     Batch, and a row's positions / segments / loss_mask (packed or padded)
plan.py        epochs, nominal vs effective tokens, warnings, r_pad
provenance.py  DocSpan / SampleSource: a row back to (bucket, shard, doc, curated id, span)
prefetch.py    background thread with a bounded queue
"""
