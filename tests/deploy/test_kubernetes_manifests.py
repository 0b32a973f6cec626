"""The Kubernetes manifests of deploy/kubernetes/, checked offline (no cluster runs here).

1. Every document of every manifest validates against the Kubernetes OpenAPI schemas
   that the locked ``kubernetes-validate`` package bundles, strictly (an unknown or
   misspelled field is an error), for each pinned version below.
2. The arena's own invariants, in plain Python: probes and replicas of the web, resource
   requests everywhere, nothing privileged and no host path, every variable a name the
   arena reads, the ConfigMap accepted by the arena's settings, the Secrets placeholders
   only, the kustomization listing every manifest but the Secret templates, the commands
   naming queues and classes that exist.

Both kinds of check are also fed broken documents, which they must refuse."""

import copy
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings
from django.utils.module_loading import import_string
from kubernetes_validate.utils import all_versions

from arena_site import secret as arena_secret
from arena_site.config import ArenaConfig
from tests.makerun import make_run_queue_workers

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
# The oldest Kubernetes minor the manifests are meant for, and the newest schema the
# locked kubernetes-validate bundles (1.37.0). Both are asserted to be bundled: for a
# version it does not have, the package silently validates against an older one.
KUBERNETES_VERSIONS = ("1.33.0", "1.37.0")
# Not Kubernetes resources: checked below by other means.
KUSTOMIZATION = "kustomization.yaml"
# Placeholders only, never applied by the kustomization (docs/deployment.md).
SECRET_TEMPLATES = ("secret.yaml", "secret-docker-tls.yaml")
SECRET_ENV_EXAMPLE = MANIFESTS / "arena-secrets.env.example"
PLACEHOLDER = "REPLACE_ME"
IMAGE = "agent-arena:VERSION"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")
# What a container of the arena may add to a dropped-ALL set (the root battle worker's
# file capabilities: battle-worker.yaml); nothing that reaches beyond its own files.
ALLOWED_CAPABILITIES = {"CHOWN", "DAC_OVERRIDE", "FOWNER"}
# Variables the arena does not define but reads through its libraries, or that shape
# the Python process: Django's settings module, docker-py's engine client
# (docs/sandboxes.md, "Remote engines"), BLAS threads (scripts/run_arena.py).
EXTERNAL_VARIABLES = {
    "DJANGO_SETTINGS_MODULE",
    "DOCKER_HOST",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    "DOCKER_API_VERSION",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
}
# The secrets among the arena's variables: in the Secret, never in the ConfigMap.
SECRET_VARIABLES = {
    "ARENA_SECRET_KEY",
    "ARENA_KEY_ENCRYPTION_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "ARENA_MEDIA_S3_ACCESS_KEY_ID",
    "ARENA_MEDIA_S3_SECRET_ACCESS_KEY",
    "ARENA_METRICS_TOKEN",
}
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
ARENA_NAME = re.compile(r"\b(ARENA_[A-Z0-9_]+)\b")
# How settings.py and secret.py read a variable: env_str("NAME", …), os.environ.get("NAME")…
READ_IN_SOURCE = re.compile(
    r"(?:env_[a-z_]+|os\.environ\.get|environ\.get)\(\s*\"([A-Z][A-Z0-9_]+)\""
)


# --- loading ------------------------------------------------------------------------


def manifest_files() -> list[Path]:
    return sorted(p for p in MANIFESTS.glob("*.yaml") if p.name != KUSTOMIZATION)


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def all_documents() -> list[dict]:
    return [doc for path in manifest_files() for doc in documents(path)]


def of_kind(kind: str) -> list[dict]:
    return [doc for doc in all_documents() if doc["kind"] == kind]


def one(kind: str, name: str) -> dict:
    (doc,) = [d for d in of_kind(kind) if d["metadata"]["name"] == name]
    return doc


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def containers(doc: dict) -> list[dict]:
    spec = pod_spec(doc)
    return [*spec.get("initContainers", []), *spec["containers"]]


def workloads() -> list[dict]:
    return [doc for doc in all_documents() if doc["kind"] in WORKLOAD_KINDS]


def known_variables() -> set[str]:
    """Every variable the arena reads: ArenaConfig's knobs (read from the class, not
    listed here), the ones settings.py and secret.py read (found in their source; a
    secret read by env_secret also as NAME_FILE), and the libraries' above."""
    names = {f.metadata["env"] for f in dataclasses.fields(ArenaConfig) if f.metadata["env"]}
    for module in ("settings.py", "secret.py"):
        source = (ROOT / "arena_site" / module).read_text()
        names |= set(READ_IN_SOURCE.findall(source))
        names |= {f"{n}_FILE" for n in re.findall(r"env_secret\(\"([A-Z0-9_]+)\"\)", source)}
    names |= {arena_secret.ENV_NAME, arena_secret.KEK_ENV_NAME}
    return names | EXTERNAL_VARIABLES


# --- the checks (each returns what is wrong, in words) -------------------------------


def schema_problem(doc: dict, version: str) -> str | None:
    """Why ``doc`` does not validate against Kubernetes ``version``, strictly; None if it
    does. A kind or apiVersion the schemas do not know is a problem too."""
    try:
        validated = kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(part) for part in exc.path)
        return f"{doc['kind']}/{doc['metadata']['name']}: {where}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError as exc:
        return exc.message
    expected = ".".join(version.split(".")[:2])
    if validated != expected:
        return f"validated against {validated}, not {expected}"
    return None


def workload_problems(doc: dict, known: set[str]) -> list[str]:
    name = f"{doc['kind']}/{doc['metadata']['name']}"
    problems = []
    spec = pod_spec(doc)
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            problems.append(f"{name}: {key}")
    for volume in spec.get("volumes", []):
        if "hostPath" in volume:
            problems.append(f"{name}: volume {volume['name']} is a hostPath")
    if spec.get("automountServiceAccountToken") is not False:
        problems.append(f"{name}: mounts a service account token it does not need")
    for container in containers(doc):
        where = f"{name} container {container['name']}"
        if container.get("image") != IMAGE:
            problems.append(f"{where}: image {container.get('image')!r}, not {IMAGE!r}")
        context = container.get("securityContext", {})
        if context.get("privileged") is not False:
            problems.append(f"{where}: not explicitly unprivileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allows privilege escalation")
        capabilities = context.get("capabilities", {})
        if capabilities.get("drop") != ["ALL"]:
            problems.append(f"{where}: does not drop every capability")
        if extra := set(capabilities.get("add", [])) - ALLOWED_CAPABILITIES:
            problems.append(f"{where}: adds capabilities {sorted(extra)}")
        resources = container.get("resources", {})
        for bound, needed in (("requests", ("cpu", "memory")), ("limits", ("memory",))):
            for resource in needed:
                value = resources.get(bound, {}).get(resource)
                if value is None:
                    problems.append(f"{where}: no {bound}.{resource}")
                elif not QUANTITY.match(str(value)):
                    problems.append(f"{where}: {bound}.{resource} {value!r} is no quantity")
        for variable in container.get("env", []):
            if variable["name"] not in known:
                problems.append(f"{where}: env {variable['name']} is read by nothing")
        command = " ".join(container.get("command", []) + container.get("args", []))
        for variable in ARENA_NAME.findall(command):
            if variable not in known:
                problems.append(f"{where}: its command sets {variable}, read by nothing")
        for mount in container.get("volumeMounts", []):
            if "docker.sock" in mount["mountPath"]:
                problems.append(f"{where}: mounts a Docker socket")
    return problems


def web_problems(deployment: dict) -> list[str]:
    problems = []
    if deployment["spec"].get("replicas", 1) < 2:
        problems.append("the web runs fewer than 2 replicas")
    (web,) = pod_spec(deployment)["containers"]
    ports = {port.get("name") for port in web.get("ports", [])}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = web.get(probe, {}).get("httpGet", {})
        if get.get("path") != path:
            problems.append(f"{probe} is not an HTTP GET of {path}")
        if get.get("port") not in ports:
            problems.append(f"{probe} probes port {get.get('port')!r}, not one the web opens")
    return problems


def secret_problems(doc: dict) -> list[str]:
    name = doc["metadata"]["name"]
    problems = [f"Secret {name}: has `data` (base64 hides what it holds)"] if "data" in doc else []
    for key, value in doc.get("stringData", {}).items():
        if not str(value).startswith(PLACEHOLDER):
            problems.append(f"Secret {name}: {key} is not a {PLACEHOLDER} placeholder")
    return problems


# --- 1. the schemas -----------------------------------------------------------------


def test_the_pinned_versions_are_bundled():
    bundled = all_versions()
    for version in KUBERNETES_VERSIONS:
        assert version in bundled, f"kubernetes-validate bundles {bundled}, not {version}"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_validates_strictly(path, version):
    docs = documents(path)
    assert docs, f"{path.name} holds no document"
    problems = [p for doc in docs if (p := schema_problem(doc, version))]
    assert not problems, "\n".join(problems)


def _web() -> dict:
    return copy.deepcopy(one("Deployment", "arena-web"))


def _misspelled_probe(doc):
    web = pod_spec(doc)["containers"][0]
    web["livenesProbe"] = web.pop("livenessProbe")


def _unknown_spec_field(doc):
    doc["spec"]["replica"] = doc["spec"].pop("replicas")


def _replicas_a_word(doc):
    doc["spec"]["replicas"] = "two"


def _env_without_name(doc):
    pod_spec(doc)["containers"][0]["env"] = [{"value": "1"}]


def _probe_port_a_list(doc):
    pod_spec(doc)["containers"][0]["readinessProbe"]["httpGet"]["port"] = [8000]


def _old_api_version(doc):
    doc["apiVersion"] = "extensions/v1beta1"  # Deployments left it in 1.16


@pytest.mark.parametrize(
    "breakage",
    [
        _misspelled_probe,
        _unknown_spec_field,
        _replicas_a_word,
        _env_without_name,
        _probe_port_a_list,
        _old_api_version,
    ],
)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_a_broken_document_fails_validation(breakage, version):
    doc = _web()
    assert schema_problem(doc, version) is None
    breakage(doc)
    assert schema_problem(doc, version) is not None


# --- 2. the arena's invariants ------------------------------------------------------


def test_every_workload_is_unprivileged_bounded_and_reads_known_variables():
    known = known_variables()
    assert {"ARENA_HOST_DEAD_AFTER_S", "ARENA_METRICS_TOKEN", "REDIS_URL"} <= known
    found = workloads()
    assert {doc["kind"] for doc in found} >= {"Deployment", "StatefulSet", "Job"}
    problems = [p for doc in found for p in workload_problems(doc, known)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda spec: spec["containers"][0]["securityContext"].update(privileged=True),
        lambda spec: spec["containers"][0]["securityContext"].pop("privileged"),
        lambda spec: spec["volumes"].append({"name": "h", "hostPath": {"path": "/var/run"}}),
        lambda spec: spec.update(hostNetwork=True),
        lambda spec: spec["containers"][0]["securityContext"]["capabilities"].update(
            add=["SYS_ADMIN"]
        ),
        lambda spec: spec["containers"][0]["resources"].pop("requests"),
        lambda spec: spec["containers"][0]["resources"]["requests"].update(cpu="lots"),
        lambda spec: spec["containers"][0].update(env=[{"name": "ARENA_NO_SUCH_KNOB"}]),
        lambda spec: spec["containers"][0].update(image="agent-arena:latest"),
    ],
    ids=[
        "privileged",
        "privileged-unsaid",
        "hostPath",
        "hostNetwork",
        "SYS_ADMIN",
        "no-requests",
        "bad-quantity",
        "unknown-variable",
        "other-image",
    ],
)
def test_a_broken_workload_fails_the_invariants(breakage):
    doc = _web()
    known = known_variables()
    assert workload_problems(doc, known) == []
    breakage(pod_spec(doc))
    assert workload_problems(doc, known)


def test_the_web_is_probed_replicated_guarded_and_served():
    deployment = one("Deployment", "arena-web")
    assert web_problems(deployment) == []
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (budget,) = of_kind("PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (service,) = of_kind("Service")
    assert service["spec"]["selector"].items() <= labels.items()
    (ingress,) = of_kind("Ingress")
    backends = [
        path["backend"]["service"]
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    ]
    service_ports = {port["name"] for port in service["spec"]["ports"]}
    assert backends and all(
        b["name"] == service["metadata"]["name"] and b["port"]["name"] in service_ports
        for b in backends
    )
    # the web is what `make run` serves HTTP with (scripts/run_arena.py)
    (web,) = pod_spec(deployment)["containers"]
    assert web["command"][:3] == ["python", "-m", "arena_site.webserver"]
    assert web["command"][web["command"].index("--processes") + 1] == "1"


@pytest.mark.parametrize(
    "breakage",
    [
        lambda doc: doc["spec"].update(replicas=1),
        lambda doc: pod_spec(doc)["containers"][0].pop("readinessProbe"),
        lambda doc: pod_spec(doc)["containers"][0]["livenessProbe"]["httpGet"].update(
            path="/readyz"
        ),
        lambda doc: pod_spec(doc)["containers"][0]["livenessProbe"]["httpGet"].update(port=9),
    ],
    ids=["one-replica", "no-readiness", "liveness-on-readyz", "probe-other-port"],
)
def test_a_broken_web_fails_its_checks(breakage):
    doc = _web()
    breakage(doc)
    assert web_problems(doc)


def test_every_reference_names_a_config_or_secret_that_is_defined():
    defined = {(doc["kind"], doc["metadata"]["name"]) for doc in all_documents()}
    namespaces = {doc["metadata"]["name"] for doc in of_kind("Namespace")}
    assert namespaces == {"agent-arena"}
    for doc in all_documents():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "agent-arena", doc["metadata"]["name"]
    for doc in workloads():
        for container in containers(doc):
            for source in container.get("envFrom", []):
                for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if key in source:
                        assert (kind, source[key]["name"]) in defined
        for volume in pod_spec(doc).get("volumes", []):
            if "secret" in volume:
                assert ("Secret", volume["secret"]["secretName"]) in defined


def test_the_config_map_holds_known_non_secret_knobs_the_arena_accepts(tmp_path):
    (config,) = of_kind("ConfigMap")
    data = config["data"]
    assert set(data) <= known_variables(), set(data) - known_variables()
    assert not set(data) & SECRET_VARIABLES
    # ArenaConfig parses and bounds every ARENA_* knob it holds…
    arena = ArenaConfig.from_env(data)
    assert arena.sandbox_backend == "docker" and arena.docker_remote
    # …and the whole settings module starts with them (and stand-ins for the secrets) in
    # a fresh interpreter: every typed helper of settings.py accepts its value.
    stand_ins = {
        "ARENA_SECRET_KEY": "k" * 40 + "0123456789",
        "DATABASE_URL": "postgres://arena:password@127.0.0.1:5432/arena",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "ARENA_KEY_ENCRYPTION_KEY": "A" * 43 + "=",
        "ARENA_MEDIA_S3_ACCESS_KEY_ID": "stand-in",
        "ARENA_MEDIA_S3_SECRET_ACCESS_KEY": "stand-in",
        "ARENA_METRICS_TOKEN": "t" * 32,
    }
    assert set(stand_ins) == SECRET_VARIABLES
    environ = {"PATH": os.environ["PATH"], **data, **stand_ins}
    environ["ARENA_DATA_DIR"] = str(tmp_path)
    probe = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.ARENA.sandbox_backend, s.SECURE_PROXY_SSL_HEADER[0], s.MEDIA_S3_BUCKET)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    bucket = data["ARENA_MEDIA_S3_BUCKET"]
    assert done.stdout.split() == ["docker", "HTTP_X_FORWARDED_PROTO", bucket]


def test_the_secrets_are_templates_of_placeholders_only():
    secrets = of_kind("Secret")
    assert {doc["metadata"]["name"] for doc in secrets} == {"arena-secrets", "arena-docker-tls"}
    problems = [p for doc in secrets for p in secret_problems(doc)]
    assert not problems, "\n".join(problems)
    app = one("Secret", "arena-secrets")
    assert set(app["stringData"]) == SECRET_VARIABLES
    # the env file an operator fills holds the same names, placeholders too
    lines = [
        line
        for line in SECRET_ENV_EXAMPLE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    pairs = dict(line.split("=", 1) for line in lines)
    assert set(pairs) == SECRET_VARIABLES
    assert all(value.startswith(PLACEHOLDER) for value in pairs.values())
    # the engines' client certificate, as docker-py reads it from DOCKER_CERT_PATH
    assert set(one("Secret", "arena-docker-tls")["stringData"]) == {
        "ca.pem",
        "cert.pem",
        "key.pem",
    }


@pytest.mark.parametrize(
    "breakage",
    [
        lambda doc: doc["stringData"].update(DATABASE_URL="postgres://u:hunter2@db/arena"),
        lambda doc: doc.update(data={"REDIS_URL": "cmVkaXM6Ly8="}),
    ],
    ids=["real-value", "base64-data"],
)
def test_a_secret_with_a_value_fails(breakage):
    doc = copy.deepcopy(one("Secret", "arena-secrets"))
    breakage(doc)
    assert secret_problems(doc)


def test_the_kustomization_applies_every_manifest_but_the_secret_templates():
    kustomization = yaml.safe_load((MANIFESTS / KUSTOMIZATION).read_text())
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    expected = {p.name for p in manifest_files()} - set(SECRET_TEMPLATES)
    assert set(listed) == expected
    assert kustomization["images"] == [{"name": "agent-arena", "newTag": "VERSION"}]


def test_the_commands_run_what_the_arena_has():
    commands = {c["name"]: " ".join(c["command"]) for doc in workloads() for c in containers(doc)}
    job = pod_spec(one("Job", "arena-migrate"))["containers"][0]
    assert job["command"][:3] == ["python", "manage.py", "migrate"]
    served = set()
    for name, command in commands.items():
        for dotted in re.findall(r"--worker-class ([\w.]+)", command):
            import_string(dotted)
        if match := re.search(r"rqworker ((?:[a-z]+ ?)+)", command):
            queues = match.group(1).split()
            assert set(queues) <= set(settings.RQ_QUEUES), name
            served |= set(queues)
        if " -m arena_site.worker " in f"{command} ":
            assert importlib.util.find_spec(command.split()[-1]) is not None, name
    # every queue of the arena has a worker, and one of judging/ratings a scheduler
    assert served == set(settings.RQ_QUEUES)
    assert "--with-scheduler" in commands["worker"]
    assert "arena_site.cron" in commands["scheduler"]
    # the votes' decisions: a process of their own, the command the image's role runs
    assert commands["decider"] == "python manage.py decide"
    assert importlib.util.find_spec("judging.management.commands.decide") is not None


def queues_of(commands: dict[str, str]) -> dict[str, list[str]]:
    """The queues each container's rq worker serves, in its order (non-workers left out)."""
    found = {}
    for name, command in commands.items():
        if match := re.search(r"rqworker ((?:[a-z]+ ?)+)", command):
            found[name] = match.group(1).split()
    return found


def default_queue_not_alone(queue_lists: list[list[str]], queue: str = "default") -> bool:
    """Whether a worker serves `queue` (`default`) beside other queues, or none serves it
    alone (RQ takes a worker's queues in strict order: behind judging and ratings the
    janitors waited up to 390 s under a vote flood; and a worker runs one job at a time:
    behind an 8.5 s redaction run of `exports`, battles_janitor was 7.8 s late)."""
    serving = [queues for queues in queue_lists if queue in queues]
    return not serving or any(queues != [queue] for queues in serving)


def test_the_default_queue_has_a_worker_of_its_own_as_make_run_runs_it():
    """The janitors' queue is served by a worker of its own (janitors.yaml), and RQ's
    scheduler runs on the worker of the ratings queue, whose delayed pushes it moves (a
    worker's scheduler handles its own queues only); the same two as `make run`'s."""
    commands = {c["name"]: " ".join(c["command"]) for doc in workloads() for c in containers(doc)}
    served = queues_of(commands)
    assert not default_queue_not_alone(list(served.values())), served
    assert served["janitors"] == ["default"] and served["worker"] == ["judging", "ratings"]
    assert {n for n, c in commands.items() if "--with-scheduler" in c} == {"worker"}
    janitors = one("Deployment", "arena-janitors")
    assert janitors["spec"]["replicas"] == 1
    (container,) = pod_spec(janitors)["containers"]
    assert container["command"] == [
        "python", "manage.py", "rqworker", "default",
        "--worker-class", "arena_site.worker.ArenaSimpleWorker",
    ]  # fmt: skip
    # `make run`: the same workers, the same commands
    made = make_run_queue_workers()
    assert set(made) == {"judging/ratings worker", "janitors worker", "exports worker"}
    (worker,) = pod_spec(one("Deployment", "arena-worker"))["containers"]
    assert made["judging/ratings worker"] == worker["command"][2:]
    assert made["janitors worker"] == container["command"][2:]
    # the check itself: the old single worker, or default beside ratings, fails it
    assert default_queue_not_alone([["judging", "ratings", "default"], ["battles"]])
    assert default_queue_not_alone([["judging"], ["ratings", "default"]])
    assert default_queue_not_alone([["judging", "ratings"]])
    assert not default_queue_not_alone([["judging", "ratings"], ["default"]])


def test_the_exports_queue_has_a_worker_of_its_own_as_make_run_runs_it():
    """The instructions' redaction ahead (exports.jobs.instructions_redact_ahead: up to
    200 instructions through Presidio, ~80 s a run) is on the `exports` queue, served by a
    worker of its own (exports.yaml): a worker runs one job at a time, and on the
    janitors' worker battles_janitor (every 5 s) was 7.8 s late behind an 8.5 s run. No
    scheduler: nothing is scheduled on `exports`. The same command as `make run`'s."""
    commands = {c["name"]: " ".join(c["command"]) for doc in workloads() for c in containers(doc)}
    served = queues_of(commands)
    assert not default_queue_not_alone(list(served.values()), "exports"), served
    assert served["exports"] == ["exports"] and served["janitors"] == ["default"]
    exports = one("Deployment", "arena-exports")
    assert exports["spec"]["replicas"] == 1
    (container,) = pod_spec(exports)["containers"]
    assert container["command"] == [
        "python", "manage.py", "rqworker", "exports",
        "--worker-class", "arena_site.worker.ArenaSimpleWorker",
    ]  # fmt: skip
    assert "--with-scheduler" not in container["command"]
    assert make_run_queue_workers()["exports worker"] == container["command"][2:]
    # the check itself: exports beside default (the janitors) fails it
    assert default_queue_not_alone([["judging", "ratings"], ["default", "exports"]], "exports")
    assert default_queue_not_alone([["default"]], "exports")
    assert not default_queue_not_alone([["default"], ["exports"]], "exports")


def test_the_battle_workers_reach_their_docker_engine_over_tls():
    statefulset = one("StatefulSet", "arena-battle-worker")
    spec = pod_spec(statefulset)
    secret_mounts = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert spec.get("shareProcessNamespace") is True  # the janitor sees both workers' pids
    for container in spec["containers"]:
        env = {v["name"]: v for v in container["env"]}
        assert re.fullmatch(r"tcp://[\w.-]+:2376", env["DOCKER_HOST"]["value"])
        assert env["DOCKER_TLS_VERIFY"]["value"] == "1"
        assert env["ARENA_HOST_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        cert_mount = mounts[env["DOCKER_CERT_PATH"]["value"]]
        assert cert_mount["readOnly"] is True
        assert secret_mounts[cert_mount["name"]] == "arena-docker-tls"
