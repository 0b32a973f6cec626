"""The ordering contract of ``judge_next`` written as the queryset it was before issue
#13 (a count of admissible votes over every open battle): the reference the order test
and the reads benchmark compare the served battle with. Held first, own team last,
for a judge served fewer than FIRST_BATTLES battles web tasks (a start page, or a web
address in the instruction),
fewest admissible votes, oldest, id; never a battle with a live vote of theirs, voided
for them or with an agent of their team."""

from django.db.models import Case, Count, Exists, IntegerField, OuterRef, Q, QuerySet, Value, When

from accounts.models import Membership
from judging.models import Assignment, Vote
from judging.selectors import FIRST_BATTLES, dangerously_battles_open_for_judging


def reference_candidates(judge) -> QuerySet:
    team_ids = list(Membership.objects.filter(user=judge).values_list("team_id", flat=True))
    live = Vote.objects.filter(battle=OuterRef("pk"), judge=judge, retracted=False)
    voided = Assignment.objects.filter(battle=OuterRef("pk"), judge=judge, voided_at__isnull=False)
    held = Assignment.objects.filter(battle=OuterRef("pk"), judge=judge, voided_at=None)
    newcomer = Assignment.objects.filter(judge=judge).count() < FIRST_BATTLES
    on_a_page = (
        (~Q(task__start_url="") & ~Q(task__start_url__startswith="about:"))
        | Q(task__instruction__contains="http://")
        | Q(task__instruction__contains="https://")
    )
    return (
        dangerously_battles_open_for_judging()
        .filter(~Exists(live), ~Exists(voided))
        .exclude(agent_a__team_id__in=team_ids)
        .exclude(agent_b__team_id__in=team_ids)
        .annotate(
            held=Exists(held),
            own=Case(
                When(team_id__in=team_ids, then=Value(1)),
                default=Value(0),
                output_field=IntegerField(),
            ),
            first=Case(
                When(on_a_page, then=Value(0 if newcomer else 1)),
                default=Value(1),
                output_field=IntegerField(),
            ),
            n_votes=Count(
                "votes", filter=Q(votes__retracted=False, votes__admissible=True), distinct=True
            ),
        )
        .order_by("-held", "own", "first", "n_votes", "ended_at", "pk")
    )
