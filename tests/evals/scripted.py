"""The scripted world of the evaluation tests: a 20-task arithmetic suite in both
reference shapes, what each fake candidate answers, and what the fake judge says; and a
mixed suite (those 20 and three desktop tasks) with what each candidate's scaffold does
in its lanes."""

import json
import re
from html import unescape

from tests.agents.fake_providers import HttpError, text, tool_call

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


# -- the mixed suite: the 20 chat tasks above and three desktop tasks ------------------
# (test_desktop.py; the chat-only suite above stays as it is for the other tests)

NUMBERS = b"4\n5\n6\n"  # sums to 15
README = b"hello from the suite\nsecond line\n"
ATTACHMENTS = {"data/numbers.csv": NUMBERS, "notes/readme.txt": README}
D1 = "Add the numbers in /work/attachments/numbers.csv, write the sum to /work/out.txt, deliver."
D2 = "Read /work/attachments/readme.txt and deliver its first line."
D3 = "Say you are ready by delivering the word ready."
DESKTOP_TASKS = f"""  - id: d1
    kind: desktop
    prompt: '{D1}'
    attachments: [data/numbers.csv]
    success_cmd: test -e /work/out.txt && cat /work/out.txt
  - id: d2
    kind: desktop
    input: '{D2}'
    attachments: [data/numbers.csv, notes/readme.txt]
    success_cmd: cd /work/attachments && sha256sum numbers.csv readme.txt
  - {{id: d3, kind: desktop, prompt: '{D3}'}}
"""
# The final message each candidate delivers (or gives up with) on each desktop task;
# None: its provider refuses the call (400), so the lane ends in the agent's error.
DESKTOP_SAYS = {
    ("alpha", "d1"): "The sum is 15",
    ("beta", "d1"): "I cannot add these numbers.",  # gives up: no tool call
    ("gamma", "d1"): "Done",  # made out.txt a FIFO: the success command hangs on it
    ("alpha", "d2"): "hello from the suite",
    ("beta", "d2"): "hello from the suite",
    ("gamma", "d2"): None,
    ("alpha", "d3"): "ready",
    ("beta", "d3"): "ready",
    ("gamma", "d3"): "ready!",
}
GOOD_DESKTOP = {"d1": "The sum is 15", "d2": "hello from the suite", "d3": "ready"}


def mixed_suite_bytes(*, chat: bool = True) -> bytes:
    """The chat suite's 20 tasks (``chat``) followed by d1..d3."""
    head = suite_bytes().decode() if chat else "tasks:\n"
    return (head + DESKTOP_TASKS).encode()


def task_text(request: dict) -> str:
    """The first user message's text (the scaffold's "Task: …" turn)."""
    message = next(m for m in request["messages"] if m["role"] == "user")
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


def desktop_task_of(prompt: str) -> str | None:
    for task_id, text_ in (("d1", D1), ("d2", D2), ("d3", D3)):
        if text_ in prompt:
            return task_id
    return None


def desktop_policy(name: str, tool_results):
    """``name``'s scaffold on the desktop tasks; ``tool_results`` reads a request's tool
    results (the fake's own ``tool_result_texts``). Chat calls go to the chat script."""
    chat = candidate_policy(name)

    def act(request: dict):
        if "tools" not in request:
            return chat(request)
        task_id = desktop_task_of(task_text(request))
        step = sum(1 for m in request["messages"] if m["role"] == "assistant")
        says = DESKTOP_SAYS[(name, task_id)]
        if says is None:
            return HttpError(400, message="scripted refusal")
        if (name, task_id) == ("beta", "d1"):
            return text(says)
        if task_id == "d1" and step == 0:
            command = (
                "awk '{s+=$1} END {print s}' attachments/numbers.csv > out.txt"
                if name == "alpha"
                else "mkfifo out.txt"
            )
            return tool_call("shell", {"command": command})
        if task_id == "d2" and step == 0:
            return tool_call("shell", {"command": "head -n 1 attachments/readme.txt"})
        if task_id == "d2":  # delivers what the shell printed: it read the file
            says = json.loads(tool_results(request)[-1])["stdout"].strip()
        return tool_call("deliver", {"message": says})

    return act


def desktop_rubric_score(task_id: str, reply: str, criterion: str) -> int:
    if criterion == "correctness":
        return 5 if reply.rstrip("!") == GOOD_DESKTOP[task_id] else 1
    return 2 if "!" in reply else 3


def mixed_judge_policy(request: dict):
    """The judge of the chat script on chat tasks; on desktop tasks it judges the
    final messages: right (``GOOD_DESKTOP``) beats wrong, then no "!" beats "!"."""
    prompt = first_user_text(request)
    task_id = desktop_task_of(prompt)
    if task_id is None:
        return judge_policy(request)
    if prompt.startswith("You are an impartial evaluator."):
        criterion = re.search(r"CRITERION: (\w+)", prompt).group(1)
        reply = prompt.split("AGENT RESPONSE:\n", 1)[1].split("\n\nReply ONLY", 1)[0]
        score = desktop_rubric_score(task_id, reply, criterion)
        return text(json.dumps({"score": score, "justification": "checked"}))
    a = unescape(re.search(r"<response_a>\n(.*?)\n</response_a>", prompt, re.S).group(1))
    b = unescape(re.search(r"<response_b>\n(.*?)\n</response_b>", prompt, re.S).group(1))
    key = lambda r: (r.rstrip("!") == GOOD_DESKTOP[task_id], "!" not in r)  # noqa: E731
    winner = "A" if key(a) > key(b) else "B" if key(b) > key(a) else "tie"
    return text(json.dumps({"winner": winner, "reason": "scripted"}))
