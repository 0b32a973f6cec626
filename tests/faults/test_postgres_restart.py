"""PostgreSQL restarted (immediate shutdown: every connection cut) under a long-lived
judging/ratings worker: the worker drops its dead connection before the next job, so
every job after the restart succeeds without restarting the worker, and a job that ran
while the database was down waits for it and is retried — nothing is lost."""

import json
import os
import subprocess
import time

import psycopg
from rq import Queue
from rq.exceptions import InvalidJobOperation
from rq.job import JobStatus

from tests.servers import PYTHON, ROOT, ServerProcess, child_env, poll_until, rq_connection
from tests.throwaway import throwaway_postgres

DOWN_S = 3.0
QUEUES = ("judging", "ratings", "default")


def _rows(url: str) -> set[str]:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return {row[0] for row in conn.execute("SELECT label FROM fault_probe")}
    except psycopg.Error:
        return set()


def _finished(job) -> bool:
    try:
        return job.get_status(refresh=True) == JobStatus.FINISHED
    except InvalidJobOperation:  # its hash is gone: not finished by this worker
        return False


def test_the_worker_recovers_from_a_postgres_restart_and_loses_nothing(sandbox_root, tmp_path):
    with throwaway_postgres() as server:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE arena")
        url = server.url("arena")
        env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
        env["DATABASE_URL"] = url
        subprocess.run(
            [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT, env=env, check=True, timeout=300,
        )  # fmt: skip
        worker = ServerProcess.start(
            "judging-worker",
            [PYTHON, "manage.py", "rqworker", *QUEUES,
             "--worker-class", "arena_site.worker.ArenaSimpleWorker"],
            env,
            tmp_path / "logs",
        )  # fmt: skip
        try:
            queue = Queue("judging", connection=rq_connection())
            ratings = Queue("ratings", connection=rq_connection())
            # Given a worker that has done database work (its connection is open)
            before = queue.enqueue("tests.faults.probes.db_touch", "before")
            refit = ratings.enqueue("ratings.jobs.ratings_refit")
            poll_until(
                lambda: _finished(before) and _finished(refit),
                timeout=90,
                what="the first jobs",
                processes=[worker],
            )

            # When PostgreSQL goes down, a job arrives meanwhile, and it comes back
            server.stop()
            during = queue.enqueue("tests.faults.probes.db_touch", "during")
            time.sleep(DOWN_S)
            server.start()
            up = time.monotonic()

            # Then the job of the outage is retried, and every job after it succeeds
            after = [queue.enqueue("tests.faults.probes.db_touch", f"after-{i}") for i in range(5)]
            after.append(ratings.enqueue("ratings.jobs.ratings_refit"))
            poll_until(
                lambda: all(_finished(job) for job in (during, *after)),
                timeout=90,
                what="every job after the restart to succeed",
                processes=[worker],
            )
            recovered_s = time.monotonic() - up
            assert _rows(url) == {"before", "during", *(f"after-{i}" for i in range(5))}
            for name in QUEUES:
                assert Queue(name, connection=rq_connection()).failed_job_registry.count == 0
            assert worker.alive()
            print(
                json.dumps(
                    {
                        "postgres_restart": {
                            "down_s": DOWN_S,
                            "all_jobs_done_after_s": round(recovered_s, 3),
                            "loadavg": os.getloadavg(),
                        }
                    }
                )
            )
        finally:
            worker.stop()
