"""The instructions' redaction ahead runs on a queue of its own (arena_site/cron.py)."""

from battles.jobs import battles_janitor
from exports.jobs import instructions_redact_ahead


def cron_jobs() -> list:
    import django_rq
    from rq.cron import CronScheduler

    scheduler = CronScheduler(connection=django_rq.get_connection("exports"))
    scheduler.load_config_from_file("arena_site.cron")
    return scheduler.get_jobs()


def test_the_redaction_ahead_is_on_the_exports_queue_never_beside_the_janitors(settings):
    """A worker runs one job at a time: a redaction run (up to 200 instructions through
    Presidio, ~0.4 s each: up to ~80 s) on `default` held every janitor behind it
    (battles_janitor, every 5 s, was 7.8 s late behind an 8.5 s run in the vote soak).
    It has the `exports` queue, which its own worker serves (scripts/run_arena.py)."""
    jobs = cron_jobs()
    (job,) = [j for j in jobs if j.func is instructions_redact_ahead]
    assert (job.queue_name, job.interval) == ("exports", 300)
    assert "exports" in settings.RQ_QUEUES
    on_default = [j.func for j in jobs if j.queue_name == "default"]
    assert battles_janitor in on_default
    assert instructions_redact_ahead not in on_default
    # nothing else shares the redaction's queue
    assert [j.func for j in jobs if j.queue_name == "exports"] == [instructions_redact_ahead]
