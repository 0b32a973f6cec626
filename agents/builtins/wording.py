"""Varied wording for the built-ins: no fixed sentence that names or fingerprints an
agent. Every choice is deterministic per task (seeded by the instruction's SHA-256 and
what is being said), so a rerun says the same, and two tasks seldom say it alike."""

import hashlib
from collections.abc import Sequence


class Voice:
    """Picks phrasings for one task. ``seed`` is the instruction (and anything else
    that should vary the words, such as the agent's own flavour)."""

    def __init__(self, *seed: str) -> None:
        self.seed = "\x1f".join(seed)

    def pick(self, key: str, options: Sequence[str]) -> str:
        digest = hashlib.sha256(f"{self.seed}\x1e{key}".encode()).digest()
        return options[int.from_bytes(digest[:4], "big") % len(options)]

    def say(self, key: str, options: Sequence[str], **values: object) -> str:
        return self.pick(key, options).format(**values)

    def quote(self, text: str) -> str:
        left, right = self.pick("quote", ("“”", '""', "‘’"))
        return f"{left}{text}{right}"
