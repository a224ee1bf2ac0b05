"""The one error type of the mixture stage."""

from __future__ import annotations

from tokenmill.errors import UserError


class MixtureError(UserError, ValueError):
    """Mixture weights, curriculum phases or a token store that cannot feed training; the message says why."""
