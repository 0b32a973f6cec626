"""Names as entrants write them (docs/leak-scan.md, "Matching"): punctuated display names
found exactly and split or joined differently, the parts of a name that identify on
their own, the entrant team's name, and the disguises a person still reads: small
capitals and other Latin letter forms, leetspeak, reversed text. Redaction blanks what
the scan finds. Then a real battle row signed with a punctuated name: excluded at
screening, never served to a judge."""

import pytest

from accounts.models import Team
from agents.identity import LeakScanner, is_distinctive, name_phrases
from agents.models import Agent, Arena
from battles.models import Battle
from judging.services import battle_screen, judge_next
from tests.judging import leak_corpus
from tests.judging.battle_factories import ended_battle
from tests.judging.leak_factories import note_of

SCREENING = Battle.Status.SCREENING


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("GPT-4o (OpenAI)", "I am GPT-4o (OpenAI)."),
        ("GPT-4o (OpenAI)", "signed gpt4o openai"),
        ("GPT-4o (OpenAI)", "signed GPT 4o OpenAI"),
        ("GPT-4o (OpenAI)", "signed gpt_4o_(open-ai)"),
        ("Claude 3.5 Sonnet [new]", "Answer by Claude 3.5 Sonnet [new]"),
        ("Claude 3.5 Sonnet [new]", "Answer by claude35sonnetnew"),
        ("O'Brien Bot", "Regards, O'Brien Bot"),
        ("O'Brien Bot", "Regards, OBrien-Bot"),
        ('The "Quoted" Bot', 'by The "Quoted" Bot'),
        ("Smith & Jones <AI>", "by Smith & Jones <AI>"),
        ("x=y Solver", "by x=y Solver."),
        ("DeepSeek-V3", "by Deep Seek V3"),
        ("Qwen2.5 Coder 32B", "by qwen 2.5 coder 32b"),
    ],
)
def test_punctuated_names_match_exactly_and_split_or_joined(name, text):
    assert LeakScanner([name]).first(text) == (name, text)


@pytest.mark.parametrize(
    ("name", "phrases"),
    [
        ("GPT-4o (OpenAI)", {"GPT-4o (OpenAI)", "GPT-4o", "OpenAI"}),
        (
            "Claude 3.5 Sonnet [new]",
            {"Claude 3.5 Sonnet [new]", "Claude 3.5 Sonnet", "Claude 3.5", "Claude Sonnet", "new"},
        ),
        ("Acme Agent (acme-labs)", {"Acme Agent (acme-labs)", "Acme Agent", "acme-labs"}),
        ("Gemini 2.0 Flash", {"Gemini 2.0 Flash", "Gemini 2.0", "Gemini Flash"}),
        ("O'Brien Bot", {"O'Brien Bot"}),
        ("Sonnet under scaffold", {"Sonnet under scaffold"}),  # no word written as a name
        ("Harbor Point Robotics", {"Harbor Point Robotics", "Harbor Point", "Point Robotics"}),
    ],
)
def test_the_parts_of_a_name_that_identify_on_their_own(name, phrases):
    assert name_phrases(name) == phrases


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Acme Agent finished.", True),
        ("see acme-labs/tools", True),
        ("Powered by Gemini Flash", True),
        ("Gemini 2.0 was used", True),
        ("Gemini is a zodiac sign", False),  # one word of a longer name: not alone
        ("the ACME protocol renews certificates", False),
        ("a USB 2.0 flash drive", False),  # a version and a tier word
        ("a sonnet and a new poem", False),
    ],
)
def test_sub_phrases_are_found_and_single_ordinary_words_are_not(text, found):
    scanner = LeakScanner(["Acme Agent (acme-labs)", "Gemini 2.0 Flash", "Claude 3.5 Sonnet [new]"])
    assert (scanner.first(text) is not None) is found, text


@pytest.mark.parametrize(
    ("attack", "text"),
    [
        ("small capitals", "ᴄʟᴀᴜᴅᴇ here"),
        ("small capitals, whole name", "ɢᴇᴍɪɴɪ 2.0 ꜰʟᴀꜱʜ"),
        ("letters with a stroke", "Cłaude"),
        ("dotless i", "Gemını Flash"),
        ("leet digits", "C14ud3 here"),
        ("leet digits, whole name", "G3m1n1 2.0 Fl45h"),
        ("leet symbols", "cl@ude here"),
        ("leet symbols, first letter", "(|@ude here"),
        ("reversed", "edualC here"),
        ("reversed sentence", "ereh ma I edualC"),
        ("reversed name with a version", "hsalF 0.2 inimeG"),
        ("reversed and small capitals", "ᴇᴅᴜᴀʟᴄ"),
    ],
)
def test_letter_forms_leetspeak_and_reversed_text_are_read(attack, text):
    assert LeakScanner(["Claude", "Gemini 2.0 Flash"]).first(text) is not None, attack


@pytest.mark.parametrize(
    "text",
    [
        "gpt-ao is not it",  # a digit in an identity matches only itself
        "gpt-4 and gpt-400",
        "claude-3-6-sonnet",
        "Claudette 3.5",
    ],
)
def test_digits_in_an_identity_still_match_only_themselves(text):
    scanner = LeakScanner(["gpt-4o", "claude-3-5-sonnet", "Claude 3.5"])
    assert scanner.first(text) is None, text


def test_a_digit_in_an_identity_matches_itself_and_its_confusables():
    scanner = LeakScanner(["gpt-4o", "o3-mini"])
    assert scanner.first("running gpt-4o") is not None
    assert scanner.first("running o3-mini") is not None
    assert scanner.first("running 03-m1n1") is not None  # leet letters, digit 3 itself
    assert scanner.first("running o8-mini") is None


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("x edualC y", "x # y"),
        ("C14ud3 said", "# said"),
        ("ᴄʟᴀᴜᴅᴇ!", "#!"),
        ("I am GPT-4o (OpenAI).", "I am #)."),
        ("by O'Brien Bot, ok", "by #, ok"),
    ],
)
def test_redaction_blanks_what_the_new_rules_find(text, redacted):
    scanner = LeakScanner(["Claude", "GPT-4o (OpenAI)", "O'Brien Bot"])
    assert scanner.redact(text, "#") == redacted


def test_redaction_leaves_nothing_the_scan_finds_in_the_corpus():
    identities = ["Rulebook", "Surveyor", "Idle baseline"]
    for display_name, slug, model_id, aliases, team in leak_corpus.ROSTER:
        identities += [s for s in (display_name, slug, model_id, *aliases, team) if s]
    scanner = LeakScanner(identities)

    left = [t for _, _, t in leak_corpus.leaks() if scanner.first(scanner.redact(t, "#"))]

    assert left == []


@pytest.mark.parametrize(
    ("team", "distinctive"),
    [("Kestrel Works", True), ("Research", False), ("Labs", False), ("AI", False)],
)
def test_a_team_name_that_is_an_ordinary_word_is_not_looked_for(team, distinctive):
    assert is_distinctive(team) is distinctive
    assert (LeakScanner([team]).first(f"Notes from {team}.") is not None) is distinctive


# --- the roster as stored ------------------------------------------------------------


def test_the_entrant_teams_name_is_an_identity_and_the_arenas_agents_have_none(roster):
    team = Team.objects.create(name="Kestrel Works")
    agent = Agent.objects.create(
        arena=Arena.objects.public(),
        slug="obrien-bot",
        display_name="O'Brien Bot",
        kind=Agent.Kind.SCAFFOLD,
        model_id="openai/gpt-4o-mini",
        team=team,
    )

    assert agent.identity_strings() == [
        "O'Brien Bot",
        "obrien-bot",
        "openai/gpt-4o-mini",
        "Kestrel Works",
    ]
    assert Agent.objects.get(slug="rulebook").identity_strings() == ["Rulebook", "rulebook"]


@pytest.fixture
def gpt(roster):
    return Agent.objects.create(
        arena=Arena.objects.public(),
        slug="gpt-4o-openai",
        display_name="GPT-4o (OpenAI)",
        kind=Agent.Kind.SCAFFOLD,
        provider="openai",
        model_id="openai/gpt-4o-2024-08-06",
        team=Team.objects.create(name="Kestrel Works"),
    )


def test_a_final_message_signed_with_a_punctuated_name_is_never_served(
    alice, judge, gpt, api, client
):
    battle = ended_battle(
        alice,
        status=SCREENING,
        a=gpt.slug,
        messages=("The total is 42.\n\n— GPT-4o (OpenAI)", "I was unable to do it."),
    )

    assert battle_screen(battle_id=battle.pk) == "named_model"

    battle.refresh_from_db()
    assert battle.status == Battle.Status.EXCLUDED
    assert note_of(battle).startswith("side A final message names 'GPT-4o (OpenAI)': …")
    assert judge_next(judge=judge) is None
    assert api(judge).get("/api/judge/next/").status_code == 204
    assert api(judge).get(f"/api/battles/{battle.pk}/").status_code == 404


def test_a_final_message_signed_with_the_team_name_is_excluded(alice, gpt):
    battle = ended_battle(
        alice, status=SCREENING, b=gpt.slug, messages=("42", "Made by the Kestrel Works crew.")
    )

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side B final message names 'Kestrel Works': …")
