"""Benchmark: peak memory and wall time of ``python -m ratings fit`` on a big file.
Prints one JSON document.

Writes N battles (1,000,000 by default) among 50 agents with 200 judges, ties, both_bad
and weights (``--weights many``: 900 distinct values, about one cell per battle; ``few``:
eight; ``none``: no weight column; a comma-separated list runs each), as CSV, JSON Lines
and (with pyarrow) Parquet, then runs the CLI on each as a subprocess (``--judge judge``,
judge-clustered intervals, ``--weight weight``, a short bootstrap) and reads the child's
peak resident set size from ``resource.getrusage(RUSAGE_CHILDREN)`` (one child per
measurement: the CLI is run from a fresh measuring process each time, so the figure is
that CLI run's own peak). Target (issue #38): under 200 MB at a million votes.

Each measurement runs twice (``--kernels aot,jit``): with the fit's loops compiled ahead
of time (``ratings.kernels_aot``, what the setup builds; the CLI then loads no numba) and,
as the reference, with numba compiling them just in time (``ARENA_KERNELS=jit``, the CLI
before). ``same_output`` says whether the two printed the same document, byte for byte.

``floor_rss_mb`` is the same command on the first 100 battles of the same file: what
any fit costs before its data. With the loops built ahead of time it is Python, numpy,
scipy.special and the CLI (~70 MB). With numba's it is about 190 MB: numba with its LLVM
library (``import numba``, ~105 MB: libllvmlite's pages alone ~65 MB) and the first call
of a cached loop (~40 MB: numba's lowering registries, which import scipy.linalg through
``numba.np.arraymath``, and LLVM's code generator) come on top (measured at checkpoints
with /proc/self/status). Reading the file (streamed into compact columns, reduced to
cells and sums per (judge, pair)) peaks about as high as the fit, and what it frees is
reused by the fit's own allocations. ``above_floor_mb`` is then what the fit holds for
the data: the (judge, pair) sums (200 × 1,225 rows here) and the cells, which with
``many`` weights are nearly one per battle (taken as the CLI hands them over, not sorted
again: ``cells.count_cells``). ``tree_rss_mb`` counts the child that reads a Parquet
file beside the CLI waiting for it.

Run: .venv/bin/python tests/bench/bench_cli_memory.py [--battles N] [--bootstrap R]
     [--weights many,few,none] [--formats csv,jsonl,parquet] [--kernels aot,jit]
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
FLOOR_BATTLES = 100  # the floor: the same command on a file this small

# Runs one command and prints its peak RSS (kB) and wall time: a fresh process per
# measurement, so RUSAGE_CHILDREN holds that command's figures only (the largest of its
# processes: the CLI, or the child that reads a Parquet file for it). ``tree_kb`` is the
# largest sum of the VmRSS of the command and its children at once, sampled every 10 ms.
MEASURE = """
import json, resource, subprocess, sys, time
from pathlib import Path

def tree(pid):
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        total = int(next(l for l in status if l.startswith("VmRSS")).split()[1])
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (OSError, StopIteration):
        return 0
    return total + sum(tree(int(kid)) for kid in kids)

started = time.perf_counter()
output = open(sys.argv[1], "wb")
child = subprocess.Popen(sys.argv[2:], stdout=output, stderr=subprocess.PIPE)
import threading
errors = []
reader = threading.Thread(target=lambda: errors.append(child.stderr.read()))
reader.start()
most = 0
while child.poll() is None:
    most = max(most, tree(child.pid))
    time.sleep(0.01)
reader.join()
wall = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": child.returncode, "peak_kb": peak, "tree_kb": most, "wall_s": wall,
                  "stderr": errors[0].decode()[-400:]}))
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


KERNELS = ("aot", "jit")


def environment(kernels: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    env["PYTHONPATH"] = str(ROOT)
    env.pop("ARENA_KERNELS", None)
    if kernels == "jit":
        env["ARENA_KERNELS"] = "jit"
    return env


def check_kernels(kernels: str) -> None:
    """Refuses to measure "aot" where the CLI would fall back to numba's loops."""
    done = subprocess.run(
        [PYTHON, "-c", "from ratings import kernels; print(kernels.implementation())"],
        cwd=ROOT, env=environment(kernels), capture_output=True, text=True, check=True,
    )  # fmt: skip
    if done.stdout.strip() != kernels:
        raise SystemExit(
            f"asked for {kernels} loops, the CLI runs {done.stdout.strip()}: "
            "build them with .venv/bin/python -m ratings.kernels_aot build"
        )


def measure(path: Path, bootstrap: int, weighted: bool, kernels: str, output: Path) -> dict:
    command = [PYTHON, "-m", "ratings", "fit", str(path), "--judge", "judge"]
    command += ["--bootstrap", str(bootstrap), *(["--weight", "weight"] if weighted else [])]
    done = subprocess.run(
        [PYTHON, "-c", MEASURE, str(output), *command],
        cwd=ROOT, env=environment(kernels), capture_output=True, text=True,
    )  # fmt: skip
    figures = json.loads(done.stdout)
    if figures["rc"] != 0:
        raise SystemExit(f"the CLI failed on {path}: {figures['stderr']}")
    return {
        "file_mb": round(path.stat().st_size / 1e6, 1),
        "peak_rss_mb": round(figures["peak_kb"] / 1024, 1),
        "tree_rss_mb": round(figures["tree_kb"] / 1024, 1),
        "wall_s": round(figures["wall_s"], 2),
        "under_limit": max(figures["peak_kb"], figures["tree_kb"]) / 1024 < LIMIT_MB,
    }


def run_setting(options: argparse.Namespace, weights: str, scratch: Path) -> dict:
    """The floor and the peak of every format for one weight setting."""
    weighted = WEIGHTS[weights] is not None
    folder = scratch / weights
    folder.mkdir()
    started = time.perf_counter()
    columns = battles(options.battles, weights)
    files = write_files(folder, columns)
    written = time.perf_counter() - started
    small = folder / "floor"
    small.mkdir()
    tiny = write_files(small, {k: v[:FLOOR_BATTLES] for k, v in columns.items()})["csv"]
    del columns
    results: dict = {"write_s": round(written, 1)}
    for kernels in options.kernels.split(","):
        # Once unmeasured first: a loop numba has not cached yet (ratings/kernels_numba.py
        # just edited) is compiled on that run, which costs LLVM's optimiser on top.
        scratch_out = folder / f"floor-{kernels}.json"
        measure(tiny, options.bootstrap, weighted, kernels, scratch_out)
        floor = measure(tiny, options.bootstrap, weighted, kernels, scratch_out)
        cli = {}
        for kind, path in files.items():
            if kind in options.formats.split(","):
                out = folder / f"{kind}-{kernels}.json"
                cli[kind] = measure(path, options.bootstrap, weighted, kernels, out)
                cli[kind]["above_floor_mb"] = round(
                    cli[kind]["peak_rss_mb"] - floor["peak_rss_mb"], 1
                )
        results[kernels] = {"floor_rss_mb": floor["peak_rss_mb"], "cli": cli}
    for kind in results.get("aot", {}).get("cli", {}):
        if all((folder / f"{kind}-{k}.json").exists() for k in KERNELS):
            outputs = {(folder / f"{kind}-{k}.json").read_bytes() for k in KERNELS}
            results["aot"]["cli"][kind]["same_output"] = len(outputs) == 1
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--battles", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", type=int, default=20)
    parser.add_argument(
        "--weights",
        default="many,few,none",
        help="the weight column, comma-separated settings: 900 distinct values (many), "
        "eight (few) or none",
    )
    parser.add_argument("--formats", default="csv,jsonl,parquet")
    parser.add_argument(
        "--kernels",
        default="aot,jit",
        help="the fit's loops: compiled ahead of time (aot) and/or by numba (jit, the "
        "reference), comma-separated",
    )
    options = parser.parse_args()
    for kernels in options.kernels.split(","):
        if kernels not in KERNELS:
            parser.error(f"unknown --kernels {kernels}; choose from aot, jit")
        check_kernels(kernels)
    settings = options.weights.split(",")
    unknown = [name for name in settings if name not in WEIGHTS]
    if unknown:
        parser.error(f"unknown --weights {', '.join(unknown)}; choose from {', '.join(WEIGHTS)}")
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as scratch:
        results = {name: run_setting(options, name, Path(scratch)) for name in settings}
    print(
        json.dumps(
            {
                "battles": options.battles,
                "agents": AGENTS,
                "judges": JUDGES,
                "bootstrap": options.bootstrap,
                "floor_battles": FLOOR_BATTLES,
                "limit_mb": LIMIT_MB,
                "weights": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
