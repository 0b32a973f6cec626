"""Task or conversation? Transparent rules, no model (SPEC §2). A conversation gets a
reply and boots nothing. Pure.

Rules, in order:
1. Nothing but greeting, thanks, farewell or small-talk words → conversation.
2. A question about the arena or the assistant itself ("who are you", "what can you
   do", "how does this work") with no task verb → conversation.
3. Otherwise a task: an instruction need not start with a verb ("the README of … —
   summarise it"), and agents may answer factual questions by doing the work.
"""

import re
from dataclasses import dataclass

SMALL_TALK = {
    "hi", "hello", "hey", "hiya", "yo", "howdy", "greetings", "thanks", "thank", "you",
    "thx", "ty", "cheers", "bye", "goodbye", "good", "morning", "afternoon", "evening",
    "night", "ok", "okay", "cool", "nice", "great", "lol", "hmm", "test", "testing",
    "there", "all", "everyone", "folks", "so", "much", "very", "a", "lot", "please",
}  # fmt: skip
META = re.compile(
    r"\b(who|what)\s+are\s+you\b|\bwhat\s+can\s+you\s+do\b|\bhow\s+does\s+(this|the\s+arena)"
    r"\s+work\b|\bhow\s+are\s+you\b|\bare\s+you\s+(a\s+)?(bot|human|real|there)\b",
    re.IGNORECASE,
)
TASK_VERBS = {
    "create", "write", "make", "find", "open", "go", "navigate", "visit", "search", "look",
    "list", "compute", "calculate", "evaluate", "download", "upload", "fill", "book", "buy",
    "order", "summarize", "summarise", "extract", "compare", "install", "run", "fix",
    "build", "edit", "delete", "remove", "rename", "sort", "count", "convert", "translate",
    "draft", "check", "click", "copy", "move", "save", "send", "plan", "add", "set",
    "change", "update", "generate", "draw", "fetch", "get", "show", "tell", "explain",
    "read", "sign", "log", "test", "debug", "deploy", "configure", "schedule",
}  # fmt: skip
WORD = re.compile(r"[a-z']+")
CONVERSATION_REPLY = (
    "Hello! This reads as conversation rather than a task, so no agents were started. "
    "Describe something for two agents to do on a computer, for example: "
    '"Create a file named notes.txt containing hello arena" or '
    '"Open https://example.com and report the page title".'
)


@dataclass(frozen=True)
class Classification:
    is_task: bool
    rule: str
    reply: str = ""


def classify(text: str) -> Classification:
    words = WORD.findall(text.lower())
    if not words or all(w in SMALL_TALK for w in words):
        return Classification(False, "small_talk", CONVERSATION_REPLY)
    if META.search(text) and not TASK_VERBS.intersection(words):
        return Classification(False, "about_the_arena", CONVERSATION_REPLY)
    return Classification(True, "task")
