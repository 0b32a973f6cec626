"""RQ jobs of the open data (docs/open-data.md)."""

from exports.instructions import instructions_redact_pending


def instructions_redact_ahead() -> int:
    """Every five minutes: the instructions of newly decided or excluded battles,
    redacted before any export publishes them."""
    return instructions_redact_pending()
