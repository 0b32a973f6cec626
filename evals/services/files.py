"""Suites and rubrics stored for a team: parsed and checked (``evals.suites``), kept
with their bytes, once per SHA-256."""

from accounts.models import Team
from arena_site.exceptions import ApplicationError
from evals import suites
from evals.models import Rubric, Suite


def suite_store(*, team: Team, name: str, data: bytes) -> Suite:
    """The team's suite of these bytes (parsed and checked; stored once per hash).
    Raises ``ApplicationError`` with the parser's message naming file, task and field."""
    try:
        parsed = suites.parse_suite(data, name=name)
    except suites.SuiteError as error:
        raise ApplicationError(str(error), code="invalid_suite") from None
    tasks = [
        {
            "id": t.id,
            "kind": t.kind,
            "prompt": t.prompt,
            "reference": t.reference,
            "expected": t.expected,
            "meta": t.meta,
            "start_url": t.start_url,
            "attachments": list(t.attachments),
            "success_cmd": t.success_cmd,
        }
        for t in parsed.tasks
    ]
    suite, _ = Suite.objects.get_or_create(
        team=team,
        sha256=parsed.sha256,
        defaults={"name": name, "source": data, "tasks": tasks},
    )
    return suite


def rubric_store(*, team: Team, name: str, data: bytes) -> Rubric:
    try:
        parsed = suites.parse_rubric(data, name=name)
    except suites.SuiteError as error:
        raise ApplicationError(str(error), code="invalid_rubric") from None
    criteria = [
        {"name": c.name, "description": c.description, "scale": c.scale, "weight": c.weight}
        for c in parsed.criteria
    ]
    rubric, _ = Rubric.objects.get_or_create(
        team=team,
        sha256=parsed.sha256,
        defaults={"name": name, "source": data, "criteria": criteria},
    )
    return rubric
