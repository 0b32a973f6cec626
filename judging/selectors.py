"""Reads for judging: what a judge may be served, the judging-quality figures."""

from collections import Counter, defaultdict

from django.conf import settings
from django.db.models import QuerySet

from agents.models import Arena
from battles.models import Battle
from judging import agreement
from judging.models import JudgeProfile, Vote
from ratings.selectors import exclusion_counts, self_judged_tally

HISTORY_ROWS = 10


def dangerously_battles_open_for_judging() -> QuerySet:
    """Every team's battles awaiting judgment (status judging). Crowd judging crosses
    teams by design; callers must present them blind
    (``battles.presenters.battle_payload(reveal=False)``) and apply the judge's own
    exclusions (``judging.services.serving``)."""
    return Battle.objects.filter(status=Battle.Status.JUDGING)


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
