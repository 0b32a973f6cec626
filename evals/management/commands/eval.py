"""``manage.py eval``: offline evaluations of roster agents on a task suite, run here,
written as one JSON run record; and the audit report of a tournament's record.

    python manage.py eval run --team T --suite suite.yaml --agent a --agent b \\
        [--rubric rubric.yaml] [--judge j] [--pairwise] [--output run.json] [--resume ID]
    python manage.py eval run --team T --suite suite.json --agent a ... --judge j \\
        --tournament single-elimination [--best-of 3] [--seed 7] [--opening a,d ...]
    python manage.py eval report --input run.json --output report.html

The record goes to ``--output`` (stdout without it) even when something failed; the
exit status is then 1. A bad flag or file exits 2 with one line saying what to fix.
``--resume ID`` runs only what evaluation ID is missing (after an interruption). A
desktop task's attachments are read beside the suite file (their paths are relative
to it; none may lead out of its directory), and so are repo tasks' bundles or tarballs.
``--epochs N`` runs each (task, agent) N times (``--replicates N``, its older name) and
``--reducer`` (mean, max, mode, pass_at_k:K, at_least_k:K) makes one score per task of
the epochs' (docs/evaluations.md "Epochs"). A summary per agent
goes to stderr. With ``--tournament`` the record is the tournament record
(evals/tournament_record.schema.json)."""

import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from accounts.models import Team
from arena_site import strict_json
from arena_site.exceptions import ApplicationError
from evals import selectors, services, tournament_selectors, tournaments
from evals.reducers import epochs_of
from evals.services.files import attachment_paths
from evals.services.repo import repo_paths


class Command(BaseCommand):
    help = "Offline evaluations of task suites (run)."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="run an evaluation and write its record")
        run.add_argument("--team", required=True, help="the team the evaluation belongs to")
        run.add_argument("--suite", help="suite file (YAML or JSON)")
        run.add_argument("--agent", action="append", default=[], help="agent slug (repeat)")
        run.add_argument("--rubric", help="rubric file (YAML or JSON)")
        run.add_argument("--judge", help="judge agent slug (rubric and pairwise judging)")
        run.add_argument("--pairwise", action="store_true", help="judge every pair of replies")
        run.add_argument(
            "--baseline", metavar="SLUG",
            help="judge every other candidate against this one (a candidate; needs --judge)",
        )  # fmt: skip
        run.add_argument("--max-tokens", type=int, default=4096, help="candidate output budget")
        run.add_argument("--output", help="where to write the record (stdout without it)")
        run.add_argument(
            "--plots",
            metavar="DIR",
            help="also write radar.svg and win_rates.svg into DIR (with a rubric)",
        )
        run.add_argument("--resume", type=int, help="finish evaluation ID instead of a new one")
        run.add_argument(
            "--random",
            dest="draw",
            type=int,
            metavar="K",
            help="draw K candidates (and a judge, with --rubric or --pairwise) from the model "
            "agents the team may evaluate, one per model; not with --agent or --judge",
        )
        run.add_argument(
            "--selection-seed", type=int, help="seed of the --random draw (the record keeps it)"
        )
        run.add_argument("--step-budget", type=int, help="desktop lanes' steps")
        run.add_argument("--wall-budget", type=int, help="desktop lanes' seconds")
        run.add_argument(
            "--success-timeout", type=int, help="seconds for a success command (at most the "
            "sandbox's shell bound, ARENA_SHELL_TIMEOUT_S, the default)",
        )  # fmt: skip
        run.add_argument("--desktop-lanes", type=int, help="desktop (and repo) lanes at once (2)")
        run.add_argument(
            "--epochs", type=int, help="runs of each (task, agent) (1; --replicates: alias)"
        )
        run.add_argument(
            "--replicates", type=int, default=1, help="the older name of --epochs",
        )  # fmt: skip
        run.add_argument(
            "--reducer", default="mean",
            help="one score per task of its epochs': mean, max, mode, pass_at_k:K or "
            "at_least_k:K (mean)",
        )  # fmt: skip
        run.add_argument(
            "--tournament", choices=tournaments.FORMATS,
            help="play the judge's pairwise games as a tournament of this format",
        )  # fmt: skip
        run.add_argument("--best-of", type=int, help="games per series, odd (1)")
        run.add_argument(
            "--seed", type=int,
            help="seeds the ratings' bootstrap and the elimination seeded fallback (0)",
        )  # fmt: skip
        run.add_argument(
            "--opening", action="append", metavar="A,B",
            help="single elimination's first-round matchup (repeat; default: adjacent pairs "
            "in --agent order)",
        )  # fmt: skip
        report = sub.add_parser("report", help="render a tournament record as an HTML report")
        report.add_argument("--input", required=True, help="the record (JSON) to report")
        report.add_argument("--output", required=True, help="where to write the HTML file")

    def handle(self, *args, action, **options) -> None:
        if action == "report":
            self._report(options["input"], options["output"])
            return
        try:
            code = self._run(**options)
        except ApplicationError as error:
            raise CommandError(error.message, returncode=2) from None
        if code:
            sys.exit(code)

    def _read(self, path: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as error:
            raise CommandError(f"cannot read {path}: {error.strerror}", returncode=2) from None

    def _attachments(
        self, suite_path: str, stored_suite, *, repos: bool = False
    ) -> dict[str, bytes]:
        """The desktop tasks' files (or with ``repos`` the repo tasks' uploads), read
        beside the suite file (bounded reads: a file over the limit is refused by the
        rules, not read whole)."""
        base = Path(suite_path).parent.resolve()
        limit = (
            settings.ARENA.attachments_max_total_bytes
            if repos
            else (settings.ARENA.attachment_max_bytes)
        )
        files = {}
        paths = repo_paths(stored_suite.tasks) if repos else attachment_paths(stored_suite)
        for relative in paths:
            path = (base / relative).resolve()
            if not path.is_relative_to(base):
                raise CommandError(
                    f"attachment {relative!r} leads out of the suite's directory {base}",
                    returncode=2,
                )
            try:
                with path.open("rb") as file:
                    files[relative] = file.read(limit + 1)
            except OSError as error:
                raise CommandError(
                    f"cannot read attachment {relative!r} ({path}): {error.strerror}",
                    returncode=2,
                ) from None
        return files

    def _run(
        self, *, team, suite, agent, rubric, judge, pairwise, max_tokens, output, resume,
        draw, selection_seed, plots, step_budget, wall_budget, success_timeout,
        desktop_lanes, tournament, best_of, seed, opening, replicates, epochs, reducer,
        baseline, **_,
    ):  # fmt: skip
        owner = Team.objects.filter(name=team).first()
        if owner is None:
            raise CommandError(f"no team named {team!r}", returncode=2)
        if resume is not None:
            evaluation = selectors.evaluation_for_team(team=owner, evaluation_id=resume)
        else:
            if not suite:
                raise CommandError("--suite is required (or --resume ID)", returncode=2)
            stored_suite = services.suite_store(team=owner, name=suite, data=self._read(suite))
            stored_rubric = (
                services.rubric_store(team=owner, name=rubric, data=self._read(rubric))
                if rubric
                else None
            )
            drawn_seed = None
            if draw is not None:
                if agent or judge:
                    raise CommandError(
                        "--random draws the agents: not with --agent or --judge", returncode=2
                    )
                drawn = services.random_selection(
                    team=owner,
                    candidates=draw,
                    judge=bool(stored_rubric or pairwise or tournament),
                    seed=selection_seed,
                )
                agent, judge, drawn_seed = drawn.agents, drawn.judge, drawn.seed
            elif selection_seed is not None:
                raise CommandError("--selection-seed goes with --random", returncode=2)
            evaluation = services.evaluation_create(
                team=owner,
                suite=stored_suite,
                agent_slugs=agent,
                rubric=stored_rubric,
                judge_slug=judge,
                pairwise=pairwise,
                max_tokens=max_tokens,
                selection_seed=drawn_seed,
                attachments=self._attachments(suite, stored_suite),
                step_budget=step_budget,
                wall_budget_s=wall_budget,
                success_timeout_s=success_timeout,
                desktop_lanes=desktop_lanes,
                tournament=tournament or "",
                best_of=1 if best_of is None else best_of,
                seed=0 if seed is None else seed,
                opening=None if opening is None else [self._pair(p) for p in opening],
                repos=self._attachments(suite, stored_suite, repos=True),
                replicates=replicates,
                epochs=epochs,
                reducer=reducer,
                baseline_slug=baseline,
            )
        tasks = len(evaluation.suite.tasks)
        agents = evaluation.candidates.count()
        total = tasks * agents * epochs_of(evaluation.settings)
        if evaluation.rubric:
            total += total * len(evaluation.rubric.criteria)
        if evaluation.tournament and evaluation.judge:
            # 003's estimate: scheduled series × tasks × best-of (early stops, tie-breaks
            # and failures make the games played differ)
            series = tournaments.scheduled_series(agents, evaluation.tournament)
            total += series * tasks * evaluation.best_of * epochs_of(evaluation.settings)
        elif evaluation.pairwise:
            total += tasks * agents * (agents - 1) // 2
        elif evaluation.baseline_id:  # the judge's answers, then its games
            total += tasks
        with tqdm(
            total=total, desc=f"evaluation {evaluation.pk}", unit="call", file=sys.stderr,
            disable=not sys.stderr.isatty(),
        ) as bar:  # fmt: skip
            evaluation = services.evaluation_execute(
                evaluation_id=evaluation.pk, progress=lambda label: bar.update(1)
            )
        record = tournament_selectors.record_of(evaluation)
        text = strict_json.dumps(record, indent=2, ensure_ascii=False)  # null, never NaN
        if output:
            Path(output).write_text(text + "\n")
            self.stderr.write(f"evaluation {evaluation.pk}: record written to {output}")
        else:
            self.stdout.write(text)
        if evaluation.tournament:
            self._tournament_summary(record)
            failed = any(r["status"] != "done" for r in record["results"])
            return 1 if failed or not record["run"].get("complete", True) else 0
        if plots:
            self._plots(Path(plots), evaluation, record)
        self._summary(record)
        return 0 if record["run"]["complete"] else 1

    def _pair(self, text: str) -> tuple[str, str]:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 2 or not all(parts):
            raise CommandError(
                f"--opening takes two agent slugs separated by a comma (a,b), got {text!r}",
                returncode=2,
            )
        return parts[0], parts[1]

    def _tournament_summary(self, record: dict) -> None:
        """On stderr: the coverage, then per candidate its results, games and rating."""
        run, tournament = record["run"], record["tournament"]
        if "expected_pairs" in run:
            self.stderr.write(
                f"{tournament['format']} best of {tournament['best_of']}: "
                f"{run['resolved_pairs']} of {run['expected_pairs']} games resolved, "
                f"{run['failed_pairs']} failed; {tournament['status']}"
            )
        else:
            self.stderr.write(f"{tournament['format']}: no judge, no games")
        stats = {s["model"]: s for s in record.get("statistics", [])}
        rated = {r["model"]: r for r in record.get("ratings", [])}
        for agent in tournament["candidates"]:
            rows = [r for r in record["results"] if r["model"] == agent]
            parts = [f"{agent}: {sum(r['status'] != 'done' for r in rows)} failed runs"]
            if agent in stats:
                s = stats[agent]
                parts.append(f"{s['wins']}W {s['losses']}L {s['draws']}D")
            if agent in rated:
                r = rated[agent]
                if r["rating"] is None:
                    parts.append(f"unrated ({r['unavailable']})")
                elif "rating_lower" in r:
                    parts.append(
                        f"{r['rating']:.0f} [{r['rating_lower']:.0f}, {r['rating_upper']:.0f}]"
                    )
                else:
                    parts.append(f"{r['rating']:.0f}")
            self.stderr.write(" · ".join(parts))

    def _report(self, source: str, target: str) -> None:
        """The audit report of a saved tournament record, refused (exit 2) when the file
        is not one: a report is rendered only from a record its schema accepts."""
        from evals.report import RecordRejected, audit_report_from_file

        try:
            html = audit_report_from_file(self._read(source))
        except RecordRejected as error:
            raise CommandError(f"{source}: {error}", returncode=2) from None
        try:
            Path(target).write_text(html, encoding="utf-8")
        except OSError as error:
            raise CommandError(f"cannot write {target}: {error.strerror}", returncode=2) from None
        self.stderr.write(f"report written to {target}")

    def _summary(self, record: dict) -> None:
        """One line per agent on stderr: its runs and failures, exact-match rate,
        success-command rate with its 95 % interval (where the suite has them) and each
        scorer's mean over tasks ± its standard error."""
        stats = record["statistics"]
        for agent in (a["slug"] for a in record["run"]["agents"]):
            every = record["results"] + record.get("epoch_runs", [])  # every epoch's run
            rows = [r for r in every if r["agent"] == agent]
            failed = sum(1 for r in rows if r["status"] != "done")
            parts = [f"{agent}: {len(rows)} runs, {failed} failed"]
            if stats["exact_match"].get(agent) is not None:
                parts.append(f"exact {stats['exact_match'][agent]:.2f}")
            success = stats["success"].get(agent)
            if success and success["rate"] is not None:
                parts.append(
                    f"success {success['rate']:.2f} [{success['lower']:.2f}, "
                    f"{success['upper']:.2f}] over {success['n']}"
                    + (f" ({success['unscored']} unscored)" if success["unscored"] else "")
                )
            for name, m in (
                ((stats.get("scorers") or {}).get("agents") or {}).get(agent, {}).items()
            ):
                if m["mean"] is not None and name != "success":  # printed above
                    error = f" ± {m['stderr']:.2f}" if m["stderr"] is not None else ""
                    parts.append(f"{name} {m['mean']:.2f}{error} over {m['tasks']} tasks")
            self.stderr.write(" · ".join(parts))

    def _plots(self, where: Path, evaluation, record: dict) -> None:
        """The record's figures as self-contained SVG files (evals.plots)."""
        from evals import plots

        where.mkdir(parents=True, exist_ok=True)
        agents = [a["slug"] for a in record["run"]["agents"]]
        stats = record["statistics"]
        if evaluation.rubric:
            criteria = [(c["name"], c["scale"]) for c in evaluation.rubric.criteria]
            (where / "radar.svg").write_text(
                plots.radar(stats["criterion_means"], criteria=criteria, agents=agents)
            )
            (where / "win_rates.svg").write_text(
                plots.win_rate_matrix(stats["win_rates"], agents=agents)
            )
        self.stderr.write(f"figures written to {where}")
