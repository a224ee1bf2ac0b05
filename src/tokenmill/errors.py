"""The base of every error a user can fix: the CLI prints its message (which names the file,
record or key and the problem) without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input, config or state that the user can fix; never a bug in tokenmill."""
