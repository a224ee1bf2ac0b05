"""Export trained checkpoints to other ecosystems (HF transformers: `export.hf`)."""

from tokenmill.export.hf import ExportError, export_hf

__all__ = ["ExportError", "export_hf"]
