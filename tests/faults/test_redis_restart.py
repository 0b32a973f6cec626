"""Redis restarted (killed, down a few seconds, back empty) while the arena's workers and
its cron scheduler run: they outlive it and resume by themselves; jobs enqueued after
the restart run and the periodic jobs (the janitor) are enqueued again. Prints the
recovery times (JSON) — informative, not asserted."""

import json
import os
import time

import pytest
import redis
from rq import Queue
from rq.cron import get_cron_job_ids

from tests.faults.probes import labels
from tests.servers import (
    PYTHON,
    ServerProcess,
    child_env,
    ensure_public_arena,
    poll_until,
    wait_for_child_sessions_to_end,
)
from tests.throwaway import throwaway_redis

pytestmark = pytest.mark.django_db(transaction=True)

DOWN_S = 3.0
JANITOR = "battles.jobs.battles_janitor"


def _probe(connection: redis.Redis, queue: str, path, label: str) -> None:
    Queue(queue, connection=connection).enqueue("tests.faults.probes.touch", str(path), label)


# `make soak`: make test keeps the PostgreSQL restart (tests/faults/test_postgres_restart.py).
@pytest.mark.soak
def test_workers_and_scheduler_resume_after_a_redis_restart(sandbox_root, tmp_path):
    ensure_public_arena()
    probe_file = tmp_path / "probes.txt"
    with throwaway_redis() as server:
        env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
        env.update(REDIS_URL=server.url, ARENA_FAULT_CHECK_S="1")
        logs = tmp_path / "logs"
        processes = []
        try:
            processes.append(
                ServerProcess.start(
                    "battles-worker",  # the forking worker class, from settings
                    [PYTHON, "manage.py", "rqworker", "battles"],
                    env,
                    logs,
                )
            )
            judging = [PYTHON, "manage.py", "rqworker", "judging", "ratings", "default",
                       "--worker-class", "arena_site.worker.ArenaSimpleWorker",
                       "--with-scheduler"]  # fmt: skip
            processes.append(ServerProcess.start("judging-worker", judging, env, logs))
            processes.append(
                ServerProcess.start(
                    "scheduler", [PYTHON, "-m", "arena_site.worker", "arena_site.cron"], env, logs
                )
            )
            client = redis.Redis.from_url(server.url)
            # Given workers on both queues and the scheduler at work
            for queue in ("battles", "default"):
                _probe(client, queue, probe_file, f"before-{queue}")
            poll_until(
                lambda: {"before-battles", "before-default"} <= labels(probe_file).keys(),
                timeout=90,
                what="the workers to run a job each",
                processes=processes,
            )
            poll_until(
                lambda: get_cron_job_ids(JANITOR, client),
                timeout=30,
                what="the scheduler to enqueue the janitor",
                processes=processes,
            )

            # When Redis dies and comes back empty a few seconds later
            server.stop()
            time.sleep(DOWN_S)
            assert all(p.alive() for p in processes), "\n".join(p.tail() for p in processes)
            server.start()
            up = time.time()
            client = redis.Redis.from_url(server.url)
            for queue in ("battles", "default"):
                _probe(client, queue, probe_file, f"after-{queue}")

            # Then every process is still there and works again by itself
            ran = poll_until(
                lambda: (
                    (got := labels(probe_file)).keys() >= {"after-battles", "after-default"} and got
                ),
                timeout=60,
                what="the workers to run jobs enqueued after the restart",
                processes=processes,
            )
            poll_until(
                lambda: get_cron_job_ids(JANITOR, client),
                timeout=30,
                what="the scheduler to enqueue the janitor again",
                processes=processes,
            )
            cron_back = time.time()
            janitor_ran = poll_until(
                lambda: any(
                    (job := Queue("default", connection=client).fetch_job(job_id)) is not None
                    and job.get_status() == "finished"
                    for job_id in get_cron_job_ids(JANITOR, client)
                ),
                timeout=30,
                what="a janitor enqueued after the restart to run",
                processes=processes,
            )
            assert janitor_ran
            assert all(p.alive() for p in processes)
            print(
                json.dumps(
                    {
                        "redis_restart": {
                            "down_s": DOWN_S,
                            "battles_worker_recovery_s": round(ran["after-battles"] - up, 3),
                            "default_worker_recovery_s": round(ran["after-default"] - up, 3),
                            "scheduler_recovery_s_at_most": round(cron_back - up, 3),
                            "loadavg": os.getloadavg(),
                        }
                    }
                )
            )
        finally:
            for process in processes:
                process.stop()
            wait_for_child_sessions_to_end()
