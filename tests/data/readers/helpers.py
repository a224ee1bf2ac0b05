"""Helpers shared by the reader tests."""

from __future__ import annotations

from tokenmill.config import SourceConfig


def files_source(path, bucket="web", **kw) -> SourceConfig:
    """A kind=files source over `path`."""
    return SourceConfig(kind="files", path=str(path), bucket=bucket, **kw)
