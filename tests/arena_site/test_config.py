"""The typed ARENA settings: every bad value stops start-up with the variable's name."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from arena_site.config import ArenaConfig

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_spec_constants():
    config = ArenaConfig()
    assert (config.queue_max, config.dup_theta, config.match_kappa, config.match_epsilon) == (
        1000,
        0.55,
        4.0,
        0.05,
    )
    assert (config.k_max, config.k_min, config.n0, config.ridge, config.r0) == (
        48.0,
        12.0,
        30,
        1e-3,
        1000.0,
    )


def test_values_come_from_the_environment():
    config = ArenaConfig.from_env(
        {
            "ARENA_QUEUE_MAX": "7",
            "ARENA_SANDBOX_DESKTOP": "off",
            "ARENA_MODEL_PRICES": '{"m": [1, 2.5]}',
            "ARENA_MIN_READ_S": " ",  # empty means the default
        },
        data_dir=Path("/srv/arena"),
    )
    assert config.queue_max == 7
    assert config.sandbox_desktop is False
    assert config.model_prices == {"m": [1, 2.5]}
    assert config.min_read_s == 5.0
    assert config.sandbox_root == Path("/srv/arena/sandboxes")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"ARENA_QUEUE_MAX": "0"}, "ARENA_QUEUE_MAX must be >= 1, got 0"),
        ({"ARENA_QUEUE_MAX": "many"}, "ARENA_QUEUE_MAX must be an integer, got 'many'"),
        ({"ARENA_QUEUE_MAX": "1.5"}, "ARENA_QUEUE_MAX must be an integer"),
        ({"ARENA_DUP_THETA": "nan"}, "ARENA_DUP_THETA must be finite"),
        ({"ARENA_DUP_THETA": "1.5"}, "ARENA_DUP_THETA must be <= 1.0"),
        ({"ARENA_REDUNDANCY_FRACTION": "-0.1"}, "ARENA_REDUNDANCY_FRACTION must be >= 0.0"),
        ({"ARENA_SANDBOX_DESKTOP": "maybe"}, "ARENA_SANDBOX_DESKTOP must be a boolean"),
        ({"ARENA_SANDBOX_BACKEND": "k8s"}, "must be one of local, docker"),
        ({"ARENA_MODEL_PRICES": "{"}, "ARENA_MODEL_PRICES must be JSON"),
        ({"ARENA_MODEL_PRICES": '{"m": [1]}'}, "the price of 'm' must be"),
        ({"ARENA_MODEL_PRICES": '{"m": [1, -2]}'}, "two numbers >= 0"),
        ({"ARENA_MODEL_PRICES": "[1, 2]"}, "must be a JSON object"),
        ({"ARENA_MATCH_EPSILON": "0"}, "ARENA_MATCH_EPSILON must be >= 1e-09"),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(environ, message):
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        ArenaConfig.from_env(environ)


def test_replace_validates_too():
    with pytest.raises(ImproperlyConfigured, match=re.escape("ARENA_MIN_READ_S must be >= 0.0")):
        ArenaConfig().replace(min_read_s=-1.0)
    with pytest.raises(ImproperlyConfigured, match=r"K_MIN .* must not exceed K_MAX"):
        ArenaConfig().replace(k_min=50.0)
    with pytest.raises(TypeError):
        ArenaConfig().replace(no_such_knob=1)


def test_the_config_is_frozen():
    config = ArenaConfig()
    with pytest.raises(AttributeError):
        config.queue_max = 5  # type: ignore[misc]


def test_a_bad_value_stops_start_up_with_a_message(tmp_path):
    env = {**os.environ, "ARENA_QUEUE_MAX": "-3", "ARENA_DATA_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "ARENA_QUEUE_MAX must be >= 1, got -3" in done.stderr
