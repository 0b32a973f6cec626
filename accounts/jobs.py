"""RQ jobs for accounts: one service call each (registered in arena_site/cron.py)."""

from accounts.services import api_tokens_last_used_flush as _api_tokens_last_used_flush


def api_tokens_last_used_flush() -> int:
    """For the scheduler: the tokens' last-used times, from Redis to the database."""
    return _api_tokens_last_used_flush()
