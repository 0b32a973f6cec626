"""Benchmark: peak memory and wall time of ``python -m ratings fit`` on a big file.
Prints one JSON document.

Writes N battles (1,000,000 by default) among 50 agents with 200 judges, ties, both_bad
and weights (900 distinct values by default; ``--weights few`` eight, ``none`` none),
as CSV, JSON Lines and (with pyarrow) Parquet, then runs the CLI on each as a
subprocess (``--judge judge``, judge-clustered intervals, ``--weight weight``, a short
bootstrap) and reads the child's peak resident set size from
``resource.getrusage(RUSAGE_CHILDREN)`` (one child per measurement: the CLI is run
from a fresh measuring process each time, so the figure is that CLI run's own peak).
Target (issue #38): under 200 MB at a million votes.

The peak has two parts: reading (the file streamed into compact columns, reduced to
cells and sums per (judge, pair)) and the fit, whose compiled kernels (numba, LLVM:
about 140 MB of their own, ~195 MB for any fit with numpy and scipy) are loaded after
the per-battle columns are gone.

Run: .venv/bin/python tests/bench/bench_cli_memory.py [--battles N] [--bootstrap R]
     [--weights many|few|none] [--formats csv,jsonl,parquet]
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
if not Path(PYTHON).exists():
    PYTHON = sys.executable
AGENTS, JUDGES = 50, 200
LIMIT_MB = 200

# Runs one command and prints its peak RSS (kB) and wall time: a fresh process per
# measurement, so RUSAGE_CHILDREN holds that command's figures only.
MEASURE = """
import resource, subprocess, sys, time, json
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": done.returncode, "peak_kb": peak, "wall_s": wall,
                  "stderr": done.stderr.decode()[-400:]}))
"""


WEIGHTS = {
    # 900 distinct weights (0.100 … 1.000): about as many cells as battles
    "many": lambda rng, n: np.round(rng.uniform(0.1, 1.0, n), 3),
    # a judge's trust takes few values: eight
    "few": lambda rng, n: rng.choice([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0], n),
    "none": None,
}


def battles(n: int, weights: str = "many", seed: int = 38) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    strength = rng.normal(0, 1, AGENTS)
    a = rng.integers(0, AGENTS, n)
    b = (a + rng.integers(1, AGENTS, n)) % AGENTS
    p = 1 / (1 + np.exp(-(strength[a] - strength[b])))
    u = rng.random(n)
    winner = np.where(u < 0.08, "tie", np.where(u < 0.12, "both_bad", np.where(
        rng.random(n) < p, "A", "B")))  # fmt: skip
    columns = {
        "agent_a": np.char.add("agent-", a.astype(str)),
        "agent_b": np.char.add("agent-", b.astype(str)),
        "winner": winner,
        "judge": np.char.add("j_", rng.integers(0, JUDGES, n).astype(str)),
    }
    if WEIGHTS[weights] is not None:
        columns["weight"] = WEIGHTS[weights](rng, n)
    return columns


def write_files(folder: Path, columns: dict[str, np.ndarray]) -> dict[str, Path]:
    names = list(columns)
    rows = list(zip(*(columns[k].tolist() for k in names), strict=True))
    files = {"csv": folder / "battles.csv", "jsonl": folder / "battles.jsonl"}
    with files["csv"].open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows(rows)
    with files["jsonl"].open("w") as handle:
        for row in rows:
            handle.write(json.dumps(dict(zip(names, row, strict=True))) + "\n")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return files
    files["parquet"] = folder / "battles.parquet"
    pq.write_table(pa.table({k: v.tolist() for k, v in columns.items()}), files["parquet"])
    return files


def measure(path: Path, bootstrap: int, weighted: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    command = [PYTHON, "-m", "ratings", "fit", str(path), "--judge", "judge"]
    command += ["--bootstrap", str(bootstrap), *(["--weight", "weight"] if weighted else [])]
    done = subprocess.run(
        [PYTHON, "-c", MEASURE, *command], cwd=ROOT, env=env, capture_output=True, text=True
    )
    figures = json.loads(done.stdout)
    if figures["rc"] != 0:
        raise SystemExit(f"the CLI failed on {path}: {figures['stderr']}")
    return {
        "file_mb": round(path.stat().st_size / 1e6, 1),
        "peak_rss_mb": round(figures["peak_kb"] / 1024, 1),
        "wall_s": round(figures["wall_s"], 2),
        "under_limit": figures["peak_kb"] / 1024 < LIMIT_MB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--battles", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", type=int, default=20)
    parser.add_argument(
        "--weights",
        choices=tuple(WEIGHTS),
        default="many",
        help="the weight column: 900 distinct values (many), eight (few) or none",
    )
    parser.add_argument("--formats", default="csv,jsonl,parquet")
    options = parser.parse_args()
    weighted = WEIGHTS[options.weights] is not None
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as scratch:
        started = time.perf_counter()
        files = write_files(Path(scratch), battles(options.battles, options.weights))
        written = time.perf_counter() - started
        results = {
            kind: measure(path, options.bootstrap, weighted)
            for kind, path in files.items()
            if kind in options.formats.split(",")
        }
    print(
        json.dumps(
            {
                "battles": options.battles,
                "agents": AGENTS,
                "judges": JUDGES,
                "bootstrap": options.bootstrap,
                "weights": options.weights,
                "limit_mb": LIMIT_MB,
                "write_s": round(written, 1),
                "cli": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
