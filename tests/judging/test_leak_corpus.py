"""The identity-leak scan measured on a labelled corpus (tests/judging/leak_corpus.py,
docs/leak-scan.md "Measured on a corpus"): a realistic roster, entered in the database
as the arena holds it, scanned by the screening's own scanner; at least 99 % of the
disguised names found and at most 1 % of the innocent texts flagged."""

import pytest

from accounts.models import Team
from agents.models import Agent, Arena
from judging.services.screening import battle_leak_scanner
from tests.judging import leak_corpus


@pytest.fixture
def corpus_roster(roster):
    arena = Arena.objects.public()
    for display_name, slug, model_id, aliases, team in leak_corpus.ROSTER:
        Agent.objects.create(
            arena=arena,
            slug=slug,
            display_name=display_name,
            kind=Agent.Kind.SCAFFOLD,
            model_id=model_id,
            aliases=aliases,
            team=Team.objects.create(name=team) if team else None,
        )


def test_the_corpus_is_large_enough_and_labelled_apart():
    leaks, innocent = leak_corpus.leaks(), leak_corpus.innocent()

    assert len(leaks) >= 300 and len(innocent) >= 300
    assert not {text for _, _, text in leaks} & set(innocent)
    assert {label for label, _, _ in leaks} >= set(leak_corpus.DISGUISES)


def test_recall_and_false_positive_rate_on_the_corpus(corpus_roster, record_property):
    scanner = battle_leak_scanner()
    leaks, innocent = leak_corpus.leaks(), leak_corpus.innocent()

    missed = [(label, name, text) for label, name, text in leaks if scanner.first(text) is None]
    flagged = [(text, scanner.first(text)) for text in innocent if scanner.first(text)]

    recall = 1 - len(missed) / len(leaks)
    false_positive_rate = len(flagged) / len(innocent)
    figures = (
        f"leak corpus: recall {recall:.4f} ({len(leaks) - len(missed)}/{len(leaks)}), "
        f"false-positive rate {false_positive_rate:.4f} ({len(flagged)}/{len(innocent)})"
    )
    print(figures)
    record_property("leak_recall", round(recall, 4))
    record_property("leak_false_positive_rate", round(false_positive_rate, 4))
    assert recall >= 0.99, (figures, missed)
    assert false_positive_rate <= 0.01, (figures, flagged)


def test_every_named_phrase_is_found_written_exactly(corpus_roster):
    """The rule's list (written by hand) and the scan agree phrase by phrase."""
    scanner = battle_leak_scanner()

    assert [name for name in leak_corpus.NAMED if scanner.first(f"({name})") is None] == []
