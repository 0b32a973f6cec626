"""`manage.py sandbox_doctor`: every property it checks, on this host for real, and the
plain line (and non-zero exit) for each one that fails."""

import json
import os

import pytest
from django.core.management import call_command

from sandboxes.management.commands.sandbox_doctor import CHECKS, PROPERTIES, failures
from tests.docker_engine import docker_engine  # noqa: F401 - the session fixture

GOOD = {key: True for key in PROPERTIES} | {"leaked_processes": 0}


@pytest.mark.parametrize(
    ("changes", "lines"),
    [
        ({}, []),
        ({"disk_quota": False}, [PROPERTIES["disk_quota"]]),
        ({"seccomp": False, "isolated": None}, [PROPERTIES["isolated"], PROPERTIES["seccomp"]]),
        ({"framebuffer_protected": False}, [PROPERTIES["framebuffer_protected"]]),
        ({"display_out_of_reach": "yes"}, [PROPERTIES["display_out_of_reach"]]),
        ({"leaked_processes": 2}, ["teardown: 2 processes outlived the sandbox"]),
        ({"leaked_processes": None}, []),  # not a root worker: not counted
    ],
)
def test_each_failed_property_is_one_plain_line(changes, lines):
    assert failures(GOOD | changes) == lines


def test_a_missing_property_is_a_failure():
    report = dict(GOOD)
    del report["seccomp"]
    assert failures(report) == [PROPERTIES["seccomp"]]


def test_every_property_says_what_it_checked():
    assert CHECKS.keys() == PROPERTIES.keys()


@pytest.mark.skipif(os.geteuid() != 0, reason="the quota and display checks need a root worker")
@pytest.mark.django_db(transaction=True)
def test_this_host_passes_the_doctor(capsys):
    call_command("sandbox_doctor", "--json", "--steps", "3")
    report = json.loads(capsys.readouterr().out)
    assert {key: report[key] for key in PROPERTIES} == dict.fromkeys(PROPERTIES, True)
    assert report["leaked_processes"] == 0
    assert report["quota_filesystem"] == "tmpfs" and report["seccomp_filter"] is True
    assert report["framebuffer_owner"] != 0


@pytest.mark.django_db(transaction=True)
def test_a_docker_host_passes_the_doctor_and_says_what_it_checked(
    docker_engine,  # noqa: F811
    settings,
    monkeypatch,
    capsys,
):
    monkeypatch.setenv("DOCKER_HOST", docker_engine)
    settings.ARENA = settings.ARENA.replace(sandbox_backend="docker")
    from sandboxes import services

    try:
        call_command("sandbox_doctor", "--steps", "3")
    finally:
        services.sandbox_backend().close()
    lines = capsys.readouterr().out.splitlines()
    said = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in lines}
    assert said["backend"] == "docker"
    for key, check in CHECKS.items():
        assert said[key] == f"ok     {check}", key
    assert said["leaked_processes"] == "0"
    display_uid = settings.ARENA.sandbox_uid_base + 1000
    assert int(said["framebuffer_owner"]) >= display_uid


def test_a_failed_property_exits_non_zero_with_its_line(monkeypatch, capsys):
    from sandboxes.management.commands.sandbox_doctor import Command

    monkeypatch.setattr(Command, "diagnose", lambda self, steps: GOOD | {"disk_quota": False})
    with pytest.raises(SystemExit) as exited:
        call_command("sandbox_doctor", "--json")
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["disk_quota"] is False
    assert err == f"sandbox doctor: {PROPERTIES['disk_quota']}\n"
