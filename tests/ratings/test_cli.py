"""`python -m ratings fit FILE.csv`: runs as a subprocess without Django settings, prints
one JSON document, and refuses bad files with exit 2 and one actionable line."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ratings.bradley_terry import rate

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
if not Path(PYTHON).exists():
    PYTHON = sys.executable


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [PYTHON, "-m", "ratings", "fit", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


def arena_csv(path: Path, n: int = 300, seed: int = 1) -> tuple[Path, list[list[str]]]:
    """Battles among four named agents in a custom column layout, with judges,
    weights, both tie labels and some abstentions."""
    rng = np.random.default_rng(seed)
    names = ["alpha", "beta", "gamma", "delta"]
    strength = np.array([0.8, 0.3, 0.0, -0.6])
    rows = [["left", "right", "verdict", "rater", "w", "task_id"]]
    for k in range(n):
        i, j = rng.choice(4, 2, replace=False)
        p = 1 / (1 + np.exp(-(strength[i] - strength[j])))
        u = rng.random()
        verdict = (
            "abstain" if u < 0.03 else "tie" if u < 0.1 else "both_bad" if u < 0.15
            else "L" if rng.random() < p else "R"
        )  # fmt: skip
        rows.append(
            [names[i], names[j], verdict, f"judge{rng.integers(0, 6)}",
             f"{rng.uniform(0.25, 1):.3f}", f"t{k % 40}"]
        )  # fmt: skip
    return write(path, rows), rows


MAPPING = (
    "--a", "left", "--b", "right", "--winner", "verdict", "--win-a", "L", "--win-b", "R",
    "--tie", "tie,both_bad", "--skip", "abstain", "--weight", "w",
)  # fmt: skip


def test_happy_path_prints_one_json_document_matching_the_library(tmp_path):
    path, rows = arena_csv(tmp_path / "battles.csv")

    done = cli(str(path), *MAPPING, "--judge", "rater", "--bootstrap", "200", "--seed", "3")

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bar when stderr is not a terminal
    report = json.loads(done.stdout)
    kept = [r for r in rows[1:] if r[2] != "abstain"]
    assert report["battles"] == len(kept)
    assert report["skipped_rows"] == len(rows) - 1 - len(kept)
    assert report["cluster_by"] == "judge"
    assert report["clusters"] == 6
    assert report["robust_published"] is True  # G = 6 ≥ m = 4
    assert report["interval"] == "clustered"
    assert report["seed"] == 3 and report["bootstrap"] == 200
    assert report["converged"] is True and report["iterations"] <= 8

    # the same numbers as the library on the same battles
    names = sorted({r[0] for r in kept} | {r[1] for r in kept})
    index = {name: k for k, name in enumerate(names)}
    outcome = {"L": 1.0, "R": 0.0, "tie": 0.5, "both_bad": 0.5}
    judges = sorted({r[3] for r in kept})
    expected = rate(
        np.array([index[r[0]] for r in kept]),
        np.array([index[r[1]] for r in kept]),
        np.array([outcome[r[2]] for r in kept]),
        n_agents=len(names),
        w=np.array([float(r[4]) for r in kept]),
        cluster=np.array([judges.index(r[3]) for r in kept]),
    )
    by_name = {row["agent"]: row for row in report["agents"]}
    for name in names:
        estimate = expected.agents[index[name]]
        row = by_name[name]
        assert row["rating"] == pytest.approx(estimate.rating, abs=1e-4)
        assert row["lower"] == pytest.approx(estimate.lower, abs=1e-4)
        assert row["upper"] == pytest.approx(estimate.upper, abs=1e-4)
        assert row["unavailable"] is None
        assert len(row["rank_band"]) == 2
    # sorted best first
    ratings = [row["rating"] for row in report["agents"]]
    assert ratings == sorted(ratings, reverse=True)
    assert report["agents"][0]["agent"] == "alpha"


def test_same_seed_same_output(tmp_path):
    path, _ = arena_csv(tmp_path / "battles.csv", n=120)
    args = (str(path), *MAPPING, "--bootstrap", "100", "--seed", "9")
    assert cli(*args).stdout == cli(*args).stdout


def test_cluster_by_task_and_none(tmp_path):
    path, _ = arena_csv(tmp_path / "battles.csv", n=200)
    by_task = json.loads(cli(str(path), *MAPPING, "--task", "task_id", "--cluster", "task",
                             "--bootstrap", "0").stdout)  # fmt: skip
    assert by_task["clusters"] == 40 and by_task["cluster_by"] == "task"
    none = json.loads(
        cli(str(path), *MAPPING, "--judge", "rater", "--cluster", "none", "--bootstrap", "0").stdout
    )
    assert none["clusters"] is None and none["interval"] == "battle"
    assert all(row["rank_band"] is None for row in none["agents"])


def test_unidentified_agents_get_labels_not_numbers(tmp_path):
    rows = [["agent_a", "agent_b", "winner"]]
    rows += [["x", "y", "A"], ["y", "z", "A"], ["z", "x", "A"], ["sweeper", "x", "A"]]
    rows += [["p", "q", "A"], ["q", "p", "A"]]
    report = json.loads(cli(str(write(tmp_path / "f.csv", rows)), "--bootstrap", "10").stdout)
    by_name = {row["agent"]: row for row in report["agents"]}
    assert by_name["sweeper"]["unavailable"] == "separated"
    assert by_name["p"]["unavailable"] == "disconnected"
    for name in ("sweeper", "p", "q"):
        assert by_name[name]["rating"] is None and by_name[name]["lower"] is None
        assert by_name[name]["rank_band"] is None
    assert [row["agent"] for row in report["agents"][-3:]] == ["p", "q", "sweeper"]


def test_default_columns_follow_the_arena_vote_choices(tmp_path):
    rows = [["agent_a", "agent_b", "winner"], ["m", "n", "A"], ["n", "m", "A"]]
    rows.append(["m", "n", "both_bad"])
    report = json.loads(cli(str(write(tmp_path / "f.csv", rows)), "--bootstrap", "0").stdout)
    assert report["battles"] == 3
    assert [row["rating"] for row in report["agents"]] == [1000.0, 1000.0]


def test_the_cli_never_imports_django():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    code = (
        "import sys, runpy\n"
        "sys.argv = ['ratings', '--help']\n"
        "try:\n    runpy.run_module('ratings', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'django'], 'django'\n"
    )
    done = subprocess.run(
        [PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def assert_refused(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_unknown_column_lists_the_available_ones(tmp_path):
    path, _ = arena_csv(tmp_path / "battles.csv", n=10)
    done = cli(str(path), *MAPPING, "--judge", "grader")
    assert_refused(
        done, "'grader' (--judge)", "available columns: left, right, verdict, rater, w, task_id"
    )


def test_unmapped_winner_value_names_the_value_and_the_line(tmp_path):
    rows = [["agent_a", "agent_b", "winner"], ["m", "n", "A"], ["m", "n", "B"]]
    rows.append(["n", "m", "draw"])
    done = cli(str(write(tmp_path / "f.csv", rows)))
    assert_refused(done, "line 4", "'draw'", "--tie")


@pytest.mark.parametrize("content", ["", "agent_a,agent_b,winner\n"])
def test_empty_file_is_refused(tmp_path, content):
    path = tmp_path / "empty.csv"
    path.write_text(content)
    assert_refused(cli(str(path)), "empty.csv")


def test_everything_skipped_is_refused(tmp_path):
    rows = [["agent_a", "agent_b", "winner"], ["m", "n", "abstain"]]
    assert_refused(cli(str(write(tmp_path / "f.csv", rows)), "--skip", "abstain"), "no battle")


@pytest.mark.parametrize(
    ("rows", "args", "fragments"),
    [
        ([["m", "m", "A", "1"]], (), ("line 2", "plays itself")),
        ([["m", "", "A", "1"]], (), ("line 2", "empty")),
        ([["m", "n", "A", "heavy"]], ("--weight", "w"), ("line 2", "'heavy'", "w")),
        ([["m", "n", "A", "-1"]], ("--weight", "w"), ("line 2", "'-1'")),
        ([["m", "n", "A", "1"]], ("--cluster", "judge"), ("--cluster judge", "--judge")),
        ([["m", "n", "A", "1"]], ("--tie", "A"), ("value(s) A", "mapped twice")),
        ([["m", "n", "A", "1"]], ("--bootstrap", "-1"), ("--bootstrap",)),
        ([["m", "n", "A", "1"]], ("--ridge", "-1"), ("--ridge",)),
    ],
)
def test_bad_rows_and_flags_are_refused(tmp_path, rows, args, fragments):
    path = write(tmp_path / "f.csv", [["agent_a", "agent_b", "winner", "w"], *rows])
    assert_refused(cli(str(path), *args), *fragments)


def test_missing_file_is_refused(tmp_path):
    assert_refused(cli(str(tmp_path / "nope.csv")), "nope.csv", "check the path")
