"""SPEC §5.1: judge-visible text that names a roster agent excludes the battle
(named_model); ordinary words and near misses do not. The scanner itself (pure):
folding (NFKC, invisibles, combining marks, confusables, case), spread-out letters,
display order behind a right-to-left override, percent-decoding, and redaction of
exactly the original characters.

Each attack case also shows that a plain scan misses it (``plain_scan``: whole-token,
case-insensitive matching of the raw text, the scanner as it was before folding), so
the case fails without the defence it tests."""

import re

import pytest

from agents.identity import LeakScanner, identity_variants, is_distinctive
from agents.models import Agent, Arena
from agents.textfold import MAX_DIRECTION_CONTROLS, TooComplex, fold
from battles.models import Battle
from judging.models import ExclusionLogEntry
from judging.services import battle_screen, judge_next
from tests.judging.battle_factories import ended_battle

SCREENING = Battle.Status.SCREENING

ROSTER = [
    "Claude",
    "claude",
    "claude-3-5-sonnet-20241022",
    "GPT-4o",
    "openai/gpt-4o-mini",
    "Idle baseline",
    "idle",
    "o1",
    "Llama 3.1 70B",
    "Rulebook",
    "Surveyor",
    "Fireball",
]


def plain_scan(text: str) -> bool:
    """Whether naive matching finds a roster identity: raw text, case-insensitive,
    whole tokens, any separator run between an identity's tokens."""
    for identity in ROSTER:
        tokens = re.findall(r"[^\W_]+", identity.casefold())
        body = r"[\s\-_./:]*".join(map(re.escape, tokens))
        if re.search(rf"(?<![^\W_]){body}(?![^\W_])", text, re.IGNORECASE):
            return True
    return False


@pytest.mark.parametrize(
    "text",
    [
        "I am Claude, an AI assistant.",
        "Built by claude-3 family",
        "CLAUDE's answer",
        "export MY_CLAUDE_KEY=1",
        "As Claude 3.5 Sonnet I think",
        "model: claude-3-5-sonnet",
        "gpt-4o says hi",
        "GPT4o",
        "running gpt-4o-mini now",
        "the Idle Baseline agent",
        "idle-baseline",
        "llama-3.1-70b-instruct",
        "navigate https://claude.ai/new",
        # Changed: this was a near miss. OCR reads "gpt-4o" as "gpt-40", and an agent
        # can write it so: "0" and "O" are confusables, folded alike on both sides.
        "gpt-40 is a part number",
    ],
)
def test_identities_are_found_case_insensitively_at_word_edges(text):
    assert LeakScanner(ROSTER).first(text) is not None, text


@pytest.mark.parametrize(
    ("attack", "text"),
    [
        ("fullwidth (NFKC)", "Answer by Ｃｌａｕｄｅ"),
        ("mathematical bold (NFKC)", "Answer by 𝐂𝐥𝐚𝐮𝐝𝐞"),
        ("mathematical script (NFKC)", "Answer by 𝒞𝓁𝒶𝓊𝒹ℯ"),
        ("circled letters (NFKC)", "Answer by Ⓒⓛⓐⓤⓓⓔ"),
        ("parenthesised letters (NFKC)", "Answer by ⒞⒧⒜⒰⒟⒠"),
        ("ligature (NFKC)", "I am ﬁreball"),
        ("superscripts (NFKC)", "I am ᴳᴾᵀ-⁴ᵒ"),
        ("regional indicators", "🇨🇱🇦🇺🇩🇪 here"),
        ("Cyrillic homoglyphs", "I am Сlаudе"),
        ("Greek homoglyphs", "I am gpt-4ο and Ρulebοοk"),
        ("digit one for l", "I am C1aude"),
        ("capital I for l", "I am CIaude"),
        ("bar for l", "I am C|aude"),
        ("zeros for o", "I am Ruleb00k"),
        ("zero-width space", "I am Cl\u200baude"),
        ("zero-width joiner and non-joiner", "I am C\u200dlau\u200cde"),
        ("soft hyphen", "I am Clau\u00adde"),
        ("word joiner", "I am Cla\u2060ude"),
        ("bidi marks", "I am C\u200el\u200fa\u202aude"),
        ("variation selectors", "I am Cl\ufe0fa\ufe00ude"),
        ("tag characters", "I am Cla\U000e0041\U000e007fude"),
        ("an acute accent", "I am Cláude"),
        ("combining underline", "I am C̲l̲a̲u̲d̲e̲"),
        ("combining strikethrough", "I am C̶l̶a̶u̶d̶e̶"),
        ("letters apart by spaces", "I am C l a u d e."),
        ("letters apart by dots", "I am C.l.a.u.d.e."),
        ("letters apart by dashes", "I am c-l-a-u-d-e"),
        ("letters apart by newlines", "I am\nC\nl\na\nu\nd\ne\n"),
        ("letters apart by runs", "I am C . l . a . u . d . e"),
        ("spread-out tokens", "I am g p t - 4 o"),
        ("reversed behind a right-to-left override", "I am \u202eedualC\u202c, hello"),
        ("reversed to the line's end", "hello\n\u202ekoobeluR ma I\nbye"),
        ("percent-encoded", "https://example.com/?who=%43%6C%61%75%64%65"),
        ("percent-encoded UTF-8 homoglyphs", "https://example.com/%D0%A1laude"),
        ("ANSI colour codes", "\x1b[1mCl\x1b[0maude"),
        ("everything at once", "I am \u202e e.d.u.\u0430.\u200bl.С\u202c"),
    ],
)
def test_attacks_on_the_scan_are_caught(attack, text):
    assert not plain_scan(text), f"{attack}: a plain scan already finds it"
    assert LeakScanner(ROSTER).first(text) is not None, attack


@pytest.mark.parametrize(
    "text",
    [
        "Claudette went to the market.",
        "Proclaude is not a model.",
        "the server was idle for an hour",  # "idle" alone is an ordinary word
        "compile with gcc -O1 for speed",  # "o1" is too short to look for
        "baselines and idle loops",
        "llama farm in Peru",  # the roster name is "Llama 3.1 70B", not "llama"
        "a survey or two",  # not "Surveyor": letters apart only if all of them are
        "rule book keeping",  # not "Rulebook"
        "the fire ball",
        "s-urvey-or",
        "C-l.a u_d:e",  # apart, but not by the same separator
        "gpt-4 and gpt-400",
        "I like it. I am OK.",
        "",
    ],
)
def test_near_misses_and_ordinary_words_do_not_match(text):
    assert LeakScanner(ROSTER).first(text) is None, text


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("I am Claude.", "I am [hidden]."),
        ("x Cl\u200baude\u200b y", "x [hidden] y"),  # invisibles after the name go too
        ("I am C̲l̲a̲u̲d̲e̲!", "I am [hidden]!"),
        ("I am C l a u d e.", "I am [hidden]."),
        ("a \u202eedualC\u202c b", "a \u202e[hidden]\u202c b"),
        ("q=%43laude&x=1", "q=[hidden]&x=1"),
        ("\x1b[1mCl\x1b[0maude\x1b[0m done", "\x1b[1m[hidden]\x1b[0m done"),
        ("Сlаudе and GPT-40", "[hidden] and [hidden]"),
        ("claude claude", "[hidden] [hidden]"),
        ("Claudette", "Claudette"),
    ],
)
def test_redaction_blanks_exactly_the_original_characters(text, redacted):
    assert LeakScanner(ROSTER).redact(text, "[hidden]") == redacted


def test_a_spelled_out_word_that_holds_a_name_counts():
    """A spread-out token's edges are not checked against spread-out letters around
    it: "c l a u d e t t e" is not ordinary text, and telling it from "I am a
    C l a u d e model" would open a way around the scan. The scan fails closed."""
    assert LeakScanner(["Claude"]).first("c l a u d e t t e") is not None
    assert LeakScanner(["Claude"]).first("I am a C l a u d e model") is not None


def test_a_text_too_complex_to_put_in_display_order_is_refused_not_guessed():
    text = "\u202ea\u202c" * (MAX_DIRECTION_CONTROLS // 2) + "\u202eedualC"
    scanner = LeakScanner(["Claude"])

    with pytest.raises(TooComplex):
        scanner.first(text)

    # Shown without its direction controls: in the order the scan read it.
    assert scanner.redact(text + " Claude", "#") == "a" * (MAX_DIRECTION_CONTROLS // 2) + "edualC #"


def test_the_excerpt_is_the_original_text():
    found = LeakScanner(["Claude"]).first("Answer by Ｃｌａｕｄｅ, thanks")
    assert found == ("Claude", "Answer by Ｃｌａｕｄｅ, thanks")


@pytest.mark.parametrize(
    ("text", "folded"),
    [
        ("Ｃｌａｕｄｅ", "claude"),
        ("Сlаudе", "claude"),
        ("C\u200bl\u00ada\u0301ude", "claude"),
        ("GPT-4O", "gpt-4o"),
        ("gpt-40", "gpt-4o"),
        ("C1aude", "claude"),
        ("gemini", "gernini"),  # "m" → "rn" (Unicode's prototype): OCR confuses them
        ("Straße", "strasse"),
    ],
)
def test_folding(text, folded):
    assert fold(text) == folded


@pytest.mark.parametrize(
    ("identity", "distinctive"),
    [
        ("Claude", True),
        ("idle", False),
        ("Idle baseline", True),
        ("o1", False),
        ("o3-mini", True),
        ("2024", False),
        ("Agent", False),
        ("ＡＧＥＮＴ", False),  # an ordinary word in fullwidth is still one
        ("Rulebook", True),
        ("", False),
        ("--", False),
    ],
)
def test_which_identities_are_looked_for(identity, distinctive):
    assert is_distinctive(identity) is distinctive


def test_model_ids_are_also_looked_for_without_prefix_and_date():
    assert identity_variants("anthropic/claude-3-5-sonnet-20241022") == {
        "anthropic/claude-3-5-sonnet-20241022",
        "claude-3-5-sonnet-20241022",
        "anthropic/claude-3-5-sonnet",
        "claude-3-5-sonnet",
    }
    assert LeakScanner(["anthropic/claude-3-5-sonnet-20241022"]).first(
        "I run as Claude-3.5-Sonnet."
    ) == ("anthropic/claude-3-5-sonnet-20241022", "I run as Claude-3.5-Sonnet.")


def test_a_large_text_is_scanned_in_bounded_time():
    """A megabyte of shell output is one pass of ``str.translate`` and one regex."""
    import time

    text = ("total 48\ndrwxr-xr-x 2 agent agent 4096 notes.txt report.csv\n" * 20_000)[:1_000_000]
    scanner = LeakScanner(ROSTER)
    started = time.perf_counter()
    assert scanner.first(text + " Claude") is not None
    assert time.perf_counter() - started < 5  # ~0.2 s here; a wide margin for a busy CI


# --- the battle-level scan (texts stored with the steps) ----------------------------


@pytest.fixture
def claude(roster):
    return Agent.objects.create(
        arena=Arena.objects.public(),
        slug="sonnet-scaffold",
        display_name="Sonnet under scaffold",
        kind=Agent.Kind.SCAFFOLD,
        provider="anthropic",
        model_id="claude-sonnet-4-5",
        aliases=["Claude"],
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("message", "Done. (Answer by Claude.)"),
        ("message", "As Rulebook I computed 42."),  # a built-in's display name
        ("message", "Done. (Answer by Ｃ\u200bｌａｕｄｅ.)"),
        ("args", {"text": "Hello from CLAUDE-SONNET-4-5"}),
        ("args", {"text": "Hello from c l a u d e"}),
        ("args", {"command": "curl https://example.com/?ua=sonnet-scaffold"}),
        ("args", {"url": "https://claude.ai/chat"}),
        ("args", {"url": "https://example.com/%43laude"}),
        ("files", [{"name": "claude_notes.txt", "size": 3, "sha256": ""}]),
        ("files", [{"name": "\u202etxt.edualc", "size": 3, "sha256": ""}]),
    ],
)
def test_a_name_in_any_judge_visible_text_excludes_the_battle(alice, claude, field, value):
    kwargs = {
        "message": {"messages": ("6*7 = 42", value)},
        "args": {"step_args": ({"command": "echo 42"}, value)},
        "files": {"files": ([], value)},
    }[field]
    battle = ended_battle(alice, status=SCREENING, **kwargs)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    battle.refresh_from_db()
    assert battle.status == Battle.Status.EXCLUDED
    assert battle.exclusion_reason == "named_model"
    entry = ExclusionLogEntry.objects.get(battle=battle)
    assert entry.action == "exclude" and entry.actor is None and "side B" in entry.note


def test_a_name_in_a_tool_result_excludes_the_battle(alice, claude):
    battle = ended_battle(alice, status=SCREENING)
    step = battle.runs.get(side="A").steps.get()
    step.result = {"ok": True, "stdout": "User-Agent: claude-sonnet-4-5/1.0", "stderr": ""}
    step.save()
    assert battle_screen(battle_id=battle.pk) == "named_model"
    note = ExclusionLogEntry.objects.get(battle=battle).note
    assert note.startswith("side A step 0 (shell) stdout names 'claude-sonnet-4-5': …")


def test_a_name_as_a_tool_name_excludes_the_battle(alice, claude):
    battle = ended_battle(alice, status=SCREENING)
    step = battle.runs.get(side="B").steps.get()
    step.tool, step.result = "Claude", {"ok": False, "error": "there is no such tool"}
    step.save()

    assert battle_screen(battle_id=battle.pk) == "named_model"

    note = ExclusionLogEntry.objects.get(battle=battle).note
    assert note.startswith("side B step 0 tool name names 'Claude'")


def test_a_near_miss_leaves_the_battle_open_for_judging(alice, judge, claude):
    battle = ended_battle(
        alice,
        status=SCREENING,
        messages=("Claudette's sonnet has 14 lines.", "The machine was idle; rulebook attached."),
    )
    assert battle_screen(battle_id=battle.pk) == "named_model"  # "rulebook" is a roster name
    clean = ended_battle(
        alice,
        status=SCREENING,
        messages=("Claudette's sonnet has 14 lines.", "The machine was idle all night."),
    )
    assert battle_screen(battle_id=clean.pk) == ""
    clean.refresh_from_db()
    assert clean.status == Battle.Status.JUDGING and clean.exclusion_reason == ""
    assert judge_next(judge=judge).pk == clean.pk  # the excluded one is never served
    assert ExclusionLogEntry.objects.filter(battle=clean).count() == 0


def test_a_retired_agents_name_still_counts(alice, claude):
    from django.utils import timezone

    Agent.objects.filter(pk=claude.pk).update(retired_at=timezone.now())
    battle = ended_battle(alice, status=SCREENING, messages=("claude here", "no"))
    assert battle_screen(battle_id=battle.pk) == "named_model"
