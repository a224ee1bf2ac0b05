"""Synthetic data and the model-collapse guard (Shumailov et al. 2024).

  sample.py    documents sampled from a run's checkpoint, seeded per document
  collapse.py  diversity and tail figures of a set of documents against the real corpus
  run.py       `tokenmill synth CONFIG`: the config, sampling, writing and measuring in one call

The lineage every synthetic document carries lives with the data (data/synthetic_lineage.py: a
curated row keeps it) and the guard with the mixture (mixture/collapse_guard.py: the trainer
refuses a mixture above the limits), so neither stage imports this package above them.
"""
