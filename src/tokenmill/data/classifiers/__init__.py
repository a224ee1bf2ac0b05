"""The learned scorers of model-based quality and the corpus-wide cut on their scores:
ngram_lm.py (Kneser-Ney word n-gram LM, CCNet's perplexity), linear_classifier.py (fastText-style
hashed n-gram logistic regression), top_percent.py and classifier_cut.py (the exact top-k% cut,
a phase between the per-document steps and dedup). steps/model_quality.py trains and applies them."""
