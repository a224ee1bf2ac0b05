"""tokenmill: raw text to a trained, evaluated base language model."""

from tokenmill import foreign_logs

__version__ = "0.1.0"
foreign_logs.install()
