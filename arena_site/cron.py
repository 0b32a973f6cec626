"""Periodic jobs for `manage.py rqcron arena_site.cron` (RQ's own cron scheduler).
The skeleton has none that must run yet; refit and janitor jobs register here."""

from rq import cron  # noqa: F401  (jobs register with cron.register(...))
