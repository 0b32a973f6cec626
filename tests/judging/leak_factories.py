"""What a lane leaves on disk for the leak scan to read, placed straight into a battle
made by ``battle_factories.ended_battle``: delivered files, step screenshots, the page
a step left; and the note the scan wrote."""

from django.conf import settings

from battles.models import Battle, Step
from judging.models import ExclusionLogEntry


def note_of(battle: Battle) -> str:
    return ExclusionLogEntry.objects.get(battle=battle).note


def with_page(battle: Battle, side: str, url: str, title: str) -> Step:
    """The side's only step left the browser on ``url`` titled ``title``."""
    step = battle.runs.get(side=side).steps.get()
    step.result = {**step.result, "page": {"url": url, "title": title}}
    step.save(update_fields=["result"])
    return step


def deliver(battle: Battle, side: str, name: str, data: bytes) -> None:
    """Stores ``data`` as the side's delivered file, where the lane puts it."""
    run = battle.runs.get(side=side)
    folder = settings.PRIVATE_MEDIA_ROOT / "deliveries" / f"run-{run.pk}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    run.delivered_files = [*run.delivered_files, {"name": name, "size": len(data), "sha256": ""}]
    run.save(update_fields=["delivered_files"])


def screenshot(battle: Battle, side: str, index: int, data: bytes) -> None:
    """Stores ``data`` as the screenshot after step ``index`` of ``side``, as the lane
    does (the step is created when missing)."""
    run = battle.runs.get(side=side)
    relative = f"screens/run-{run.pk}/step-{index}.png"
    path = settings.PRIVATE_MEDIA_ROOT / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    step = run.steps.filter(index=index).first()
    if step is None:
        template = run.steps.first()
        step = Step.objects.create(
            run=run,
            index=index,
            tool="screenshot",
            args={},
            result={"ok": True},
            started_at=template.started_at,
            duration_ms=5,
        )
    Step.objects.filter(pk=step.pk).update(screenshot=relative)
