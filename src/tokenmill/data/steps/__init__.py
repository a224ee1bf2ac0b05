"""Per-document curation steps, one module per step (data/registry.py lists them in run order),
with the rules and lists they use: select, extract, normalize (kind_detect, text_kinds), urlfilter,
langid, quality (code_quality, language_profiles, language_calibration, segment), model_quality,
safety, pii, decontaminate, bucketing. Shipped lists and profiles are in resources/."""
