"""Reads for judging: what a judge may be served, the judging-quality figures."""

from collections import Counter, defaultdict

from django.conf import settings
from django.db import connection
from django.db.models import Max, QuerySet
from django.urls import reverse

from accounts.models import Membership
from agents.models import Agent, Arena
from battles.models import Battle, Task
from judging import agreement
from judging.models import Assignment, JudgeProfile, Vote
from ratings.selectors import exclusion_counts, self_judged_tally

HISTORY_ROWS = 10
# A judge's first battles (this many served, votes and skips alike) come from web tasks
# when there are any: screens with something to see, not two blank browsers
# (``dangerously_next_battle_for_judge``).
FIRST_BATTLES = 5


def dangerously_battles_open_for_judging() -> QuerySet:
    """Every team's battles awaiting judgment (status judging). Crowd judging crosses
    teams by design; callers must present them blind
    (``battles.presenters.battle_payload(reveal=False)``) and apply the judge's own
    exclusions (``judging.services.serving``)."""
    return Battle.objects.filter(status=Battle.Status.JUDGING)


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _open_for() -> str:
    """SQL conditions on an open battle ``b`` (status judging) that this judge may be
    served: no live vote of theirs, not voided for them, no agent entered by a team of
    theirs (SPEC §5.1)."""
    return f"""b.status = '{Battle.Status.JUDGING.value}'
          AND NOT EXISTS (SELECT 1 FROM {_table(Vote)} v
            WHERE v.battle_id = b.id AND v.judge_id = %s AND NOT v.retracted)
          AND NOT EXISTS (SELECT 1 FROM {_table(Assignment)} x
            WHERE x.battle_id = b.id AND x.judge_id = %s
              AND x.voided_at IS NOT NULL)
          AND NOT EXISTS (SELECT 1 FROM {_table(Membership)} m JOIN {_table(Agent)} g
              ON g.team_id = m.team_id
            WHERE m.user_id = %s AND g.id IN (b.agent_a_id, b.agent_b_id))"""  # noqa: S608 (names from models)


def _own() -> str:
    return f"""EXISTS (SELECT 1 FROM {_table(Membership)} o
            WHERE o.user_id = %s AND o.team_id = b.team_id)"""  # noqa: S608 (names from models)


def _web_task() -> str:
    """SQL: the task of battle ``b`` is a web task: it opens on a web page (a start URL
    that is not a blank ``about:`` page) or its instruction names a web address. The
    task's submitter writes both, the same for both sides, before any agent acts:
    nothing an agent does moves its battle in the order."""
    return f"""EXISTS (SELECT 1 FROM {_table(Task)} t
            WHERE t.id = b.task_id AND ((t.start_url <> ''
              AND t.start_url NOT LIKE 'about:%%')
              OR t.instruction LIKE '%%http://%%' OR t.instruction LIKE '%%https://%%'))"""  # noqa: S608 (names from models)


def _newcomer() -> str:
    """SQL: the judge was served fewer than FIRST_BATTLES battles (a one-time condition:
    the browsing branch is not even walked for anyone else)."""
    return f"""(SELECT COUNT(*) FROM (SELECT 1 FROM {_table(Assignment)} n
            WHERE n.judge_id = %s LIMIT {FIRST_BATTLES}) AS served) < {FIRST_BATTLES}"""  # noqa: S608 (names from models)


def dangerously_next_battle_id_for_judge(*, judge_id: int) -> int | None:
    """The id of the battle to serve this judge now (see
    ``dangerously_next_battle_for_judge``)."""
    found = dangerously_next_battle_for_judge(judge_id=judge_id)
    return found[0] if found else None


def dangerously_next_battle_for_judge(*, judge_id: int) -> tuple[int, bool] | None:
    """(id, held) of the battle to serve this judge now, in the order of
    ``judging.services.serving.judge_next``: a battle they hold (served, no live vote,
    not voided) first; then other teams' battles before their own team's; among those,
    for a judge served fewer than FIRST_BATTLES battles, web tasks first
    (``_web_task``); then fewest admissible votes (``Battle.admissible_votes``), then
    oldest (ended_at), then id. Crosses teams by design (crowd judging): the caller
    presents it blind.

    Written in SQL (like ``judging.vote_db``): the held battle, a newcomer's next other
    team's web task, and the next other team's battle in one round trip, each
    branch an early-stopping walk (the judge's own assignments; the partial index
    battle_judging_queue in serving order; the newcomer's branch is gated by a one-time
    count of at most FIRST_BATTLES rows), and the own team's battles only when nothing
    else is left. ``held`` is True when the judge already holds it (their assignment
    exists: serving it again writes nothing)."""
    first = f"CASE WHEN {_newcomer()} AND {_web_task()} THEN 0 ELSE 1 END"
    held = f"""
        SELECT 0 AS tier, id FROM (SELECT b.id FROM {_table(Battle)} b
        WHERE b.id IN (SELECT a.battle_id FROM {_table(Assignment)} a
            WHERE a.judge_id = %s AND a.voided_at IS NULL)
          AND {_open_for()}
        ORDER BY CASE WHEN {_own()} THEN 1 ELSE 0 END, {first},
          b.admissible_votes, b.ended_at, b.id
        LIMIT 1) AS held"""  # noqa: S608 (names from models)
    browsing = f"""
        SELECT 1 AS tier, id FROM (SELECT b.id FROM {_table(Battle)} b
        WHERE {_newcomer()} AND {_open_for()} AND NOT {_own()} AND {_web_task()}
        ORDER BY b.admissible_votes, b.ended_at, b.id
        LIMIT 1) AS browsing"""  # noqa: S608 (names from models)
    others = f"""
        SELECT 2 AS tier, id FROM (SELECT b.id FROM {_table(Battle)} b
        WHERE {_open_for()} AND NOT {_own()}
        ORDER BY b.admissible_votes, b.ended_at, b.id
        LIMIT 1) AS others"""  # noqa: S608 (names from models)
    own = f"""
        SELECT b.id FROM {_table(Battle)} b
        WHERE {_open_for()} AND {_own()}
        ORDER BY {first}, b.admissible_votes, b.ended_at, b.id
        LIMIT 1"""  # noqa: S608 (names from models)
    with connection.cursor() as cursor:
        tiers = f"{held} UNION ALL {browsing} UNION ALL {others}"
        cursor.execute(tiers, [judge_id] * tiers.count("%s"))
        found = dict(cursor.fetchall())
        if found:
            tier = min(found)
            return found[tier], tier == 0
        cursor.execute(own, [judge_id] * own.count("%s"))
        row = cursor.fetchone()
    return (row[0], False) if row else None


def landing_url(user) -> str:
    """Where a person lands after logging in (or accepting the consent terms) when no page
    asked for them: the page of what they did last. Judged more recently than they
    submitted a task: the judge page; submitted more recently: the submit page. Neither
    yet: a member of a team that entered an agent sees their agents, anyone else (a new
    crowd judge) the judge page."""
    served = Assignment.objects.filter(judge=user).aggregate(last=Max("served_at"))["last"]
    submitted = (
        Task.objects.filter(submitter=user)
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    if submitted is not None and (served is None or submitted > served):
        return reverse("battles:submit")
    if served is None and Agent.objects.filter(team__memberships__user=user).exists():
        return reverse("battles:agents-status")
    return reverse("judging:judge")


def judging_quality(arena: Arena) -> dict:
    """The staff judging-quality page: agreement on the redundancy sample (Fleiss' κ,
    pairwise), each judge's trust, standing (probation, approval) and record, the
    exclusion counts and the self-judged tally of the arena."""
    votes = list(
        Vote.objects.filter(battle__arena=arena)
        .select_related("battle", "judge")
        .order_by("-voted_at", "-pk")
    )
    for v in votes:
        v.read_s = (v.voted_at - v.served_at).total_seconds()
    redundant = [
        v for v in votes if v.battle.redundancy_target > 1 and not v.retracted and v.admissible
    ]
    table = agreement.rating_table((v.battle_id, v.choice) for v in redundant)
    outcomes = {v.battle_id: v.battle.outcome for v in redundant}
    with_consensus = agreement.agreement_with_consensus(
        ((v.judge_id, v.battle_id, v.choice) for v in redundant), outcomes
    )
    by_judge: dict[int, list[Vote]] = defaultdict(list)
    for v in votes:
        by_judge[v.judge_id].append(v)
    profiles = {p.user_id: p for p in JudgeProfile.objects.filter(user_id__in=list(by_judge))}
    judges = []
    for judge_id, cast in by_judge.items():
        live = [v for v in cast if not v.retracted]
        admissible = [v for v in live if v.admissible]
        profile = profiles.get(judge_id)
        agreed, compared = with_consensus.get(judge_id, (0, 0))
        judges.append(
            {
                "user": cast[0].judge,
                "trust": profile.trust if profile else settings.ARENA.trust_new,
                "untrusted": bool(profile and profile.is_untrusted),
                "trust_agree": getattr(profile, "agree_count", None),
                "trust_seen": getattr(profile, "seen_count", None),
                "probation": profile is None or profile.on_probation,
                "approved": bool(profile and profile.approved_at),
                "cast": len(cast),
                "retracted": len(cast) - len(live),
                "admissible_share": len(admissible) / len(live) if live else None,
                "reasons": sorted(
                    Counter(v.inadmissible_reason for v in live if not v.admissible).items()
                ),
                "agreed": agreed,
                "compared": compared,
                "history": cast[:HISTORY_ROWS],
            }
        )
    judges.sort(key=lambda j: (-j["cast"], j["user"].username))
    rated = [row for row in table if sum(row) >= 2]
    return {
        "arena": arena,
        "judges": judges,
        "kappa": agreement.fleiss_kappa(table),
        "pairwise": agreement.pairwise_agreement(table),
        "sample_battles": len(rated),
        "sample_votes": sum(sum(row) for row in rated),
        "redundancy_battles": Battle.objects.filter(arena=arena, redundancy_target__gt=1).count(),
        "exclusions": [
            (Battle.ExclusionReason(reason).label, reason, n)
            for reason, n in exclusion_counts(arena_id=arena.pk).items()
        ],
        "self_judged": self_judged_tally(arena_id=arena.pk),
        "recent": votes[:25],
        "probation_votes": settings.ARENA.probation_votes,
        "approval_required": settings.ARENA.judge_approval,
        "vote_count": len(votes),
    }
