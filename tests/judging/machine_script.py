"""The scripted machine judge of the live-battle tests (and tests/bench/bench_machine_agreement.py):
a fake Anthropic server whose policy reads the judge prompt the arena sent and answers
as the script says, through the real SDK client.

Pairwise: the side whose text has ANSWER wins; both or neither: a tie. A side text with
BIASED makes the judge say "A" whatever the order (the two orders then disagree: a
draw); one with BROKEN gets prose, never the JSON schema (the game fails for good).
Rubric: correctness 5 with ANSWER, else 1 (scale 5, weight 2); clarity 3 of 3 always
(weight 1)."""

import json
import re
from html import unescape

from agents.models import Agent, Arena

KEY = "sk-test-machine-judge-5e1d"
KEY_ENV = "MACHINE_JUDGE_TEST_API_KEY"
JUDGE_MODEL = "judge-model-1"
ANSWER = "42"
BIASED = "BIASED"
BROKEN = "BROKEN"
# Every reason the fake judge gives carries this: a page or frame that shows it leaked.
MARK = "MACHINE-REASON-7f3a"
RUBRIC = [
    {"name": "correctness", "description": "Is the answer right?", "scale": 5, "weight": 2},
    {"name": "clarity", "description": "Is it clear?", "scale": 3, "weight": 1},
]


def _prompt(request: dict) -> str:
    content = request["messages"][0]["content"]
    return content if isinstance(content, str) else content[0]["text"]


def _reply(body: dict) -> "object":
    from tests.agents.fake_providers import text

    return text(json.dumps(body))


def judge_policy(request: dict):
    from tests.agents.fake_providers import text

    prompt = _prompt(request)
    if prompt.startswith("You are an impartial evaluator."):
        criterion = re.search(r"CRITERION: (\w+)", prompt).group(1)
        output = prompt.split("AGENT RESPONSE:\n", 1)[1]
        score = (5 if ANSWER in output else 1) if criterion == "correctness" else 3
        return _reply({"score": score, "justification": f"{MARK} {criterion}"})
    a = unescape(re.search(r"<response_a>\n(.*?)\n</response_a>", prompt, re.S).group(1))
    b = unescape(re.search(r"<response_b>\n(.*?)\n</response_b>", prompt, re.S).group(1))
    if BROKEN in a or BROKEN in b:
        return text("Both look fine to me, I suppose.")
    if BIASED in a or BIASED in b:
        return _reply({"winner": "A", "reason": f"{MARK} the first"})
    right_a, right_b = ANSWER in a, ANSWER in b
    winner = "A" if right_a and not right_b else "B" if right_b and not right_a else "tie"
    return _reply({"winner": winner, "reason": f"{MARK} scripted"})


def machine_judge_agent(base_url: str, *, model_id: str = JUDGE_MODEL, slug: str = "judge-m"):
    """A scaffold agent of the public arena on the fake server (the arena's own: no team)."""
    return Agent.objects.create(
        arena=Arena.objects.public(), slug=slug, display_name=slug.title(), kind="scaffold",
        provider="anthropic", model_id=model_id,
        params={"base_url": base_url, "api_key_env": KEY_ENV},
    )  # fmt: skip


def arena_judge_on(judge: Agent, *, pairwise: bool = True, rubric: list | None = None) -> Arena:
    from judging.services.machine import arena_machine_judge_configure

    return arena_machine_judge_configure(
        arena=Arena.objects.public(), judge=judge, pairwise=pairwise, rubric=rubric
    )
