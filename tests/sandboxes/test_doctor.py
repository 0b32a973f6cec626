"""`manage.py sandbox_doctor`: every property it checks, on this host for real, and the
plain line (and non-zero exit) for each one that fails."""

import json
import os

import pytest
from django.core.management import call_command

from sandboxes.management.commands.sandbox_doctor import PROPERTIES, failures

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


@pytest.mark.skipif(os.geteuid() != 0, reason="the quota and display checks need a root worker")
@pytest.mark.django_db(transaction=True)
def test_this_host_passes_the_doctor(capsys):
    call_command("sandbox_doctor", "--json", "--steps", "3")
    report = json.loads(capsys.readouterr().out)
    assert {key: report[key] for key in PROPERTIES} == dict.fromkeys(PROPERTIES, True)
    assert report["leaked_processes"] == 0
    assert report["quota_filesystem"] == "tmpfs" and report["seccomp_filter"] is True
    assert report["framebuffer_owner"] != 0


def test_a_failed_property_exits_non_zero_with_its_line(monkeypatch, capsys):
    from sandboxes.management.commands.sandbox_doctor import Command

    monkeypatch.setattr(Command, "diagnose", lambda self, steps: GOOD | {"disk_quota": False})
    with pytest.raises(SystemExit) as exited:
        call_command("sandbox_doctor", "--json")
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["disk_quota"] is False
    assert err == f"sandbox doctor: {PROPERTIES['disk_quota']}\n"
