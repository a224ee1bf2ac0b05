"""tokenmill: raw text to a trained, evaluated base language model."""

__version__ = "0.1.0"
