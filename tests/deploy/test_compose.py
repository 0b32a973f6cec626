"""deploy/compose.yaml and the app image's parts, checked without bringing the stack up
(`make deploy-check` does that, on the real engine, in minutes).

1. The compose file as docker-compose reads it (``docker-compose config``): every part
   from the one image, each command a role of its entry point, read-only root file
   systems, nothing privileged, the Docker socket in the battle host only, one published
   port (the proxy's, on loopback unless told otherwise), every queue served, the web's
   replicas and health check, the proxy's fixed address trusted and out of the engine's
   range.
2. The settings (deploy/config.env) and the generated secrets (``arena secrets``):
   known, non-secret and secret names in their places, accepted by the arena's settings
   in a fresh interpreter, URLs made from the passwords they go with.
3. The battle host's supervisor (arena_site/hostrun.py) with real children: a drained
   worker's exit, a crash, and a stop signal.
4. ``manage.py media_bucket`` against a real S3 server (SeaweedFS)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest
import yaml
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils.module_loading import import_string

from arena_site import hostrun
from arena_site.envfile import env_file
from tests.deploy.test_kubernetes_manifests import (
    SECRET_VARIABLES,
    default_queue_not_alone,
    known_variables,
)
from tests.makerun import make_run_queue_workers
from tests.s3_server import s3_server  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ENTRY = DEPLOY / "image" / "arena"
# Read by the entry point's service roles only (deploy/image/arena), never by the arena.
SERVICE_SECRETS = {"POSTGRES_PASSWORD", "ARENA_DB_PASSWORD", "REDIS_PASSWORD"}
ALLOWED_CAPABILITIES = {"CHOWN", "DAC_OVERRIDE", "FOWNER"}


def env_lines(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def roles() -> set[str]:
    """The roles the entry point's `case` names."""
    return set(re.findall(r"^([a-z][a-z0-9-]*)\)$", ENTRY.read_text(), re.MULTILINE))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (scripts/docker.sh install)")
    secrets_file = tmp_path_factory.mktemp("compose") / "arena.env"
    secrets_file.write_text(env_file())
    environ = {"PATH": os.environ["PATH"], "ARENA_ENV_FILE": str(secrets_file)}
    done = subprocess.run(
        ["docker-compose", "-f", str(DEPLOY / "compose.yaml"), "config"],
        cwd=DEPLOY, env=environ, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_every_part_runs_a_role_of_the_one_image_read_only_and_unprivileged(rendered):
    services = rendered["services"]
    assert set(services) == {
        "postgres", "redis", "s3", "migrate", "web", "proxy", "battle-host", "worker",
        "janitors", "exports", "decider", "cron",
    }  # fmt: skip
    for name, service in services.items():
        assert service["image"] == "agent-arena:latest", name
        (role,) = service["command"]
        assert role in roles(), name
        assert service["read_only"] is True, name
        assert not service.get("privileged"), name
        assert set(service.get("cap_add", [])) <= ALLOWED_CAPABILITIES, name
        assert "/tmp" in str(service.get("tmpfs")), name
        sockets = [v for v in service.get("volumes", []) if "docker.sock" in str(v)]
        assert bool(sockets) == (name == "battle-host"), name
        assert bool(service.get("ports")) == (name == "proxy"), name
        # every process of the arena sees the settings and the secrets, the same for all
        env = service.get("environment", {})
        for variable in ("ARENA_SECRET_KEY", "DATABASE_URL", "ARENA_SANDBOX_BACKEND"):
            assert variable in env, (name, variable)
    assert services["battle-host"]["cap_drop"] == ["ALL"]
    assert services["battle-host"]["environment"]["ARENA_DOCKER_REMOTE"] == "true"
    (port,) = services["proxy"]["ports"]
    if isinstance(port, str):  # docker-compose 1.29 renders the short form
        host_ip, _published, target = port.removesuffix("/tcp").split(":")
        port = {"host_ip": host_ip, "target": int(target)}
    assert port["host_ip"] == "127.0.0.1" and port["target"] == 8080


def test_the_web_is_replicated_health_checked_and_behind_a_trusted_proxy(rendered):
    services = rendered["services"]
    web = services["web"]
    assert web["scale"] == 2
    assert web["healthcheck"]["test"][-1].endswith("/readyz")
    assert services["proxy"]["depends_on"]["web"]["condition"] == "service_healthy"
    for name in ("web", "battle-host", "worker", "janitors", "exports", "decider", "cron"):
        after = services[name]["depends_on"]
        assert after["migrate"]["condition"] == "service_completed_successfully", name
        assert {"postgres", "redis", "s3"} <= set(after), name  # stopped after them
    address = ip_address(services["proxy"]["networks"]["arena"]["ipv4_address"])
    (pool,) = rendered["networks"]["arena"]["ipam"]["config"]
    assert address in ip_network(pool["subnet"]) and address not in ip_network(pool["ip_range"])
    trusted = env_lines((DEPLOY / "config.env").read_text())["ARENA_TRUSTED_PROXIES"]
    assert trusted == f"{address}/32"
    caddyfile = (DEPLOY / "Caddyfile").read_text()
    hidden = re.search(r"@internal path (.+)\n\s*respond @internal 404", caddyfile)
    assert hidden and {"/readyz", "/metrics/prometheus"} <= set(hidden.group(1).split())
    assert "flush_interval -1" in caddyfile


def test_the_decider_is_a_role_of_its_own_that_scales(rendered):
    decider = rendered["services"]["decider"]
    assert decider["scale"] == 1  # ARENA_DECIDER_REPLICAS: they share the due battles
    entry = ENTRY.read_text()
    assert re.search(r"^decider\)\n\s+exec python manage.py decide \"\$@\" ;;", entry, re.M)
    from judging.management.commands.decide import Command  # the role's command exists

    assert "undo windows" in Command.help


def role_commands() -> dict[str, list[str]]:
    """Each rq worker role of the entry point: the words of its command after `manage.py`
    (its continuation lines joined, without the trailing "$@" ;;)."""
    found: dict[str, list[str]] = {}
    role, body = None, ""
    for line in ENTRY.read_text().splitlines():
        if match := re.fullmatch(r"([a-z][a-z0-9-]*)\)", line):
            role, body = match.group(1), ""
        elif role is not None:
            body += line.removesuffix("\\") + " "
            if line.rstrip().endswith(";;"):
                command = body.split()
                if "rqworker" in command:
                    found[role] = command[command.index("manage.py") + 1 : command.index('"$@"')]
                role = None
    return found


def test_every_queue_is_served_by_a_role():
    entry = ENTRY.read_text()
    served = set()
    for command in role_commands().values():
        served |= {word for word in command[1:] if not word.startswith("-") and "." not in word}
        import_string(command[command.index("--worker-class") + 1])
    for command in hostrun.commands({"ARENA_BATTLE_SLOTS": "2"}):
        served |= {word for word in command[3:] if not word.startswith("-") and "." not in word}
        if "--worker-class" in command:
            import_string(command[command.index("--worker-class") + 1])
    assert served == set(settings.RQ_QUEUES)
    assert "arena_site.cron" in entry and "--with-scheduler" in entry


def test_the_janitors_role_serves_the_default_queue_alone(rendered):
    """RQ takes a worker's queues in strict order: the default queue's janitors have a
    worker of their own (the `janitors` role and service), never behind judging and
    ratings; RQ's scheduler stays on the worker of the ratings queue, whose delayed board
    pushes it moves (a worker's scheduler handles its own queues only). The roles run the
    commands `make run` runs (scripts/run_arena.py)."""
    commands = role_commands()
    assert set(commands) == {"worker", "janitors", "exports"}
    queues = {role: [w for w in cmd[1:] if w.isalpha()] for role, cmd in commands.items()}
    assert not default_queue_not_alone(list(queues.values())), queues
    assert queues["worker"] == ["judging", "ratings"] and queues["janitors"] == ["default"]
    assert [role for role, cmd in commands.items() if "--with-scheduler" in cmd] == ["worker"]
    made = make_run_queue_workers()
    assert commands["worker"] == made["judging/ratings worker"]
    assert commands["janitors"] == made["janitors worker"]
    services = rendered["services"]
    assert services["janitors"]["command"] == ["janitors"]
    assert services["janitors"].get("scale", 1) == 1


def test_the_exports_role_serves_the_exports_queue_alone(rendered):
    """A worker runs one job at a time: the instructions' redaction ahead (up to 200
    instructions through Presidio, ~80 s a run) is on the `exports` queue, with a worker
    of its own (the `exports` role and service), never ahead of the janitors (on their
    worker battles_janitor, every 5 s, was 7.8 s late behind an 8.5 s run). The role runs
    the command `make run` runs (scripts/run_arena.py)."""
    commands = role_commands()
    queues = {role: [w for w in cmd[1:] if w.isalpha()] for role, cmd in commands.items()}
    assert not default_queue_not_alone(list(queues.values()), "exports"), queues
    assert queues == {"worker": ["judging", "ratings"], "janitors": ["default"],
                      "exports": ["exports"]}  # fmt: skip
    assert "--with-scheduler" not in commands["exports"]
    made = make_run_queue_workers()
    assert commands == {"worker": made["judging/ratings worker"],
                        "janitors": made["janitors worker"],
                        "exports": made["exports worker"]}  # fmt: skip
    services = rendered["services"]
    assert services["exports"]["command"] == ["exports"]
    assert services["exports"].get("scale", 1) == 1


def test_the_settings_and_the_generated_secrets_are_what_the_arena_reads(tmp_path):
    config = env_lines((DEPLOY / "config.env").read_text())
    generated = env_lines(env_file())
    assert set(config) <= known_variables(), set(config) - known_variables()
    assert not set(config) & (SECRET_VARIABLES | SERVICE_SECRETS)
    assert set(generated) == SECRET_VARIABLES | SERVICE_SECRETS
    # the URLs carry the passwords the services are started with
    assert f":{generated['ARENA_DB_PASSWORD']}@postgres:5432/arena" in generated["DATABASE_URL"]
    assert f":{generated['REDIS_PASSWORD']}@redis:6379/" in generated["REDIS_URL"]
    Fernet(generated["ARENA_KEY_ENCRYPTION_KEY"].encode())
    again = env_lines(env_file())
    assert all(again[name] != generated[name] for name in SECRET_VARIABLES | SERVICE_SECRETS
               if name != "ARENA_MEDIA_S3_ACCESS_KEY_ID") and again != generated  # fmt: skip
    # settings.py starts on both files in a fresh interpreter
    environ = {"PATH": os.environ["PATH"], **config, **generated, "ARENA_DATA_DIR": str(tmp_path)}
    environ["DJANGO_SETTINGS_MODULE"] = "arena_site.settings"  # (the image's ENV)
    probe = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.ARENA.sandbox_backend, s.MEDIA_S3_BUCKET, s.DATABASES['default']['HOST'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["docker", config["ARENA_MEDIA_S3_BUCKET"], "postgres"]


def test_the_entry_point_refuses_a_service_without_its_secret_and_runs_any_command(tmp_path):
    assert subprocess.run(["sh", "-n", str(ENTRY)]).returncode == 0
    environ = {"PATH": os.environ["PATH"], "ARENA_APP_DIR": str(tmp_path)}
    for role, variable in [("redis", "REDIS_PASSWORD"), ("postgres", "POSTGRES_PASSWORD"),
                           ("s3", "ARENA_MEDIA_S3_ACCESS_KEY_ID")]:  # fmt: skip
        done = subprocess.run(["sh", str(ENTRY), role], env=environ, capture_output=True, text=True)
        assert done.returncode == 2, (role, done.stderr)
        assert f"arena {role}: {variable} is not set" in done.stderr
    done = subprocess.run(["sh", str(ENTRY), "pwd"], env=environ, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == str(tmp_path)


def test_make_deploy_refuses_an_engine_it_cannot_mount_with_a_message():
    environ = {"PATH": os.environ["PATH"], "DOCKER_HOST": "tcp://docker.example:2376"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "deploy_up.sh")], env=environ, capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert "the battle host mounts a unix socket" in done.stderr


# --- the battle host's supervisor, with real children --------------------------------


def test_hostrun_starts_a_battle_worker_per_slot_and_the_evaluations_worker():
    commands = hostrun.commands({"ARENA_BATTLE_SLOTS": "3"})
    assert [c[3] for c in commands] == ["battles", "battles", "battles", "evals"]
    assert commands[0][-1] == "battles.worker.BattleWorker"
    pooled = hostrun.commands({"ARENA_BATTLE_SLOTS": "1", "ARENA_SANDBOX_POOL_SIZE": "2"})
    assert pooled[0][-1] == "battles.worker.PooledBattleWorker"
    assert len(hostrun.commands({"ARENA_EVALS_WORKER": "false"})) == 2
    with pytest.raises(SystemExit, match="at least 1"):
        hostrun.commands({"ARENA_BATTLE_SLOTS": "0"})


def child(code: str, *tags: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *tags]


SLEEPER = "import time\nwhile True: time.sleep(0.1)"


def test_a_drained_battle_worker_leaves_the_rest_running_until_every_one_has_stopped():
    started = time.monotonic()
    code = hostrun.run(
        [
            child("import time; time.sleep(0.5)", "battles"),
            child("import time; time.sleep(2.0)", "battles"),
            child(SLEEPER, "evals"),
        ],
        grace_s=5,
    )
    assert code == 0
    assert time.monotonic() - started >= 2.0  # not at the first worker's exit


def test_a_crashed_child_stops_the_host_with_its_code_and_stops_the_others(tmp_path):
    marker, ready = tmp_path / "stopped", tmp_path / "ready"
    on_term = f"""
        import signal, sys, time
        def stop(*_):
            open({str(marker)!r}, "w").close()
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        open({str(ready)!r}, "w").close()
        while True: time.sleep(0.1)
    """
    # (the crash waits for the survivor to be listening: a busy machine starts Python slowly)
    crash = f"""
        import os, sys, time
        while not os.path.exists({str(ready)!r}): time.sleep(0.05)
        sys.exit(3)
    """
    code = hostrun.run([child(crash, "evals"), child(on_term, "battles")], 5)
    assert code == 3
    assert marker.exists()  # the survivor was told to stop, and stopped


def test_a_stop_signal_reaches_every_child_and_one_that_ignores_it_is_killed(tmp_path):
    ready = tmp_path / "ignoring"
    ignorer = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(ready)!r}, 'w').close()\n" + SLEEPER
    )
    script = textwrap.dedent(f"""
        import sys
        from arena_site import hostrun
        argv = [[sys.executable, "-c", {SLEEPER!r}, "battles"],
                [sys.executable, "-c", {ignorer!r}, "evals"]]
        sys.exit(hostrun.run(argv, grace_s=1.0))
    """)
    host = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    deadline = time.monotonic() + 20
    children: list[Path] = []
    while len(children) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        children = [
            p for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == host.pid
        ]
    assert len(children) == 2
    while not ready.exists() and time.monotonic() < deadline:  # the ignorer ignores now
        time.sleep(0.05)
    assert ready.exists()
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=15) == 0
    for proc in children:
        assert not proc.exists() or _state(proc) == "Z"


def _parent(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _state(proc: Path) -> str:
    try:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


# --- manage.py media_bucket on a real S3 server ---------------------------------------


@pytest.fixture
def bucket_settings(settings, s3_server):  # noqa: F811
    bucket = f"media-{uuid.uuid4().hex[:12]}"
    settings.MEDIA_S3_BUCKET = bucket
    settings.STORAGES = {
        **settings.STORAGES,
        "private": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {**s3_server.storage_options("arena"), "bucket_name": bucket},
        },
    }
    return bucket


def test_media_bucket_makes_a_missing_bucket_only_when_asked(bucket_settings, s3_server, capsys):  # noqa: F811
    with pytest.raises(CommandError, match=re.escape("does not exist (--create makes it)")):
        call_command("media_bucket", "--wait", "5")
    call_command("media_bucket", "--create", "--wait", "20")
    assert "created" in capsys.readouterr().out
    call_command("media_bucket")  # there now: checked, written, read, deleted
    assert "reachable, writable" in capsys.readouterr().out
    listed = s3_server.client().list_objects_v2(Bucket=bucket_settings).get("KeyCount", 0)
    assert listed == 0  # the probe left nothing


def test_media_bucket_names_bad_keys_at_once(bucket_settings, settings):
    options = settings.STORAGES["private"]["OPTIONS"]
    settings.STORAGES = {
        **settings.STORAGES,
        "private": {**settings.STORAGES["private"], "OPTIONS": {**options, "secret_key": "wrong"}},
    }
    started = time.monotonic()
    with pytest.raises(CommandError, match="check the media keys"):
        call_command("media_bucket", "--create", "--wait", "30")
    assert time.monotonic() - started < 10  # refused, not waited out


def test_media_bucket_has_nothing_to_do_for_media_in_a_directory(settings, capsys):
    settings.MEDIA_S3_BUCKET = ""
    call_command("media_bucket")
    assert "no bucket" in capsys.readouterr().out
