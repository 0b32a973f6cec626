"""No JSON the project writes holds NaN or Infinity (issue 38 item 4): non-finite
numbers pushed into each kind of output — the encoder itself, the API (DRF), Django's
JsonResponse, websocket frames, the open-data files and manifest, the CLI — come out as
strict JSON, read back by a parser that refuses NaN/Infinity, with null in their place
(``arena_site.strict_json``: null is "not available")."""

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.http import JsonResponse
from django.test import Client, RequestFactory
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from arena_site import strict_json
from arena_site.realtime import frame_text
from arena_site.renderers import StrictJSONMiddleware
from arena_site.strict_json import loads_strict
from exports.schema import RATINGS
from exports.writers import TableWriter
from tests.ratings.test_cli import cli, write

NASTY = {
    "nan": float("nan"),
    "inf": float("inf"),
    "neg": -math.inf,
    "np": np.float64("nan"),
    "np32": np.float32("inf"),
    "nested": [1.5, {"deep": (float("inf"), 2)}],
    "text": "NaN and Infinity in a string stay",
}
CLEAN = {
    "nan": None,
    "inf": None,
    "neg": None,
    "np": None,
    "np32": None,
    "nested": [1.5, {"deep": [None, 2]}],
    "text": "NaN and Infinity in a string stay",
}


def test_the_strict_parser_refuses_what_json_does_not_have():
    for text in ("NaN", "[Infinity]", '{"a": -Infinity}'):
        with pytest.raises(ValueError):
            loads_strict(text)
    assert json.loads("NaN") != json.loads("NaN")  # the lenient parser would have read it


def test_the_encoder_writes_null_for_every_non_finite_number():
    assert loads_strict(strict_json.dumps(NASTY)) == CLEAN
    assert loads_strict(json.dumps(NASTY, cls=strict_json.StrictJSONEncoder)) == CLEAN
    clean = {"a": 1.0, "b": [2, "x"]}
    assert strict_json.finite(clean) is clean  # nothing replaced, nothing copied


def _api_view(request):
    class Nasty(APIView):
        authentication_classes: list = []
        permission_classes: list = []

        def get(self, request):
            return Response(NASTY)

    return Nasty.as_view()(request)


def test_the_api_renders_null_not_a_500():
    response = _api_view(APIRequestFactory().get("/nasty/"))
    response.render()
    assert response.status_code == 200
    assert loads_strict(response.content) == CLEAN


def test_json_responses_are_rewritten_by_the_middleware():
    assert settings.MIDDLEWARE[0] == "arena_site.renderers.StrictJSONMiddleware"
    payload = {k: v for k, v in NASTY.items() if k != "np32"}  # DjangoJSONEncoder: floats

    def view(request):
        response = JsonResponse(payload)
        response["Content-Length"] = str(len(response.content))
        return response

    response = StrictJSONMiddleware(view)(RequestFactory().get("/"))
    assert loads_strict(response.content) == {k: v for k, v in CLEAN.items() if k != "np32"}
    assert response["Content-Length"] == str(len(response.content))
    untouched = JsonResponse({"text": "NaN"})
    assert StrictJSONMiddleware(lambda r: untouched)(RequestFactory().get("/")) is untouched
    assert untouched.content == b'{"text": "NaN"}'


@pytest.mark.django_db
def test_a_real_api_answer_with_an_infinite_interval(roster):
    """The public board with a rating point whose interval has no end (as a single tie
    gives): null in the API's answer, never Infinity, never a 500."""
    from agents.models import Arena
    from ratings.models import RatingPoint, RatingSnapshot, RefitState
    from ratings.services import leaderboard_changed

    arena = Arena.objects.public()
    snapshot = RatingSnapshot.objects.create(
        arena=arena, computed_at="2026-12-01T00:00Z", compute_ms=1, battles=1, digest="x",
        ridge=1e-3, bootstrap_replicates=0, seed=1, min_battles=0, iterations=1,
        converged=True, robust_published=False, critical_value=1.96,
        effective_clusters=float("nan"),
    )  # fmt: skip
    for agent in roster:
        RatingPoint.objects.create(
            snapshot=snapshot, agent=agent, rating=1000.0, lower=-math.inf, upper=math.inf,
            rank_lower=1, rank_upper=3, battles=1, weight=1.0, provisional=False,
        )  # fmt: skip
    RefitState.objects.update_or_create(arena=arena, defaults={"snapshot": snapshot})
    leaderboard_changed(arena_id=arena.pk)
    response = Client().get("/api/leaderboard/")
    assert response.status_code == 200
    rows = loads_strict(response.content)["rows"]
    assert rows and all(r["rating"] == 1000.0 for r in rows)
    assert all(r["lower"] is None and r["upper"] is None for r in rows)  # they reached it
    assert b"Infinity" not in response.content and b"NaN" not in response.content


def test_websocket_frames_are_strict():
    # (a message with a "text" is sent as that text: not JSON, so not part of this)
    payload = {k: v for k, v in NASTY.items() if k != "text"}
    frame = frame_text({"type": "realtime.frame", **payload})
    assert loads_strict(frame) == {k: v for k, v in CLEAN.items() if k != "text"}


def test_the_export_files_hold_null(tmp_path: Path):
    row = {c.name: 0 for c in RATINGS.columns} | {
        "arena": "public", "computed_at": "2026-12-01T00:00:00+00:00", "agent": "x",
        "agent_name": "X", "unavailable": "", "interval": "battle", "bootstrap_unit": "battles",
        "provisional": False, "converged": True, "rating": 1000.0, "weight": 1.0,
        "ridge": 1e-3, "r0": 1000.0, "critical_value": 1.96,
        "lower": float("-inf"), "upper": float("nan"),
    }  # fmt: skip
    writer = TableWriter(RATINGS, tmp_path, ("jsonl", "parquet"))
    writer.write(row)
    writer.close()
    (line,) = (tmp_path / "ratings.jsonl").read_text().splitlines()
    written = loads_strict(line)
    assert written["lower"] is None and written["upper"] is None and written["rating"] == 1000.0
    table = pq.read_table(tmp_path / "ratings.parquet").to_pylist()
    assert table[0]["lower"] is None and table[0]["upper"] is None  # the same rows in both


def test_the_manifest_is_strict():
    assert loads_strict(strict_json.dumps({"round_trip": {"critical_value": math.inf}})) == {
        "round_trip": {"critical_value": None}
    }


def test_a_single_tie_gives_the_cli_null_intervals(tmp_path: Path):
    """The file of issue 38: one tie. Its intervals have no end; the CLI printed
    Infinity, which strict readers refuse."""
    done = cli(
        str(write(tmp_path / "one.csv", [["agent_a", "agent_b", "winner"], ["x", "y", "tie"]]))
    )
    assert done.returncode == 0, done.stderr
    document = loads_strict(done.stdout)
    assert [(a["lower"], a["upper"]) for a in document["agents"]] == [(None, None)] * 2
    assert all(a["rating"] == 1000.0 for a in document["agents"])


def test_server_sent_events_are_strict():
    from battles.event_stream import sse

    event = sse("phase", {k: v for k, v in NASTY.items()}).decode()
    name, data, _, _ = event.split("\n")
    assert name == "event: phase"
    assert loads_strict(data.removeprefix("data: ")) == CLEAN


def test_management_commands_print_their_json_strictly():
    """A command's --json report goes through strict_json (its figures can be NaN: a
    simulated rate of nothing, an interval with no end); a bare json.dump would write
    NaN. Read from the commands' source, since their inputs cannot be made to hold one."""
    root = Path(settings.BASE_DIR)
    bare = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.glob("*/management/commands/*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ("json.dump(" in line or "json.dumps(" in line) and "strict_json." not in line
    ]
    assert bare == []
