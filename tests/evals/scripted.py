"""The scripted world of the evaluation tests: a 20-task arithmetic suite in both
reference shapes, what each fake candidate answers, and what the fake judge says."""

import json
import re
from html import unescape

from tests.agents.fake_providers import HttpError, text

KEY = "sk-test-evaluation-7c2d9e4f1a0b"
N_TASKS = 20
FAILING_TASK = "t05"  # gamma's provider answers 503 three times on it
CORRECTED = ("beta", "t03", "clarity")  # the rubric judge's first reply is not JSON
POSITION_BIASED = "t07"  # the pairwise judge always says "A" on this task
BROKEN_GAME = ("t10", "alpha", "beta")  # the pairwise judge never answers in the schema

RUBRIC = b"""name: arithmetic
criteria:
  - {name: correctness, description: Is the sum right?, scale: 5, weight: 2}
  - {name: clarity, description: Is it just the number?, scale: 3, weight: 1}
"""


def suite_bytes() -> bytes:
    """t01..t10 in 003's shape (prompt + exact evaluation), t11..t20 in 000's (input +
    reference + meta)."""
    lines = ["tasks:"]
    for n in range(1, N_TASKS + 1):
        prompt = f"Compute {n}+{n}. Answer with the number only."
        if n <= 10:
            lines.append(
                f"  - {{id: t{n:02d}, prompt: '{prompt}', "
                f"evaluation: {{type: exact, expected: '{2 * n}'}}}}"
            )
        else:
            lines.append(
                f"  - {{id: t{n:02d}, input: '{prompt}', reference: '{2 * n}', "
                f"meta: {{level: {n % 3}}}}}"
            )
    return ("\n".join(lines) + "\n").encode()


def n_of(prompt: str) -> int:
    return int(re.search(r"Compute (\d+)\+", prompt).group(1))


def last_user_text(request: dict) -> str:
    message = request["messages"][-1]
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


def first_user_text(request: dict) -> str:
    message = request["messages"][0]
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


# What each candidate answers to Compute n+n:
def alpha_says(n: int) -> str:
    return str(2 * n)


def beta_says(n: int) -> str:
    return str(2 * n) if n % 2 == 0 else str(2 * n + 1)


def gamma_says(n: int) -> str:
    return f"{2 * n}!"


SAYS = {"alpha": alpha_says, "beta": beta_says, "gamma": gamma_says}


def correct(n: int, reply: str) -> bool:
    return reply.strip().rstrip("!") == str(2 * n)


def rubric_score(n: int, reply: str, criterion: str) -> int:
    if criterion == "correctness":
        return 5 if correct(n, reply) else 1
    return 2 if "!" in reply else 3


def candidate_policy(name: str):
    failures = {"left": 3}

    def answer(request: dict):
        n = n_of(last_user_text(request))
        if name == "gamma" and n == int(FAILING_TASK[1:]) and failures["left"]:
            failures["left"] -= 1
            return HttpError(503)
        return text(SAYS[name](n))

    return answer


def judge_policy(request: dict):
    prompt = first_user_text(request)
    if prompt.startswith("You are an impartial evaluator."):
        n = n_of(prompt)
        criterion = re.search(r"CRITERION: (\w+)", prompt).group(1)
        reply = prompt.split("AGENT RESPONSE:\n", 1)[1].split("\n\nReply ONLY", 1)[0]
        first_ask = len(request["messages"]) == 1
        if (criterion, reply, n) == (CORRECTED[2], beta_says(3), 3) and first_ask:
            return text("Three out of three.")  # not JSON: the correction call follows
        return text(
            json.dumps({"score": rubric_score(n, reply, criterion), "justification": "checked"})
        )
    n = n_of(prompt)
    a = unescape(re.search(r"<response_a>\n(.*?)\n</response_a>", prompt, re.S).group(1))
    b = unescape(re.search(r"<response_b>\n(.*?)\n</response_b>", prompt, re.S).group(1))
    if n == int(BROKEN_GAME[0][1:]) and {a, b} == {alpha_says(n), beta_says(n)}:
        return text("I prefer the first one.")
    if n == int(POSITION_BIASED[1:]):
        return text(json.dumps({"winner": "A", "reason": "first is best"}))
    key = lambda r: (correct(n, r), "!" not in r)  # noqa: E731
    winner = "A" if key(a) > key(b) else "B" if key(b) > key(a) else "tie"
    return text(json.dumps({"winner": winner, "reason": "scripted"}))
