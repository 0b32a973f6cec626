"""Reads for judging."""

from django.db.models import QuerySet

from battles.models import Battle


def dangerously_battles_open_for_judging() -> QuerySet:
    """Every team's battles awaiting judgment. Crowd judging crosses teams by design;
    callers must present them blind (``battles.presenters.battle_payload(reveal=False)``)."""
    return Battle.objects.filter(status=Battle.Status.JUDGING)
