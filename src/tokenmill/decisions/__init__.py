"""Data decisions by measurement (issue 17): experiments that train real tokenmill runs to decide
what the mixture should be, so they sit above the trainer, not inside the mixture stage.

  optimize.py      `tokenmill mixture optimize`: DoReMi and a data-mixing-law regression on proxy
                   models, then an optional seeded comparison at the base size
  doremi.py        the DoReMi reference and Group-DRO proxy training loop
  regmix.py        sampled mixtures and the fitted per-bucket mixing law
  source_value.py  `tokenmill source-value`: a source's marginal value, paired and by annealing
"""
