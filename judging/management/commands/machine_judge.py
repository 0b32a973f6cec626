"""``manage.py machine_judge``: the arena's machine judge on battles that have no
verdict of it yet (a backfill: battles judged before it was turned on, or whose job was
lost), and ``--report``: the human–machine agreement table per judge model and task
category (docs/evaluations.md, "Machine judges on live battles")."""

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from agents.models import Arena
from arena_site import strict_json
from battles.models import Battle
from judging.machine_reads import machine_agreement
from judging.services.machine import (
    JUDGEABLE,
    arena_machine_methods,
    battle_machine_judge,
    battles_machine_judge_pending,
)

SCOPES = {
    "all": JUDGEABLE,
    "decided": (Battle.Status.DECIDED,),
    "open": (Battle.Status.JUDGING,),
}


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def agreement_lines(report: dict) -> list[str]:
    """The agreement report as a plain-text table, one block per judge model and method."""
    lines = []
    for judge in report["judges"]:
        lines.append(f"{judge['judge_model']} · {judge['method']}")
        lines.append(f"  {'tasks':<16} {'n':>5} {'agreement':>10} {'kappa':>7}")
        for label, cell in [
            ("all", judge["overall"]),
            *((c["label"], c) for c in judge["categories"]),
        ]:
            lines.append(
                f"  {label:<16} {cell['n']:>5} {_number(cell['agreement']):>10} "
                f"{_number(cell['kappa']):>7}"
            )
        machine = report["machine_outcomes"]
        lines.append("  people \\ machine " + " ".join(f"{m:>5}" for m in machine))
        for human, cells in judge["overall"]["confusion"].items():
            lines.append(f"  {human:<17}" + " ".join(f"{cells[m]:>5}" for m in machine))
    return lines or ["No battle decided by people has a machine verdict yet."]


class Command(BaseCommand):
    help = (
        "Run the arena's machine judge on battles that have no verdict of it yet, or "
        "(--report) print the human–machine agreement per judge model and task category."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--arena", default="public", help="The arena's slug.")
        parser.add_argument(
            "--battles",
            choices=sorted(SCOPES),
            default="all",
            help="Which battles: decided ones, open ones (being judged) or both (all).",
        )
        parser.add_argument("--limit", type=int, default=None, help="At most this many.")
        parser.add_argument(
            "--report", action="store_true", help="Print the agreement table; judge nothing."
        )
        parser.add_argument("--json", action="store_true", help="The report as JSON.")

    def handle(self, *args, **options) -> None:
        arena = Arena.objects.select_related("machine_judge").filter(slug=options["arena"]).first()
        if arena is None:
            known = ", ".join(Arena.objects.order_by("slug").values_list("slug", flat=True))
            raise CommandError(f"No arena {options['arena']!r} (arenas: {known}).")
        if options["report"]:
            report = machine_agreement(arena_id=arena.pk)
            if options["json"]:
                self.stdout.write(strict_json.dumps({"arena": arena.slug, **report}, indent=2))
            else:
                self.stdout.write("\n".join(agreement_lines(report)))
            return
        if arena.machine_judge is None:
            raise CommandError(
                f"Arena {arena.slug} has no machine judge: set one in the admin "
                "(Arenas → machine judge) first."
            )
        pending = battles_machine_judge_pending(arena=arena, statuses=SCOPES[options["battles"]])
        ids = list(pending.values_list("pk", flat=True)[: options["limit"]])
        methods = ", ".join(arena_machine_methods(arena))
        self.stderr.write(
            f"{len(ids)} battle(s) to judge with {arena.machine_judge.model_id} ({methods})"
        )
        tally: dict[str, int] = {}
        for battle_id in tqdm(ids, unit="battle", file=self.stderr, disable=not ids):
            for verdict in battle_machine_judge(battle_id=battle_id):
                tally[verdict.status] = tally.get(verdict.status, 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(tally.items())) or "none"
        self.stdout.write(f"verdicts stored: {summary}")
        if tally.get("failed"):
            raise CommandError(f"{tally['failed']} verdict(s) failed; see the admin for why.")
