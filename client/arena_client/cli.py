"""``arena``: the command line. Global options (``--url``, ``--token``, or ARENA_URL and
ARENA_TOKEN) come before the command. Exit codes: 0 done; 1 the arena refused or the
work failed (HTTP status and the server's message on stderr); 2 a usage error."""

import argparse
import os
import sys

from arena_client import __version__, commands
from arena_client.api import Api, ApiError

DEFAULT_URL = "http://127.0.0.1:8000"


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _polling(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval", type=_positive(float), default=1.0, help="seconds between polls (1)"
    )
    parser.add_argument(
        "--timeout", type=_positive(float), help="give up after this many seconds (never)"
    )


def _group(top, name: str, help: str):
    """A command with commands of its own (``arena eval start``)."""
    return top.add_parser(name, help=help).add_subparsers(
        dest=f"{name}_command", required=True, metavar=f"{name.upper()}_COMMAND"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arena", description="Agent Arena from the command line, over its REST API."
    )
    parser.add_argument("--version", action="version", version=f"arena-client {__version__}")
    parser.add_argument("--url", help=f"the arena's address (ARENA_URL, else {DEFAULT_URL})")
    parser.add_argument("--token", help="an API token, arena_… (ARENA_TOKEN); never printed")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = top.add_parser("run", help="ask one agent one prompt and print its reply")
    run.add_argument("--agent", required=True, help="the agent's slug")
    run.add_argument("--prompt", required=True, help="the prompt; - reads it from stdin")
    run.add_argument("--max-tokens", type=_positive(int), help="the reply's budget (4096)")
    run.add_argument("--json", action="store_true", help="print the whole run as JSON")
    _polling(run)
    run.set_defaults(handler=commands.run)

    evaluation = _group(top, "eval", "evaluations and tournaments")
    start = evaluation.add_parser("start", help="start an evaluation; prints its id")
    start.add_argument("--suite", required=True, help="the suite file (YAML or JSON)")
    start.add_argument(
        "--agent", action="append", required=True, dest="agents", help="a candidate (repeat)"
    )
    start.add_argument("--judge", help="the judge's slug (rubric, pairwise, tournament)")
    start.add_argument("--rubric", help="a rubric file for the judge")
    start.add_argument("--pairwise", action="store_true", help="judge every pair of replies")
    start.add_argument(
        "--baseline", help="a candidate every other one is judged against (needs --judge)"
    )
    start.add_argument("--epochs", type=_positive(int), help="runs of every task (1)")
    start.add_argument(
        "--reducer", help="one score per task of its epochs: mean, max, mode, pass_at_k:K, …"
    )
    start.add_argument("--tournament", help="a tournament format (the server lists them)")
    start.add_argument("--best-of", type=_positive(int), help="games per series, odd")
    start.add_argument("--seed", type=int, help="the tournament's seed")
    start.add_argument(
        "--opening", action="append", metavar="A:B", help="single elimination's first pairs"
    )
    start.add_argument("--max-tokens", type=_positive(int), help="candidates' budget (4096)")
    start.add_argument(
        "--attach",
        action="append",
        default=[],
        metavar="PATH",
        help="a file a desktop task names, as the suite names it (relative to the suite)",
    )
    start.add_argument("--step-budget", type=_positive(int), help="desktop lanes' steps")
    start.add_argument("--wall-budget", type=_positive(int), help="desktop lanes' seconds")
    start.add_argument("--success-timeout", type=_positive(int), help="success command's bound")
    start.add_argument("--desktop-lanes", type=_positive(int), help="desktop lanes at once")
    start.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any other field POST /api/evaluations/ accepts (VALUE as JSON, else text)",
    )
    start.add_argument("--watch", action="store_true", help="then watch it (as eval watch)")
    _polling(start)
    start.set_defaults(handler=commands.eval_start)

    watch = evaluation.add_parser("watch", help="a progress bar until the evaluation ends")
    watch.add_argument("id", type=_positive(int))
    _polling(watch)
    watch.set_defaults(handler=commands.eval_watch)

    record = evaluation.add_parser("record", help="the run record (JSON)")
    record.add_argument("id", type=_positive(int))
    record.add_argument("-o", "--output", help="write it here (else stdout)")
    record.set_defaults(handler=commands.eval_record)

    report = evaluation.add_parser("report", help="a tournament's audit report (HTML)")
    report.add_argument("id", type=_positive(int))
    report.add_argument("-o", "--output", help="write it here (else stdout)")
    report.set_defaults(handler=commands.eval_report)

    cancel = evaluation.add_parser("cancel", help="stop an evaluation before its next call")
    cancel.add_argument("id", type=_positive(int))
    cancel.set_defaults(handler=commands.eval_cancel)

    task = _group(top, "task", "tasks for battles")
    submit = task.add_parser("submit", help="submit a task; prints its battle's id")
    submit.add_argument("--prompt", required=True, help="the instruction; - reads stdin")
    submit.add_argument(
        "--kind",
        choices=["desktop", "repo"],
        default="desktop",
        help="desktop (default) or repo (needs --repo-url)",
    )
    submit.add_argument("--start-url", help="desktop: where the agents start")
    submit.add_argument(
        "--attach", action="append", default=[], metavar="FILE", help="a file (repeat)"
    )
    submit.add_argument("--repo-url", help="repo: the repository to clone")
    submit.add_argument("--repo-ref", help="repo: the ref to start from (HEAD)")
    submit.add_argument("--repo-judge-ref", help="repo: the ref holding hidden tests")
    submit.add_argument("--success-cmd", help="repo: the command that says it is solved")
    submit.add_argument("--test-cmd", help="repo: the test command")
    submit.add_argument("--follow", action="store_true", help="then follow the battle")
    _polling(submit)
    submit.set_defaults(handler=commands.task_submit)

    battle = _group(top, "battle", "battles")
    follow = battle.add_parser("follow", help="print a battle's progress until it is decided")
    follow.add_argument("id", type=_positive(int))
    follow.add_argument(
        "--until",
        choices=["decided", "judging"],
        default="decided",
        help="stop once decided (default), or once it waits for judges",
    )
    _polling(follow)
    follow.set_defaults(handler=commands.battle_follow)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    url = args.url or os.environ.get("ARENA_URL") or DEFAULT_URL
    token = args.token or os.environ.get("ARENA_TOKEN", "")
    if not token.strip():
        parser.error("no API token: set ARENA_TOKEN or pass --token (manage.py arena_token)")
    if not url.startswith(("http://", "https://")):
        parser.error(f"--url must start with http:// or https://, got {url!r}")
    api = Api(url, token.strip())
    try:
        return args.handler(api, args)
    except commands.UsageError as exc:
        parser.error(str(exc))
    except ApiError as exc:
        print(f"arena: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("arena: interrupted", file=sys.stderr)
        return 130
    finally:
        api.close()
    return 1  # parser.error exits; never reached


if __name__ == "__main__":
    sys.exit(main())
