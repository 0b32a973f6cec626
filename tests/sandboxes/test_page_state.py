"""The page a desktop sandbox's browser shows (``Sandbox.page_state``): read for real
from Chromium in a bubblewrap sandbox, bounded when the sandbox answers nonsense (it
is untrusted), and stored by the lane after every desktop step for judges and the
identity-leak scan (SPEC §5.1)."""

import shutil
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import DockerBackend
from sandboxes.local import PAGE_TITLE_MAX_CHARS
from sandboxes.local_backend import LocalBackend
from tests.sandboxes.fake_engine import FakeEngine, FakeSupervisor

PAGE = "data:text/html,<title>Arena%20page%20title</title><h1>Hello</h1>"


@pytest.fixture(scope="module")
def desktop():
    root = Path(tempfile.mkdtemp(prefix="arena-test-page-", dir="/var/tmp"))
    root.chmod(0o711)
    backend = LocalBackend(root, uid_base=settings.ARENA.sandbox_uid_base)
    box = backend.provision(SandboxSpec(run_id=3, shell_timeout_s=5, start_url=PAGE), slot=6)
    yield box
    box.destroy()
    shutil.rmtree(root, ignore_errors=True)


def test_the_page_state_is_the_browsers_url_and_title(desktop):
    assert desktop.page_state() == {"url": PAGE, "title": "Arena page title"}

    assert desktop.navigate("about:blank").ok

    assert desktop.page_state() == {"url": "about:blank", "title": ""}


def test_a_shell_only_sandbox_has_no_page(sandbox_root):
    spec = SandboxSpec(run_id=4, desktop=False, memory_mb=256, pids=64)
    box = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base).provision(spec)
    try:
        assert box.page_state() is None
    finally:
        box.destroy()


class NonsenseSupervisor(FakeSupervisor):
    """Answers the state request as a hostile sandbox might."""

    def answer(self, request):
        if request.get("op") == "state":
            return {"ok": True, "url": ["not", "a", "string"], "title": "T" * 100_000}
        return super().answer(request)


class SilentSupervisor(FakeSupervisor):
    def answer(self, request):
        if request.get("op") == "state":
            return {"ok": False, "error": "busy"}
        return super().answer(request)


@pytest.mark.parametrize(
    ("supervisor", "page"),
    [
        (FakeSupervisor, {"url": "about:blank", "title": ""}),
        (NonsenseSupervisor, {"url": "", "title": "T" * PAGE_TITLE_MAX_CHARS}),
        (SilentSupervisor, {"url": "", "title": ""}),
    ],
)
def test_the_docker_backend_bounds_what_the_sandbox_answers(sandbox_root, supervisor, page):
    registry: dict = {}
    image = "agent-arena-desktop:test"
    with FakeEngine(
        sandbox_root / "engine.sock", images={image}, on_start=supervisor.on_start(registry)
    ) as engine:
        backend = DockerBackend(
            image, sandbox_root, settings.ARENA.sandbox_uid_base, client_factory=engine.client
        )
        box = backend.provision(SandboxSpec(run_id=5, width=64, height=48), slot=1)
        try:
            assert box.page_state() == page
        finally:
            box.destroy()
            backend.close()


@pytest.mark.django_db(transaction=True)  # lanes run in threads with their own connections
def test_the_lane_stores_the_page_after_every_desktop_step(alice, roster):
    import random

    from agents.models import Agent
    from battles.models import Battle, Run, Step
    from battles.services import battle_run, task_submit

    battle = task_submit(user=alice, instruction="what is 6*7", rng=random.Random(0))
    a, b = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="surveyor")
    Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
    Run.objects.filter(battle=battle, side="A").update(agent=a)
    Run.objects.filter(battle=battle, side="B").update(agent=b)

    battle_run(battle_id=battle.pk)

    steps = list(Step.objects.filter(run__battle=battle))
    assert steps and all(step.screenshot for step in steps)
    assert {str(step.result.get("page")) for step in steps} == {
        str({"url": "about:blank", "title": ""})
    }
