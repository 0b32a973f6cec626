"""The vote benchmarks' data (tests/bench/bench_votes.py, bench_vote_path.py, bench_push.py,
bench_vote_soak.py): judges with tokens and consent, a submitting team, the roster and
battles being judged, each served to one judge. No environment is set here: each
benchmark sets its own before Django starts."""

from datetime import timedelta


def vote_battles(battles_n: int, *, judges_n: int) -> tuple[list[tuple[str, int]], list[str]]:
    """Judges with tokens and consent, a submitting team, the roster, and ``battles_n``
    battles judging, each served a minute ago to one judge (round robin). Bulk inserts:
    tens of thousands in seconds. Returns ([(token, battle id)], tokens)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.services import (
        api_token_create,
        consent_accept,
        consent_terms_publish,
        team_create,
    )
    from agents.services import roster_install_builtins
    from battles.models import Battle, Task
    from judging.models import Assignment
    from tests.servers import ensure_public_arena

    User = get_user_model()
    terms = consent_terms_publish(text="bench")
    submitter = User.objects.create_user("bench-submitter", password="bench-password-1")
    team = team_create(name="bench-acme", owner=submitter)
    consent_accept(user=submitter, terms=terms)
    judges, tokens = [], []
    for i in range(judges_n):
        judge = User.objects.create_user(f"bench-judge-{i}", password="bench-password-1")
        consent_accept(user=judge, terms=terms)
        judges.append(judge)
        tokens.append(api_token_create(user=judge, name="bench")[1])
    arena = ensure_public_arena()
    roster = roster_install_builtins(arena=arena)
    now = timezone.now()
    tasks = Task.objects.bulk_create(
        Task(team=team, submitter=submitter, instruction=f"bench task {i}")
        for i in range(battles_n)
    )
    size = len(roster)

    def pair(i: int) -> tuple:  # every pair of distinct agents in turn
        return roster[i % size], roster[(i + 1 + (i // size) % (size - 1)) % size]

    battles = Battle.objects.bulk_create(
        Battle(
            arena=arena, team=team, task=task, agent_a=pair(i)[0], agent_b=pair(i)[1],
            status=Battle.Status.JUDGING, redundancy_target=1,
            submitted_at=now - timedelta(minutes=10), ended_at=now - timedelta(minutes=2),
        )
        for i, task in enumerate(tasks)
    )  # fmt: skip
    Assignment.objects.bulk_create(
        Assignment(judge=judges[i % judges_n], battle=battle, served_at=now - timedelta(minutes=1))
        for i, battle in enumerate(battles)
    )
    return [(tokens[i % judges_n], battle.pk) for i, battle in enumerate(battles)], tokens
