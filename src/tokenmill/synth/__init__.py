"""Synthetic data and the model-collapse guard (issue 18; seed 004, Shumailov et al. 2024).

  lineage.py   the record every synthetic document carries (checkpoint, sampling, generation)
  sample.py    documents sampled from a run's checkpoint, seeded per document
  collapse.py  diversity and tail figures of a set of documents against the real corpus
  guard.py     the synthetic share and generation of a planned mixture, refused above the limits
  run.py       `tokenmill synth CONFIG`: the config, sampling, writing and measuring in one call
"""
