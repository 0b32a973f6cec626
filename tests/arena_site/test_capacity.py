"""The capacity simulation (arena_site/capacity.py): its queues against closed forms,
saturation failing the SLOs, the search's plan minimal, bad inputs named."""

import copy
import json
import re
from math import factorial
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from arena_site import capacity, capacity_search
from arena_site.capacity_inputs import (
    CapacityInputError,
    Plan,
    Traffic,
    costs_load,
    costs_parse,
    plan_parse,
)

COSTS_PATH = Path(__file__).resolve().parents[2] / "docs" / "capacity-costs.json"


@pytest.fixture(scope="module")
def raw_costs() -> dict:
    return json.loads(COSTS_PATH.read_text())


@pytest.fixture(scope="module")
def costs():
    return costs_load(COSTS_PATH)


def poisson_arrivals(rate_per_ms: float, n: int, rng) -> np.ndarray:
    return np.cumsum(rng.exponential(1 / rate_per_ms, n)) / 1000.0  # seconds


def erlang_c_wait(lam: float, mu: float, c: int) -> float:
    """Mean wait in M/M/c (same time unit as 1/mu)."""
    a, rho = lam / mu, lam / (c * mu)
    terms = sum(a**k / factorial(k) for k in range(c))
    top = a**c / factorial(c) / (1 - rho)
    return top / (terms + top) / (c * mu - lam)


@pytest.mark.parametrize(
    ("rho", "cv", "servers", "expected"),
    [
        (0.5, 1.0, 1, 0.5 / 0.5),  # M/M/1: ρ/(μ−λ), μ = 1/ms
        (0.7, 1.0, 1, 0.7 / 0.3),
        (0.7, 0.0, 1, 0.7 / (2 * 0.3)),  # M/D/1: ρ/(2μ(1−ρ))
        (0.6, 0.0, 1, 0.6 / (2 * 0.4)),
        (0.7, 1.0, 2, None),  # M/M/2: Erlang C
        (0.8, 1.0, 4, None),  # M/M/4
    ],
)
def test_queue_waits_match_closed_forms_at_moderate_load(rho, cv, servers, expected):
    # given Poisson arrivals and service times of mean 1 ms
    rng = np.random.default_rng(7)
    n = 200_000 if servers == 1 else 100_000
    lam = rho * servers  # per ms
    arrivals = poisson_arrivals(lam, n, rng)
    services = capacity._services(rng, 1.0, cv, n)
    # when the queue is simulated
    waits = capacity.fcfs_waits(arrivals, services, servers)
    # then the mean wait is the closed form's within 6 %
    if expected is None:
        expected = erlang_c_wait(lam, 1.0, servers)
    assert waits[n // 10 :].mean() == pytest.approx(expected, rel=0.06)


def test_a_single_server_matches_the_many_server_recursion_with_one_server():
    rng = np.random.default_rng(3)
    arrivals = poisson_arrivals(0.8, 5_000, rng)
    services = capacity._services(rng, 1.0, 0.5, 5_000)
    lindley = capacity.fcfs_waits(arrivals, services, 1)
    free, loop = 0.0, []
    for t, s in zip(arrivals * 1000, services, strict=True):
        start = max(t, free)
        loop.append(start - t)
        free = start + s
    assert np.allclose(lindley, loop)


def test_batched_deciders_spend_the_overhead_once_per_batch():
    # given four decisions due at once and one decider taking batches of 4
    due = np.zeros(4)
    delays = capacity.batched_delays(due, 1, np.full(4, 10.0), 5.0, 4)
    # then they finish together after one overhead and four decisions
    assert delays.tolist() == [45.0, 45.0, 45.0, 45.0]
    # with batches of 2: two batches, the second after the first
    assert capacity.batched_delays(due, 1, np.full(4, 10.0), 5.0, 2).tolist() == [25, 25, 50, 50]


def test_a_saturated_resource_fails_the_slos(costs):
    # given 100 votes/s on one web process: 100 × (7 + 8.7) ms > 1 s of CPU a second
    traffic = Traffic(votes_per_s=100, decided_battles=0)
    plan = Plan(web_processes=1, pgbouncer_pool=64, postgres_cores=8, deciders=8)
    ev = capacity.evaluate(costs, plan, traffic, visits=5_000)
    # then the web process is over 100 %, its SLO fails, and so does the vote's p99
    web = ev.slos["web process utilisation"]
    assert web["value"] > 1.0 and not web["ok"]
    assert not ev.slos["vote p99 ms"]["ok"]
    assert not ev.ok
    assert ev.first_saturating() == "web process"
    # and with enough processes it holds
    ev = capacity.evaluate(costs, plan.with_(web_processes=4), traffic, visits=5_000)
    assert ev.slos["web process utilisation"]["ok"] and ev.slos["vote p99 ms"]["ok"]


def test_the_board_group_saturates_whatever_the_channel_instances(costs):
    traffic = Traffic(votes_per_s=2_000, decided_battles=0)
    plan = Plan(web_processes=64, redis_channels=8)
    ev = capacity.evaluate(costs, plan, traffic, visits=3_000)
    assert not ev.slos["redis channels (board group) utilisation"]["ok"]
    capped = capacity.evaluate(costs, plan.with_(board_frame_hz=10.0), traffic, visits=3_000)
    assert capped.slos["redis channels (board group) utilisation"]["ok"]


def test_the_search_finds_a_plan_meeting_the_slos_and_one_less_fails(costs):
    traffic = Traffic(votes_per_s=400, board_reads_per_s=40, battles_per_s=0.1,
                      decided_battles=1e6)  # fmt: skip
    start = Plan(web_processes=1, pgbouncer_pool=1, postgres_cores=1, battle_hosts=10)
    found = capacity_search.search(costs, traffic, start=start, visits=4_000)
    assert found.unfixable == {}
    ev = found.evaluation
    assert ev.ok
    # one less of the resource that saturates first (and of every sized knob) fails
    first = ev.resources[ev.first_saturating()].knob
    assert getattr(ev.plan, first) > 1
    sized = [k for k in capacity_search.SEARCHED if getattr(ev.plan, k) > 1]
    assert first in sized
    for knob in sized:
        less = ev.plan.with_(**{knob: getattr(ev.plan, knob) - 1})
        assert not capacity.evaluate(costs, less, traffic, visits=4_000).ok, knob


def test_the_search_names_what_no_knob_relieves(costs):
    traffic = Traffic(votes_per_s=400, decided_battles=1e9)  # a refit of ~28 min
    start = Plan(web_processes=1, pgbouncer_pool=1, postgres_cores=1)
    found = capacity_search.search(costs, traffic, start=start, visits=3_000)
    assert "refit s (every period)" in found.unfixable


def test_validate_predicts_a_ramp_that_gets_worse_with_the_rate(costs):
    report = capacity_search.validate(costs, visits=3_000)
    p99 = [s["p99_ms"] for s in report["steps"]]
    assert p99 == sorted(p99)
    clean = [s["offered_per_s"] for s in report["steps"] if s["clean"]]
    assert report["predicted_highest_clean_step_per_s"] == max(clean)
    assert report["predicted_highest_clean_rate_per_s"] >= max(clean)
    assert report["measured_highest_clean_step_per_s"] > 0


def _without(raw: dict, *path: str) -> dict:
    data = copy.deepcopy(raw)
    node = data
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return data


def _with(raw: dict, value, *path: str) -> dict:
    data = copy.deepcopy(raw)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: _without(r, "ops", "vote", "db_round_trips"), "ops.vote.db_round_trips: miss"),
        (lambda r: _without(r, "ops", "judge_next"), "ops.judge_next: missing"),
        (lambda r: _without(r, "postgres"), "postgres: missing"),
        (lambda r: _with(r, "7", "ops", "vote", "web_cpu_ms", "value"),
         "ops.vote.web_cpu_ms.value: expected a number"),
        (lambda r: _with(r, -1, "refit", "base_s", "value"), "refit.base_s.value: must be ≥ 0"),
        (lambda r: _with(r, "", "ops", "decision", "cv", "source"), "ops.decision.cv.source"),
        (lambda r: _with(r, 1.5, "machine", "cores", "value"), "machine.cores.value: expected a"),
        (lambda r: _with(r, 3, "battle", "host_cores"), "battle.host_cores: expected {'value'"),
    ],
)  # fmt: skip
def test_a_bad_costs_file_names_the_field(raw_costs, change, named):
    with pytest.raises(CapacityInputError, match="costs: " + re.escape(named)):
        costs_parse(change(raw_costs))


@pytest.mark.parametrize(
    ("plan", "named"),
    [
        ({"web_procs": 2}, "web_procs: unknown field"),
        ({"postgres_cores": 0}, "postgres_cores: must be ≥ 1"),
        ({"deciders": 2.5}, "deciders: expected a whole number"),
        ({"incremental_refit": 1}, "incremental_refit: expected true or false"),
        ({"board_frame_hz": "10"}, "board_frame_hz: expected a number"),
    ],
)
def test_a_bad_plan_names_the_field(plan, named):
    with pytest.raises(CapacityInputError, match=named):
        plan_parse(plan)


def test_the_command_refuses_a_bad_costs_file_naming_the_field(tmp_path, raw_costs):
    bad = tmp_path / "costs.json"
    bad.write_text(json.dumps(_without(raw_costs, "ops", "vote", "redis_cpu_ms")))
    with pytest.raises(CommandError, match=r"ops\.vote\.redis_cpu_ms: missing"):
        call_command("capacity_plan", costs=str(bad), validate=True)
    (tmp_path / "nojson.json").write_text("{")
    with pytest.raises(CommandError, match="not JSON"):
        call_command("capacity_plan", costs=str(tmp_path / "nojson.json"))


def test_the_command_evaluates_a_given_plan(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"web_processes": 4, "pgbouncer_pool": 16, "postgres_cores": 4}))
    call_command("capacity_plan", plan=str(plan), votes_per_s=100, visits=2_000, as_json=True)
    out = json.loads(capsys.readouterr().out)["evaluation"]
    assert out["plan"]["web_processes"] == 4
    assert "web process" in out["resources"]
