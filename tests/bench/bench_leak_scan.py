"""Benchmark: the identity-leak scan of one whole battle (SPEC §5.1, docs/leak-scan.md).
Prints one JSON document.

The battle: 2 lanes × 20 steps, each step with a 1280×800 browser-like screenshot
(tab title, address bar, a page of text, an input field; drawn with the DejaVu fonts)
in a realistic mix: navigations to new pages, scrolls, typing, and shell or screenshot
steps that leave the screen as it was; shell output, typed text, page URLs and titles;
delivered files (a text report, an HTML page, a CSV, a PNG chart). Nothing in it names
an agent, so every scan reads everything (a hit would end it early). The roster: the
built-in agents and twelve scaffolds with model ids and aliases.

Per battle, p50/p95 seconds of ``exclusion_at_lanes_end`` (the screening's scan, with
its database reads) for:
- text only (``leak_ocr`` off): texts, delivered text files;
- text + OCR as shipped: each screenshot only where it changed since the run's
  previous one, none read twice in the battle, delivered images;
- the reference, measured in the same run: the same scan reading every screenshot
  (and image) whole, none skipped.

``--text-only``: only the first (no OCR: seconds, not minutes), also as CPU seconds of
this process (``cpu_p50_s``), which other work on a busy machine disturbs less.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \
     .venv/bin/python tests/bench/bench_leak_scan.py [--rounds N] [--text-only]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

from judging import ocr  # noqa: E402
from tests.judging.screens import PROSE, browser_screen, encoded, text_image  # noqa: E402

STEPS = 20
# What each step does to the screen: "page" a new page, "scroll" the page moves,
# "type" the input field changes, "same" (shell, screenshot) nothing changes.
_SCRIPT_TEXT = """
    page same scroll scroll type type page same same scroll
    page type type same scroll page scroll same same type
"""
SCRIPT = _SCRIPT_TEXT.split()
LS = "\n".join(
    f"-rw-r--r-- 1 agent agent {1000 + 37 * i:>6} Mar {1 + i % 28:>2} 10:{i % 60:02} file-{i}.txt"
    for i in range(60)
)


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50_s": round(statistics.median(ordered), 3),
        "p95_s": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        "n": len(ordered),
    }


def lane_screens(side: str) -> list[tuple[str, dict, bytes, dict]]:
    """(tool, args, screenshot PNG, page) for each step of one lane."""
    pages = [
        (f"Quarterly report {side}{n}", f"https://intranet.example.com/reports/{side.lower()}{n}")
        for n in range(8)
    ]
    page, scroll, typed = 0, 0, ""
    steps = []
    for index, kind in enumerate(SCRIPT[:STEPS]):
        if kind == "page":
            page, scroll, typed = page + 1, 0, ""
            tool, args = "navigate", {"url": pages[page][1]}
        elif kind == "scroll":
            scroll += 4
            tool, args = "scroll", {"x": 640, "y": 400, "dx": 0, "dy": 4}
        elif kind == "type":
            typed += "quarterly "[: 3 + index % 5]
            tool, args = "type", {"text": typed}
        else:
            tool, args = ("shell", {"command": "ls -l"}) if index % 2 else ("screenshot", {})
        title, url = pages[page]
        lines = PROSE[page % 5 :] + PROSE[: page % 5] + PROSE
        image = browser_screen(title=title, url=url, heading=title, lines=lines, scroll=scroll)
        if typed:
            image = browser_screen(
                title=title, url=url, heading=title, lines=lines, scroll=scroll, typed=typed
            )
        steps.append((tool, args, encoded(image, compress_level=1), {"url": url, "title": title}))
    return steps


def build_battle():
    """A battle in screening with both lanes' steps, screenshots and deliveries."""
    import random

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.services import team_create
    from agents.models import Agent, Arena
    from agents.services import roster_install_builtins
    from battles.models import Battle, Run, Step, Task

    arena = Arena.objects.public()
    roster_install_builtins(arena=arena)
    for i, (provider, model) in enumerate(
        [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o"), ("openai", "o3-mini")] * 4
    ):
        Agent.objects.create(
            arena=arena,
            slug=f"scaffold-{i}",
            display_name=f"Scaffold {model} v{i}",
            kind=Agent.Kind.SCAFFOLD,
            provider=provider,
            model_id=f"{provider}/{model}-2025010{i % 9}",
            aliases=[f"Entrant{i}bot"],
        )
    user = get_user_model().objects.create_user("bench", password="x")
    team = team_create(name="Bench", owner=user)
    task = Task.objects.create(team=team, submitter=user, instruction="Summarise the reports")
    a, b = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="surveyor")
    now = timezone.now()
    battle = Battle.objects.create(
        arena=arena,
        team=team,
        task=task,
        agent_a=a,
        agent_b=b,
        status=Battle.Status.SCREENING,
        submitted_at=now,
        ended_at=now,
    )
    root = Path(settings.PRIVATE_MEDIA_ROOT)
    rng = random.Random(3)
    deliveries = {
        "A": {
            "report.txt": "\n".join(rng.choice(PROSE) for _ in range(120)).encode(),
            "page.html": (
                "<html><head><title>Summary</title></head><body>"
                + "".join(f"<p>{rng.choice(PROSE)}</p>" for _ in range(300))
                + "</body></html>"
            ).encode(),
            "chart.png": encoded(
                text_image("Revenue by quarter: Q1 4.2M Q2 4.6M", size=(800, 600))
            ),
        },
        "B": {
            "data.csv": "\n".join(
                f"{i},{rng.random():.4f},store {i % 40}" for i in range(2000)
            ).encode(),
            "notes.md": "# Notes\n\n" + "\n".join(f"- {line}" for line in PROSE),
        },
    }
    for side, agent in (("A", a), ("B", b)):
        run = Run.objects.create(
            battle=battle,
            side=side,
            agent=agent,
            status=Run.Status.ENDED,
            step_budget=STEPS,
            wall_budget_s=300,
            final_message="The reports show revenue up 12 percent; details attached.",
            end_reason="delivered",
            started_at=now,
        )
        for index, (tool, args, png, page) in enumerate(lane_screens(side)):
            relative = f"screens/run-{run.pk}/step-{index}.png"
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_bytes(png)
            stdout = LS if tool == "shell" else ""
            Step.objects.create(
                run=run,
                index=index,
                tool=tool,
                args=args,
                result={"ok": True, "stdout": stdout, "stderr": "", "page": page},
                screenshot=relative,
                started_at=now,
                duration_ms=50,
            )
        folder = root / "deliveries" / f"run-{run.pk}"
        folder.mkdir(parents=True, exist_ok=True)
        files = []
        for name, data in deliveries[side].items():
            data = data if isinstance(data, bytes) else data.encode()
            (folder / name).write_bytes(data)
            files.append({"name": name, "size": len(data), "sha256": ""})
        run.delivered_files = files
        run.save(update_fields=["delivered_files"])
    return battle


class FullReader(ocr.ImageReader):
    """The reference's way of reading: every image whole, none skipped."""

    def read(self, image, digest=None) -> str:
        self.previous = image
        return ocr.ocr(image, self.tessdata)

    def read_file(self, data: bytes) -> str:
        return "\n".join(self.read(frame) for _, _, frame in ocr.image_frames(data))


def bench_text_only(rounds: int) -> dict:
    from judging.services.screening import exclusion_at_lanes_end

    battle = build_battle()
    settings.ARENA = settings.ARENA.replace(leak_ocr=False)
    exclusion_at_lanes_end(battle)  # the roster's pattern compiled, the fold table filled
    wall, cpu = [], []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.process_time()
        assert exclusion_at_lanes_end(battle) == ("", "")
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return {"text_only": {**summary(wall), "cpu_p50_s": round(statistics.median(cpu), 4)}}


def bench(rounds: int) -> dict:
    from judging.services.screening import exclusion_at_lanes_end

    battle = build_battle()
    arena = settings.ARENA
    pixels = {"calls": 0, "pixels": 0}
    original_ocr, ours_reader = ocr.ocr, ocr.ImageReader

    def counting(image, tessdata):
        pixels["calls"] += 1
        pixels["pixels"] += image.width * image.height
        return original_ocr(image, tessdata)

    timings: dict[str, list[float]] = {"text_only": [], "text_and_ocr": [], "reference": []}
    original_ocr(text_image("warm up"), arena.leak_tessdata)  # the engine's one-time load
    for _ in range(rounds):
        settings.ARENA = arena.replace(leak_ocr=False)
        started = time.perf_counter()
        assert exclusion_at_lanes_end(battle) == ("", "")
        timings["text_only"].append(time.perf_counter() - started)

        settings.ARENA = arena
        pixels.update(calls=0, pixels=0)
        ocr.ocr = counting
        started = time.perf_counter()
        assert exclusion_at_lanes_end(battle) == ("", "")
        timings["text_and_ocr"].append(time.perf_counter() - started)
        ocr.ocr = original_ocr
        ours = dict(pixels)

        pixels.update(calls=0, pixels=0)
        ocr.ocr, ocr.ImageReader = counting, FullReader
        started = time.perf_counter()
        assert exclusion_at_lanes_end(battle) == ("", "")
        timings["reference"].append(time.perf_counter() - started)
        ocr.ocr, ocr.ImageReader = original_ocr, ours_reader
        reference = dict(pixels)
    screenshots = 2 * STEPS
    return {
        "battle": {
            "lanes": 2,
            "steps_per_lane": STEPS,
            "screenshots": screenshots,
            "screen": "1280x800",
            "delivered_files": 5,
        },
        "text_only": summary(timings["text_only"]),
        "text_and_ocr": {
            **summary(timings["text_and_ocr"]),
            "ocr_calls": ours["calls"],
            "megapixels_read": round(ours["pixels"] / 1e6, 2),
        },
        "reference_full_ocr": {
            **summary(timings["reference"]),
            "ocr_calls": reference["calls"],
            "megapixels_read": round(reference["pixels"] / 1e6, 2),
        },
        "speedup_p50": round(
            statistics.median(timings["reference"]) / statistics.median(timings["text_and_ocr"]), 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--text-only", action="store_true", help="no OCR: the text scan alone")
    arguments = parser.parse_args()
    config = setup_databases(verbosity=0, interactive=False)
    with tempfile.TemporaryDirectory(prefix="arena-bench-leaks-") as private:
        settings.PRIVATE_MEDIA_ROOT = Path(private)
        try:
            run = bench_text_only if arguments.text_only else bench
            report = run(arguments.rounds)
        finally:
            teardown_databases(config, verbosity=0)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
