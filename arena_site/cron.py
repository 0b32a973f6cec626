"""Periodic jobs, run by `python -m arena_site.worker arena_site.cron` (RQ's own cron
scheduler, with retries through a Redis restart; `manage.py rqcron` runs it too, without)."""

from django.conf import settings
from rq import cron

from accounts.jobs import api_tokens_last_used_flush
from battles.jobs import battles_janitor, snapshots_prune
from environments.jobs import environments_collect
from exports.jobs import instructions_redact_ahead
from judging.jobs import battles_resolve_pending
from ratings.jobs import ratings_refit
from sandboxes.jobs import sandbox_janitor

# A battle whose worker process died on this host is re-run once (its sandboxes reaped
# first) within ARENA_FAULT_CHECK_S; one whose heartbeat is ARENA_STUCK_AFTER_S old
# (another host's worker) is failed with a visible reason. Sandboxes left behind by a
# dead worker are reaped within a minute in any case.
cron.register(sandbox_janitor, queue_name="default", interval=60)
cron.register(battles_janitor, queue_name="default", interval=settings.ARENA.fault_check_s)
# The published rating (SPEC §7.2): a refit every Δ; staleness stays within Δ + c.
cron.register(ratings_refit, queue_name="ratings", interval=settings.ARENA.refit_period_s)
# Votes are resolved in the request that cast them; a process that died between the
# vote's commit and its resolution leaves the battle to this sweep.
cron.register(battles_resolve_pending, queue_name="judging", interval=60)
# Failed runs become candidate environments within a minute (docs/environments.md).
cron.register(environments_collect, queue_name="default", interval=60)
# Initial states past ARENA_SNAPSHOT_RETENTION_DAYS go, with their files.
cron.register(snapshots_prune, queue_name="default", interval=3600)
# The open data publishes instructions redacted: made ahead for newly decided battles.
# On a queue of its own (`exports`, its own worker): a run redacts up to 200 instructions
# with Presidio (~0.4 s each, up to ~80 s), and on `default` every janitor waited behind
# it (battles_janitor, every 5 s, was 7.8 s late behind an 8.5 s run in the vote soak).
cron.register(instructions_redact_ahead, queue_name="exports", interval=300)
# The API tokens' last-used times, recorded in Redis by each request, reach the database.
cron.register(api_tokens_last_used_flush, queue_name="default", interval=60)
