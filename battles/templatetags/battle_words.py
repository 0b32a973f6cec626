"""Template filters that put a battle's codes into words (battles.verdict)."""

from django import template

from battles import verdict

register = template.Library()


@register.filter
def end_reason_words(reason: str) -> str:
    """``delivered`` → "finished and delivered its answer"; unknown codes unchanged."""
    return verdict.end_reason_words(reason or "")


@register.simple_tag
def battle_verdict(battle) -> verdict.Verdict:
    """``{% battle_verdict battle as v %}``: where the battle stands, in words."""
    return verdict.battle_verdict(battle)
