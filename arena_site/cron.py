"""Periodic jobs, run by `manage.py rqcron arena_site.cron` (RQ's own cron scheduler)."""

from django.conf import settings
from rq import cron

from battles.jobs import battles_janitor
from judging.jobs import battles_resolve_pending
from ratings.jobs import ratings_refit
from sandboxes.jobs import sandbox_janitor

# Sandboxes left behind by a worker that died are reaped within a minute, and the
# battles it was running are failed with a visible reason once their heartbeat is
# ARENA_STUCK_AFTER_S old.
cron.register(sandbox_janitor, queue_name="default", interval=60)
cron.register(battles_janitor, queue_name="default", interval=30)
# The published rating (SPEC §7.2): a refit every Δ; staleness stays within Δ + c.
cron.register(ratings_refit, queue_name="ratings", interval=settings.ARENA.refit_period_s)
# Votes are resolved in the request that cast them; a process that died between the
# vote's commit and its resolution leaves the battle to this sweep.
cron.register(battles_resolve_pending, queue_name="judging", interval=60)
