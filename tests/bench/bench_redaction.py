"""Benchmark: the redaction of exported environments (exports.redaction). Prints
one JSON document: the analyzer's first build (spaCy's model loaded from its package),
then for each input its size, seconds and replacements: a typical instruction, a
megabyte of prose dense with personal data, a megabyte without any, and hostile
megabytes (one line without spaces, "a." repeated, PEM headers, NUL bytes, digit
groups, "a@" repeated).

Run: .venv/bin/python tests/bench/bench_redaction.py [--quick]   (--quick: 100 kB each)
"""

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from exports.redaction import redact_text
from exports.redaction_engine import analyzer

MB = 1_000_000


def prose(size: int) -> str:
    rng = random.Random(7)
    first = ["Sarah", "John", "Maria", "Wei", "Ahmed", "Olga", "Pierre", "Aiko", "Carlos"]
    last = ["Connor", "Smith", "García", "Zhang", "Hassan", "Ivanova", "Dubois", "Tanaka"]
    parts = []
    while sum(map(len, parts)) < size:
        f, lname = rng.choice(first), rng.choice(last)
        parts.append(
            f"Please book a table for {rng.randint(2, 9)} near the office on "
            f"{rng.randint(1, 28)} May. My colleague {f} {lname} "
            f"({f.lower()}.{lname.lower()}@example.org, +44 20 {rng.randint(1000, 9999)} "
            f"{rng.randint(1000, 9999)}) will join. Send the receipt to "
            f"{rng.randint(1, 300)} Downing Street, London. The server is at "
            f"198.51.{rng.randint(0, 255)}.{rng.randint(1, 254)}; log in with "
            f"password=pw{rng.randint(10**6, 10**7)} first. The quarterly report covers "
            "revenue, churn and the roadmap for the next two releases.\n"
        )
    return "".join(parts)[:size]


def main() -> None:
    size = 100_000 if "--quick" in sys.argv else MB
    started = time.perf_counter()
    analyzer()
    build_s = time.perf_counter() - started
    plain = "The quick brown fox jumps over the lazy dog while the team reviews the patch. "
    inputs = {
        "instruction (2 kB)": prose(2_000),
        "prose with personal data": prose(size),
        "prose without personal data": (plain * (size // len(plain) + 1))[:size],
        "one line without spaces": ("abcdefghij" * (size // 10 + 1))[:size],
        "a. repeated": "a." * (size // 2),
        "PEM headers": ("-----BEGIN RSA PRIVATE KEY-----\n" * (size // 32 + 1))[:size],
        "NUL bytes": "\0" * size,
        "digit groups": "1234 5678 " * (size // 10),
        "a@ repeated": "a@" * (size // 2),
    }
    results = []
    for name, text in inputs.items():
        started = time.perf_counter()
        done = redact_text(text)
        seconds = time.perf_counter() - started
        results.append(
            {
                "input": name,
                "chars": len(text),
                "seconds": round(seconds, 2),
                "chars_per_s": round(len(text) / seconds) if seconds else None,
                "replacements": len(done.replacements),
            }
        )
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"analyzer_build_s": round(build_s, 2), "inputs": results}, indent=2))


if __name__ == "__main__":
    main()
