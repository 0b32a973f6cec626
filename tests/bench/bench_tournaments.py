"""Demonstration and benchmark: tournaments of 8 roster agents × 20 tasks (issue #17)
against fake provider servers on 127.0.0.1, through the real services, SDK clients and
PostgreSQL (a throwaway database made from DATABASE_URL). Prints one JSON document.

The world is tests/evals/tournament_world.py's: every candidate answers every task
with a line that names it; the pairwise judge decides each game by a seeded coin
weighted by the candidates' true strengths (Bradley-Terry on the Elo scale), and its
two orientations agree 85 % of the time (a split is a draw, as 003 resolves it). So the
ratings the record publishes can be read against the strengths that made the games.

Two runs: a round robin and a single elimination, both best of 3, seed 17, at the
arena's per-endpoint concurrency. For each: wall time, games and judge calls, coverage,
orientation agreement, champions per task, and each candidate's true strength beside
its rating and bounds. The records and the audit reports are written to ``--out``
(default var/bench/tournaments); ``--screenshot PATH`` also renders the elimination's
report in Chromium and saves a PNG of its top (docs/tournament-report.png).

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \\
     .venv/bin/python tests/bench/bench_tournaments.py [--screenshot docs/tournament-report.png]
"""

import argparse
import json
import os
import sys
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI  # noqa: E402
from tests.evals.tournament_world import (  # noqa: E402
    KEY,
    ScriptedJudge,
    candidate_policy,
    strength_coin,
    suite_bytes,
)

ROOT = Path(__file__).resolve().parents[2]
TASKS = 20
SEED = 17
BEST_OF = 3
# true strengths (Elo points), strongest first; the candidate order is shuffled below
STRENGTHS = {
    "atlas": 1700, "boreas": 1640, "cirrus": 1580, "delta": 1520,
    "eddy": 1480, "fjord": 1420, "gale": 1360, "haze": 1300,
}  # fmt: skip
ORDER = ["delta", "haze", "atlas", "eddy", "gale", "boreas", "fjord", "cirrus"]


def one_run(team, fmt: str, judge: ScriptedJudge, out: Path) -> tuple[dict, dict]:
    from evals import services, tournament_selectors
    from evals.report import audit_report_html

    suite = services.suite_store(team=team, name="lines.json", data=suite_bytes(TASKS))
    evaluation = services.evaluation_create(
        team=team, suite=suite, agent_slugs=ORDER, judge_slug="judge", tournament=fmt,
        best_of=BEST_OF, seed=SEED,
    )  # fmt: skip
    asked = judge.requests
    started = time.perf_counter()
    services.evaluation_execute(evaluation_id=evaluation.pk)
    seconds = time.perf_counter() - started
    evaluation.refresh_from_db()
    record = tournament_selectors.record_of(evaluation)
    (out / f"{fmt}.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    (out / f"{fmt}.html").write_text(audit_report_html(record))
    run = record["run"]
    champions = Counter(t["champion"] for t in record["tournament"]["tasks"] if t["champion"])
    ratings = {r["model"]: r for r in record["ratings"]}
    stats = {s["model"]: s for s in record["statistics"]}
    summary = {
        "format": fmt,
        "best_of": BEST_OF,
        "seconds": round(seconds, 2),
        "candidate_calls": TASKS * len(ORDER),
        "judge_calls": judge.requests - asked,
        "games": run["expected_pairs"],
        "resolved": run["resolved_pairs"],
        "failed": run["failed_pairs"],
        "complete": run["complete"],
        "orientation_agreement": round(run["orientation_agreement"]["agreement_rate"], 4),
        "bootstrap": {k: run.get(k) for k in ("bootstrap_clusters", "bootstrap_ran",
                                               "bootstrap_valid", "bootstrap_unavailable")},
        "champions": dict(champions.most_common()),
        "tournament_status": record["tournament"]["status"],
        "candidates": [
            {
                "model": m,
                "true": STRENGTHS[m],
                "rating": _round(ratings[m]["rating"]),
                "lower": _round(ratings[m].get("rating_lower")),
                "upper": _round(ratings[m].get("rating_upper")),
                "unavailable": ratings[m].get("unavailable"),
                "wins": stats[m]["wins"],
                "losses": stats[m]["losses"],
                "draws": stats[m]["draws"],
            }
            for m in sorted(STRENGTHS, key=STRENGTHS.get, reverse=True)
        ],
    }  # fmt: skip
    return summary, record


def _round(value):
    return None if value is None else round(value, 1)


def screenshot(report: Path, target: Path) -> None:
    """The report's top in Chromium (Debian's, as the browser tests use it)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/lib/chromium/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        page = browser.new_page(viewport={"width": 1280, "height": 1500})
        page.goto(report.resolve().as_uri())
        page.screenshot(path=str(target), full_page=False)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "var" / "bench" / "tournaments"))
    parser.add_argument("--screenshot", help="PNG of the elimination report's top")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"tasks": TASKS, "candidates": len(ORDER), "loadavg_start": os.getloadavg()}
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"bench_tournaments_{database['NAME']}"
    config = setup_databases(verbosity=0, interactive=False)
    os.environ["TOURNAMENT_BENCH_API_KEY"] = KEY
    try:
        from django.contrib.auth import get_user_model

        from accounts.services import team_create
        from agents.models import Agent, Arena

        settings.ARENA = settings.ARENA.replace(internal_allowlist="127.0.0.0/8")
        owner = get_user_model().objects.create_user(username="bench", password="x" * 12)
        team = team_create(name="Bench", owner=owner)
        judge = ScriptedJudge(default=strength_coin(STRENGTHS, seed=SEED))
        with ExitStack() as stack:
            candidates = stack.enter_context(FakeOpenAI(api_key=KEY, policy=candidate_policy))
            judge_fake = stack.enter_context(FakeAnthropic(api_key=KEY, policy=judge))
            arena = Arena.objects.public()
            for slug in ORDER:
                Agent.objects.create(
                    arena=arena, slug=slug, display_name=slug.title(), kind="scaffold",
                    provider="openai", model_id=f"{slug}-model",
                    params={"base_url": candidates.base_url,
                            "api_key_env": "TOURNAMENT_BENCH_API_KEY"},
                )  # fmt: skip
            Agent.objects.create(
                arena=arena, slug="judge", display_name="Judge", kind="scaffold",
                provider="anthropic", model_id="judge-model",
                params={"base_url": judge_fake.base_url,
                        "api_key_env": "TOURNAMENT_BENCH_API_KEY"},
            )  # fmt: skip
            report["concurrency"] = settings.ARENA.eval_provider_concurrency
            report["runs"] = []
            for fmt in ("round-robin", "single-elimination"):
                summary, _ = one_run(team, fmt, judge, out)
                report["runs"].append(summary)
        report["written"] = str(out)
    finally:
        teardown_databases(config, verbosity=0)
    if args.screenshot:
        screenshot(out / "single-elimination.html", Path(args.screenshot))
        report["screenshot"] = args.screenshot
    report["loadavg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
