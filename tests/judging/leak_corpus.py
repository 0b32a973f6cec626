"""A labelled corpus for the identity-leak scan (docs/leak-scan.md, "Measured on a
corpus"): texts that name a roster agent, disguised, and innocent texts that use the
roster's ordinary words. Pure data and string functions; ``test_leak_corpus.py``
builds the roster in the database and measures the scan on it.

The labels follow the documented rule, written out here by hand (``NAMED``), not
computed by the code under test: which parts of a name identify its agent on their own,
and which disguises the scan reads. A text is a leak when it holds one of ``NAMED``
under a documented disguise; it is innocent when it holds none, whatever ordinary words
of the roster's names it uses ("Gemini" the constellation, a USB 2.0 flash drive, a
sonnet, the ACME protocol, "Research" alone when the team is called so)."""

import json
from urllib.parse import quote_plus

# The roster: (display name, slug, model id, aliases, entrant team or None).
ROSTER = [
    ("GPT-4o (OpenAI)", "gpt-4o-openai", "openai/gpt-4o-2024-08-06", [], None),
    (
        "Claude 3.5 Sonnet [new]",
        "claude-35-sonnet-new",
        "anthropic/claude-3-5-sonnet-latest",
        ["Claude"],
        None,
    ),
    ("O'Brien Bot", "obrien-bot", "openai/gpt-4o-mini", [], "Kestrel Works"),
    (
        "Acme Agent (acme-labs)",
        "acme-agent",
        "anthropic/claude-3-haiku-20240307",
        [],
        "Acme Labs",
    ),
    ("Gemini 2.0 Flash", "gemini-2-flash", "google/gemini-2.0-flash-001", [], None),
    (
        "Llama 3.1 70B Instruct",
        "llama-31-70b",
        "meta-llama/Llama-3.1-70B-Instruct",
        [],
        "Nimbus Research Collective",
    ),
    ("Mistral Large 2 (Mistral AI)", "mistral-large-2", "mistral/mistral-large-2407", [], None),
    ("DeepSeek-V3", "deepseek-v3", "deepseek/deepseek-chat", [], "Team Zephyrine"),
    (
        "Qwen2.5 Coder 32B",
        "qwen25-coder",
        "qwen/qwen2.5-coder-32b-instruct",
        [],
        "Lotus Analytics",
    ),
    ("Grok 2 [beta]", "grok-2", "xai/grok-2-1212", [], None),
    ("Research Assistant Pro", "research-assistant-pro", "", [], "Research"),
    ("Phoenix Navigator", "phoenix-nav", "openai/o3-mini", [], "Harbor Point Robotics"),
    ("Sonnet under scaffold", "sonnet-scaffold", "claude-sonnet-4-5", [], None),
]
# The arena's own agents (roster_install_builtins) are on the roster too: "Rulebook",
# "Surveyor", "Idle baseline" (slug "idle", an ordinary word, not looked for).

# What identifies an agent on its own, by the documented rule, per agent: the names
# whole; each part outside and inside brackets; runs of two or more words holding a
# word written as a name, and a part less its versions; the model id, also without
# its provider and date; aliases and team names the same way. Not: a single word of a
# longer name, ordinary words, a version with a tier word ("3.5 Sonnet", "2.0 Flash").
NAMED = [
    # GPT-4o (OpenAI)
    "GPT-4o (OpenAI)",
    "GPT-4o",
    "OpenAI",
    "gpt-4o-openai",
    "openai/gpt-4o-2024-08-06",
    "gpt-4o-2024-08-06",
    # Claude 3.5 Sonnet [new], alias Claude
    "Claude 3.5 Sonnet [new]",
    "Claude 3.5 Sonnet",
    "Claude 3.5",
    "Claude Sonnet",
    "Claude",
    "claude-35-sonnet-new",
    "anthropic/claude-3-5-sonnet-latest",
    "claude-3-5-sonnet",
    # O'Brien Bot, team Kestrel Works
    "O'Brien Bot",
    "obrien-bot",
    "gpt-4o-mini",
    "Kestrel Works",
    # Acme Agent (acme-labs), team Acme Labs
    "Acme Agent (acme-labs)",
    "Acme Agent",
    "acme-labs",
    "Acme Labs",
    "claude-3-haiku-20240307",
    "claude-3-haiku",
    # Gemini 2.0 Flash
    "Gemini 2.0 Flash",
    "Gemini 2.0",
    "Gemini Flash",
    "gemini-2-flash",
    "gemini-2.0-flash-001",
    # Llama 3.1 70B Instruct, team Nimbus Research Collective
    "Llama 3.1 70B Instruct",
    "Llama 3.1 70B",
    "Llama 3.1",
    "Llama Instruct",
    "llama-31-70b",
    "Llama-3.1-70B-Instruct",
    "Nimbus Research Collective",
    "Nimbus Research",
    "Research Collective",
    # Mistral Large 2 (Mistral AI)
    "Mistral Large 2 (Mistral AI)",
    "Mistral Large 2",
    "Mistral Large",
    "Mistral AI",
    "mistral-large-2407",
    # DeepSeek-V3, team Team Zephyrine
    "DeepSeek-V3",
    "deepseek-chat",
    "Team Zephyrine",
    # Qwen2.5 Coder 32B, team Lotus Analytics
    "Qwen2.5 Coder 32B",
    "Qwen2.5 Coder",
    "qwen25-coder",
    "qwen2.5-coder-32b-instruct",
    "Lotus Analytics",
    # Grok 2 [beta]
    "Grok 2 [beta]",
    "Grok 2",
    "grok-2-1212",
    # Research Assistant Pro (team "Research": an ordinary word, not looked for)
    "Research Assistant Pro",
    # Phoenix Navigator, team Harbor Point Robotics
    "Phoenix Navigator",
    "phoenix-nav",
    "o3-mini",
    "Harbor Point Robotics",
    "Harbor Point",
    "Point Robotics",
    # Sonnet under scaffold
    "Sonnet under scaffold",
    "sonnet-scaffold",
    "claude-sonnet-4-5",
    # the arena's own
    "Rulebook",
    "Surveyor",
    "Idle baseline",
]

_SMALL_CAPS = dict(zip("abcdefghijklmnopqrstuvwxyz", "ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘꞯʀꜱᴛᴜᴠᴡxʏᴢ", strict=True))
_CYRILLIC = dict(zip("aceopxyiACEOPXHTMK", "асеорхуіАСЕОРХНТМК", strict=True))


def _small_caps(name: str) -> str:
    return "".join(_SMALL_CAPS.get(c.lower(), c) for c in name)


def _leet_digits(name: str) -> str:
    table = {"a": "4", "e": "3", "i": "1", "o": "0", "s": "5", "t": "7"}
    return "".join(table.get(c.lower(), c) for c in name)


def _leet_symbols(name: str) -> str:
    table = {"a": "@", "s": "$", "i": "!", "o": "0", "l": "|", "c": "("}
    return "".join(table.get(c.lower(), c) for c in name)


def _words(name: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in name).split()


def _spread(name: str, gap: str) -> str:
    return gap.join(c for c in name if c.isalnum())


# Disguises the scan reads (docs/leak-scan.md, "Folding" and "Matching").
DISGUISES = {
    "exact": lambda n: n,
    "lower case": str.lower,
    "upper case": str.upper,
    "split by spaces": lambda n: " ".join(_words(n)),
    "joined": lambda n: "".join(_words(n)),
    "joined by underscores": lambda n: "_".join(_words(n)).lower(),
    "small capitals": _small_caps,
    "leetspeak digits": _leet_digits,
    "leetspeak symbols": _leet_symbols,
    "reversed": lambda n: n[::-1],
    "Cyrillic homoglyphs": lambda n: "".join(_CYRILLIC.get(c, c) for c in n),
    "zero-width spaces": lambda n: "\u200b".join(n),
    "letters spread by spaces": lambda n: _spread(n, " "),
    "letters spread by dots": lambda n: _spread(n, "."),
    "fullwidth": lambda n: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in n),
}

# Where a name turns up: a signature, a claim, a shell session, a URL, JSON, a table,
# test output, a code comment, a log line, an HTML page.
CONTEXTS = [
    lambda x: f"Done: the report is attached.\n\n— {x}",
    lambda x: f"As {x}, I compared both spreadsheets and found 3 mismatches.",
    lambda x: f"$ ./run.sh --agent '{x}'\nok: 3 passed in 0.41s",
    lambda x: f"https://example.com/search?q={quote_plus(x)}&page=2",
    lambda x: json.dumps({"author": x, "score": 0.93}, ensure_ascii=False),
    lambda x: f"| field | value |\n|---|---|\n| model | {x} |",
    lambda x: f"tests/test_app.py::test_answer PASSED  # checked by {x}",
    lambda x: f"# written by {x}\ndef main():\n    return 42\n",
    lambda x: f"2025-03-01 12:00:03 INFO worker started: {x} (pid 4121)",
    lambda x: f"<html><body><p>Summary prepared by <b>{x}</b>.</p></body></html>",
]

# A few written out, as an entrant would sign or slip.
HANDWRITTEN_LEAKS = [
    "I am GPT-4o (OpenAI).",
    "Answer by Claude 3.5 Sonnet [new]. Thanks!",
    "Regards, O'Brien Bot",
    "Acme Agent here: the totals are in totals.csv.",
    "ᴄʟᴀᴜᴅᴇ finished the task.",
    "C14ud3 says the answer is 42.",
    "G3m1n1 2.0 Fl4sh completed all steps.",
    "cl@ude: done",
    "edualC ma I, and the answer is 42.",
    "Signed: gpt4o openai",
    "Signed: GPT 4o OpenAI",
    "Powered by Open AI",
    "model=Deep Seek V3",
    "I was built by the Kestrel Works team.",
    "Team: Acme Labs",
    "curl -H 'User-Agent: qwen 2.5 coder' https://example.com/",
    '{"model": "mistral-large-2407", "tokens": 512}',
    "Running llama-3.1-70b-instruct on 8 GPUs",
    "x-agent: phoenix_navigator",
    "I, the Surveyor agent, visited 4 pages.",
]


def leaks() -> list[tuple[str, str, str]]:
    """(disguise, name, text) of every leak in the corpus: each name under six of the
    disguises, turn by turn, each in a context, turn by turn; then the handwritten ones."""
    disguises = list(DISGUISES.items())
    found = []
    for i, name in enumerate(NAMED):
        for j in range(6):
            label, disguise = disguises[(i * 6 + j) % len(disguises)]
            context = CONTEXTS[(i + j) % len(CONTEXTS)]
            found.append((label, name, context(disguise(name))))
    found += [("handwritten", "", text) for text in HANDWRITTEN_LEAKS]
    return found


# Innocent: ordinary words of the roster's names, near misses, single words of longer
# names, versions, brackets, code, shell output, diffs, test output, prose.
INNOCENT_FRAGMENTS = [
    "Gemini is the third sign of the zodiac; Castor and Pollux are its brightest stars.",
    "People born under Gemini are said to be curious.",
    "Copy the backup to a USB 2.0 flash drive before the update.",
    "The camera flash did not fire in the dark room.",
    "Adobe Flash Player reached its end of life in 2020.",
    "Flash the firmware with: esptool.py write_flash 0x1000 build.bin",
    "Shakespeare wrote 154 sonnets; sonnet 18 is the best known.",
    "A sonnet has fourteen lines and a volta after the eighth.",
    "She wrote a sonnet under the old oak tree.",
    "Version 3.5 of the sonnet generator rhymes better.",
    "Certbot renews the certificate over the ACME protocol every 60 days.",
    "Acme Corporation sells anvils in the cartoons.",
    "acme.sh --issue -d example.com --webroot /var/www/html",
    "The llama and the alpaca are both camelids.",
    "A herd of llamas grazed beside the road to Cusco.",
    "The mistral blows cold from the north into the Gulf of Lion.",
    "After an hour with the manual I finally grok how the scheduler works.",
    "Phoenix, Arizona reached 46 degrees in July.",
    "The phoenix rises from its ashes in the old myth.",
    "The navigator plotted a course around the reef.",
    "A kestrel hovered over the field, then dropped onto a vole.",
    "The lotus flower opens in the morning.",
    "Nimbus clouds usually bring steady rain.",
    "Conan O'Brien hosted the late-night show for years.",
    "The O'Brien family moved to Boston in 1910.",
    "The harbor was quiet; three boats were moored at the pier.",
    "Robotics club meets on Thursdays at the community hall.",
    "The research assistant booked the lab for Friday.",
    "Our research team published the survey results.",
    "Research shows that sleep improves memory.",
    "Collective bargaining ended with a new contract.",
    "Deep sea creatures seek warmth near hydrothermal vents.",
    "We seek a deep understanding of the data.",
    "A zephyr is a soft, gentle breeze.",
    "The analytics dashboard shows 1,204 visits.",
    "Lotus Notes was an email client.",
    "Point the browser at localhost:8000 and log in.",
    "Claudette baked a pie for the fair.",
    "Proclaude is not a word.",
    "Claudication is pain in the legs when walking.",
    "GPT-4 and GPT-3.5 were earlier models; this report does not use them.",
    "gpt-4-turbo pricing changed in 2024.",
    "The 4o setting on the oven means 40 degrees? No, it is 400 F.",
    "Ozone, O3, is a pollutant at ground level.",
    "The mini fridge holds 12 cans.",
    "The o1 flag enables basic optimisation: gcc -O1 main.c",
    "Grok is a word coined by Heinlein in 1961.",
    "Version 2 [beta] of the form is live.",
    "Press [new] to create a document, then (save).",
    "Status: [OK] (3 of 3)",
    "The new bot replied within a second.",
    "An agent is a program that acts on behalf of a user.",
    "The pro plan costs $20 per month.",
    "Large language models need a lot of memory.",
    "Instruct the user to restart the router.",
    "The coder fixed the bug in 32 minutes.",
    "A survey or a poll would answer that.",
    "The rule book says nothing about overtime.",
    "The machine was idle all night.",
    "Fire ball spells are in chapter 3.",
    "Survey results: 42 percent agree.",
    "The agent's baseline score was 0.41.",
    "Harbor tours leave at 10 and 2.",
    "Kestrels and falcons are raptors.",
    "Chat logs are kept for 30 days.",
    "Coder 32 passed the exam; coder 33 did not.",
    "The latest release fixed 3 bugs.",
    "Haiku: an old silent pond, a frog jumps in.",
    "Opus 64 is a set of three string quartets.",
    "Team meeting moved to 3 pm.",
    "Works in progress are shown in grey.",
    "The phoenix-like recovery of the market surprised analysts.",
    "Navigation menu: Home | About | Contact",
    "$ ls -l\n-rw-r--r-- 1 agent agent  1204 Mar  1 10:02 report.csv\n"
    "-rw-r--r-- 1 agent agent   512 Mar  1 10:03 notes.md",
    "$ python -m pytest -q\n....F\nFAILED tests/test_totals.py::test_sum - "
    "assert 41 == 42\n1 failed, 4 passed in 0.52s",
    "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n"
    "-def total(xs): return sum(xs) - 1\n+def total(xs): return sum(xs)\n",
    "def flash(message):\n    print(f'[new] {message}')\n",
    "class Agent:\n    def __init__(self, name):\n        self.name = name\n",
    "const bot = new Bot({ retries: 3 }); bot.start();",
    "SELECT name, score FROM results WHERE score > 0.5 ORDER BY score DESC;",
    '{"status": "ok", "items": [1, 2, 3], "next": null}',
    "<ul><li>apples</li><li>pears</li></ul>",
    'Traceback (most recent call last):\n  File "main.py", line 3, in <module>\n'
    "ZeroDivisionError: division by zero",
    "git commit -m 'Fix the totals (off by one)'",
    "docker run --rm -p 8080:80 nginx:1.27",
    "The quarterly report shows revenue up 12 percent and costs flat.",
    "I opened the spreadsheet, summed column C and found 42.",
    "The form has three fields: name, email and a comment.",
    "I could not find the file; the link returned 404.",
    "Both pages load in under a second on a cold cache.",
    "The answer is 6 * 7 = 42, checked twice.",
    "I clicked Submit and the confirmation page appeared.",
    "The table lists 12 stores; store 7 has the highest sales.",
    "Wind speed: 14 km/h from the north-west.",
    "The recipe needs 200 g of flour and 3 eggs.",
    "Meeting notes: budget approved, hiring paused.",
    "The train leaves platform 4 at 09:12.",
    "Install with pip install requests==2.32.3",
    "The invoice total is 1,250.00 EUR including VAT.",
    "Open the file, then close it when done.",
    "An open-source AI toolkit was used for the charts.",
    "Point cloud data was cleaned with a median filter.",
    "Llama wool is warm and light.",
    "The Gemini programme flew ten crewed missions in 1965 and 1966.",
    "The Flash is a DC Comics superhero.",
    "Scaffold the project with npm create vite@latest.",
    "The scaffold under the bridge was removed; the sonnet contest is on Sunday.",
]

INNOCENT_WRAPPERS = [
    lambda x: x,
    lambda x: f"2025-03-01 12:00:03 INFO step 4 output: {x}",
    lambda x: json.dumps({"note": x, "ok": True}, ensure_ascii=False),
]


def innocent() -> list[str]:
    """Every innocent text: each fragment as it is, in a log line and in JSON."""
    return [wrap(fragment) for fragment in INNOCENT_FRAGMENTS for wrap in INNOCENT_WRAPPERS]
