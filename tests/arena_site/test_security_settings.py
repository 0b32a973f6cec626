"""Production settings that are safe by default: the secret key (environment, else the
data dir's generated file, else a refusal that says what to do), the HTTPS settings from
the environment, and `manage.py check --deploy` clean under the production environment
that docs/security.md documents."""

import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from arena_site.secret import (
    ENV_NAME,
    FILE_NAME,
    SecretKeyError,
    secret_key_generate,
    secret_key_load,
)
from arena_site.settings import env_header_value, env_networks

ROOT = Path(__file__).resolve().parent.parent.parent
STRONG = secrets.token_urlsafe(50)


# --- the key ---------------------------------------------------------------------------


def test_the_generated_key_is_strong_private_and_loaded(tmp_path):
    path = secret_key_generate(tmp_path / "data")

    assert path == tmp_path / "data" / FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = secret_key_load(tmp_path / "data", environ={})
    assert key == path.read_text().strip()
    assert len(key) >= 50
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind


def test_an_existing_key_file_is_never_overwritten(tmp_path):
    path = secret_key_generate(tmp_path)
    first = path.read_text()

    secret_key_generate(tmp_path)

    assert path.read_text() == first


def test_two_data_dirs_get_different_keys(tmp_path):
    one = secret_key_generate(tmp_path / "one").read_text()
    two = secret_key_generate(tmp_path / "two").read_text()
    assert one != two


def test_the_environment_wins_over_the_file(tmp_path):
    secret_key_generate(tmp_path)
    assert secret_key_load(tmp_path, environ={ENV_NAME: STRONG}) == STRONG


def test_no_key_anywhere_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(SecretKeyError) as refused:
        secret_key_load(tmp_path, environ={ENV_NAME: "  "})
    message = str(refused.value)
    assert message.startswith(
        f"No secret key: ARENA_SECRET_KEY is not set and {tmp_path / FILE_NAME} does not exist."
    )
    assert "Set ARENA_SECRET_KEY" in message
    assert "run `make setup` or `make run`" in message


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("x" * 49 + "", "is 49 characters long; it needs at least 50"),
        ("abcd" * 20, "has 4 distinct characters; it needs at least 5"),
        ("django-insecure-" + STRONG, "starts with 'django-insecure-'"),
    ],
    # (named, not shown: STRONG is random, and every xdist worker must collect the same ids)
    ids=["short", "few-distinct", "django-insecure"],
)
def test_a_weak_key_is_refused(tmp_path, key, problem):
    with pytest.raises(SecretKeyError, match=re.escape(f"from ARENA_SECRET_KEY {problem}")):
        secret_key_load(tmp_path, environ={ENV_NAME: key})


def test_a_weak_key_file_is_refused_naming_the_file(tmp_path):
    (tmp_path / FILE_NAME).write_text("short\n")
    with pytest.raises(SecretKeyError, match=re.escape(f"from {tmp_path / FILE_NAME} is 5 char")):
        secret_key_load(tmp_path, environ={})


def test_the_settings_carry_no_key_of_their_own():
    source = (ROOT / "arena_site" / "settings.py").read_text()
    assert "SECRET_KEY = secret_key_load(DATA_DIR)" in source
    assert not re.search(r"SECRET_KEY\s*=\s*[\"']", source)
    assert "ARENA_REQUIRE_SECRET_KEY" not in source


# --- HTTPS settings from the environment -------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ("", None),
        ("HTTP_X_FORWARDED_PROTO=https", ("HTTP_X_FORWARDED_PROTO", "https")),
        (" HTTP_X_FORWARDED_SSL = on ", ("HTTP_X_FORWARDED_SSL", "on")),
    ],
)
def test_the_proxy_ssl_header_is_parsed(monkeypatch, raw, parsed):
    monkeypatch.setenv("ARENA_SECURE_PROXY_SSL_HEADER", raw)
    assert env_header_value("ARENA_SECURE_PROXY_SSL_HEADER") == parsed


@pytest.mark.parametrize(
    "raw",
    ["X-Forwarded-Proto=https", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_PROTO=", "=https",
     "http_x_forwarded_proto=https", "HTTP_X_FORWARDED_PROTO=https, http"],
)  # fmt: skip
def test_a_malformed_proxy_ssl_header_is_refused_with_its_name(monkeypatch, raw):
    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.setenv("ARENA_SECURE_PROXY_SSL_HEADER", raw)
    with pytest.raises(ImproperlyConfigured, match=r"^ARENA_SECURE_PROXY_SSL_HEADER must be "):
        env_header_value("ARENA_SECURE_PROXY_SSL_HEADER")


def test_trusted_proxies_are_addresses_or_blocks(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.setenv("ARENA_TRUSTED_PROXIES", "10.0.0.0/8, ::1,192.0.2.7")
    assert [str(n) for n in env_networks("ARENA_TRUSTED_PROXIES")] == [
        "10.0.0.0/8",
        "::1/128",
        "192.0.2.7/32",
    ]
    monkeypatch.setenv("ARENA_TRUSTED_PROXIES", "10.0.0.0/8,proxy.internal")
    with pytest.raises(ImproperlyConfigured, match="ARENA_TRUSTED_PROXIES must be addresses"):
        env_networks("ARENA_TRUSTED_PROXIES")


def test_the_defaults_keep_plain_http_on_loopback_working(settings):
    # (the suite runs on the defaults)
    assert settings.SECURE_SSL_REDIRECT is False
    assert settings.SECURE_HSTS_SECONDS == 0
    assert settings.SESSION_COOKIE_SECURE is settings.CSRF_COOKIE_SECURE is False
    assert settings.SECURE_PROXY_SSL_HEADER is None
    assert settings.TRUSTED_PROXIES == ()


# --- start-up in a process of its own ------------------------------------------------------


def documented_production_environment() -> dict[str, str]:
    """The example production environment of docs/security.md (the block after the
    ``production-environment`` marker), with a fresh key for its placeholder."""
    text = (ROOT / "docs" / "security.md").read_text()
    block = text.split("<!-- production-environment -->", 1)[1].split("```sh", 1)[1]
    block = block.split("```", 1)[0]
    env = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", block, flags=re.MULTILINE))
    assert env["ARENA_SECRET_KEY"] == "<50+ random characters>"
    env["ARENA_SECRET_KEY"] = STRONG
    return env


def manage(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_under_the_documented_production_environment(tmp_path):
    env = documented_production_environment()
    assert env["ARENA_DEBUG"] == "false"
    env["ARENA_DATA_DIR"] = str(tmp_path)

    done = manage(["check", "--deploy", "--fail-level", "WARNING"], env)

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "System check identified no issues (0 silenced)."


# The production run above is the contract; the development run: `make soak`.
@pytest.mark.soak
def test_check_deploy_on_the_development_defaults_names_what_production_needs(tmp_path):
    done = manage(["check", "--deploy"], {ENV_NAME: STRONG, "ARENA_DATA_DIR": str(tmp_path)})

    found = set(re.findall(r"\(security\.(W\d+)\)", done.stdout + done.stderr))
    # HSTS, SSL redirect, session and CSRF cookies: each a variable of docs/security.md
    assert found == {"W004", "W008", "W012", "W016"}


def test_a_production_start_without_any_key_refuses_and_says_what_to_do(tmp_path):
    data = tmp_path / "empty"
    data.mkdir()
    env = documented_production_environment()
    del env["ARENA_SECRET_KEY"]
    env["ARENA_DATA_DIR"] = str(data)

    done = manage(["check"], env)

    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "django.core.exceptions.ImproperlyConfigured: No secret key: ARENA_SECRET_KEY is not "
        f"set and {data / FILE_NAME} does not exist. Set ARENA_SECRET_KEY (e.g. to the "
        "output of `python -c 'import secrets; print(secrets.token_urlsafe(50))'`), or run "
        f"`make setup` or `make run`, which generate {data / FILE_NAME}."
    )
    assert list(data.iterdir()) == []  # nothing was generated behind the operator's back


def test_a_malformed_proxy_header_stops_start_up_with_its_name(tmp_path):
    env = documented_production_environment()
    env.update(ARENA_DATA_DIR=str(tmp_path), ARENA_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")

    done = manage(["check"], env)

    assert done.returncode == 1
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "django.core.exceptions.ImproperlyConfigured: ARENA_SECURE_PROXY_SSL_HEADER must be "
            "HEADER=value"
        )
    )
