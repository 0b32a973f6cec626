"""Periodic jobs, run by `manage.py rqcron arena_site.cron` (RQ's own cron scheduler)."""

from rq import cron

from sandboxes.jobs import sandbox_janitor

# Sandboxes left behind by a worker that died are reaped within a minute.
cron.register(sandbox_janitor, queue_name="default", interval=60)
