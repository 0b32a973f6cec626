"""`python -m ratings fit` on Parquet (issue 38 item 4, the CLI under 200 MB): the rows
are read by a child process (``ratings.cli_files.parquet_to_csv``) and handed over as
CSV text, so pyarrow never loads in the process that fits. The hand-over changes no
cell, a corrupt file or a missing pyarrow is one line, and a reader that stops early
leaves no child behind."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratings.cli_files import CliError, _cell, file_records
from tests.ratings.test_cli import MAPPING, PYTHON, ROOT, arena_csv, cli

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# Values a CSV hand-over could get wrong: the delimiter, quotes, line ends, NUL, text
# beyond ASCII, empty text beside null, every digit of a float, bools, nested values.
AWKWARD = {
    "text": ["a,b", 'say "hi"', "two\nlines", "cr\r", "nul\x00byte", "café ✓", "", None],
    "number": [0.1, 1 / 3, -0.0, 1e-300, 2.5, None, 7.0, 123456789.123456789],
    "count": [1, -2, None, 2**40, 0, 5, 6, 7],
    "flag": [True, False, None, True, False, True, False, True],
    "nested": [[1, 2], [], None, [3], [4, 5, 6], [7], [8], [9]],
}


def test_the_child_hands_over_every_cell_unchanged(tmp_path):
    path = tmp_path / "awkward.parquet"
    pq.write_table(pa.table(AWKWARD), path)
    header = list(AWKWARD)
    expected = [(0, header)] + [
        (row + 1, [_cell(AWKWARD[name][row]) for name in header]) for row in range(8)
    ]
    assert list(file_records(path, "parquet")) == expected


def test_parquet_and_csv_of_the_same_battles_give_the_same_board(tmp_path):
    path, rows = arena_csv(tmp_path / "battles.csv")
    table = pa.table({name: [row[k] for row in rows[1:]] for k, name in enumerate(rows[0])})
    pq.write_table(table, tmp_path / "battles.parquet")
    flags = (*MAPPING, "--judge", "rater", "--bootstrap", "50")
    from_csv = cli(str(path), *flags)
    from_parquet = cli(str(tmp_path / "battles.parquet"), *flags)
    assert from_csv.returncode == from_parquet.returncode == 0, from_parquet.stderr
    a, b = json.loads(from_csv.stdout), json.loads(from_parquet.stdout)
    for document in (a, b):
        for name in ("file", "sha256"):
            document.pop(name)
    assert a == b


def test_pyarrow_never_loads_in_the_fitting_process(tmp_path):
    _, rows = arena_csv(tmp_path / "battles.csv", n=60)
    table = pa.table({name: [row[k] for row in rows[1:]] for k, name in enumerate(rows[0])})
    pq.write_table(table, tmp_path / "battles.parquet")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    code = (
        "import sys\n"
        "from ratings.cli import main\n"
        "assert main(sys.argv[1:]) == 0\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'pyarrow']\n"
        "print(len(loaded), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [PYTHON, "-c", code, "fit", str(tmp_path / "battles.parquet"), *MAPPING],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "0"
    assert json.loads(done.stdout)["battles"] > 0


def test_a_corrupt_file_is_one_line(tmp_path):
    path = tmp_path / "battles.parquet"
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"agent_a": ["x"], "agent_b": ["y"], "winner": ["A"]}), good)
    data = good.read_bytes()
    path.write_bytes(data[:4] + b"\x00" * (len(data) - 8) + data[-4:])  # magic kept
    done = cli(str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "is not a readable Parquet file" in lines[0] and "check the file" in lines[0]
    assert "Traceback" not in done.stderr


def test_without_pyarrow_the_error_says_what_to_install(tmp_path):
    path = tmp_path / "battles.parquet"
    pq.write_table(pa.table({"agent_a": ["x"], "agent_b": ["y"], "winner": ["A"]}), path)
    fake = tmp_path / "fake"
    (fake / "pyarrow").mkdir(parents=True)
    (fake / "pyarrow" / "__init__.py").write_text("raise ImportError('no pyarrow here')\n")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(ROOT)])
    done = subprocess.run(
        [PYTHON, "-m", "ratings", "fit", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "needs pyarrow (pip install pyarrow)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _children() -> set[int]:
    listed = Path(f"/proc/self/task/{os.getpid()}/children")
    if not listed.exists():
        pytest.skip("no /proc children list here")
    return set(map(int, listed.read_text().split()))


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_reader_that_stops_early_leaves_no_child(tmp_path):
    path = tmp_path / "many.parquet"
    n = 200_000  # more than a pipe holds: the child is still writing when we stop
    pq.write_table(pa.table({"agent_a": ["x"] * n, "agent_b": ["y"] * n}), path)
    before = _children()
    records = file_records(path, "parquet")
    assert next(records) == (0, ["agent_a", "agent_b"])
    assert next(records) == (1, ["x", "y"])
    assert _children() - before  # the child runs
    records.close()
    assert _children() == before


def test_the_error_names_the_file(tmp_path):
    path = tmp_path / "not-parquet.parquet"
    path.write_bytes(b"this is not parquet at all")
    with pytest.raises(CliError, match=r"not-parquet\.parquet is not a readable Parquet file"):
        list(file_records(path, "parquet"))
