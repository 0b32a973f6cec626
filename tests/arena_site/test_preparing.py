"""The line every page shows while `make run` still prepares something in the background
(arena_site/preparing.py): the steps not done, in words; nothing once they are done, and
nothing when the launcher that wrote the file is gone."""

import subprocess

import pytest

from arena_site.preparing import Step, status_clear, status_pending, status_write

pytestmark = pytest.mark.django_db


def _steps(*states: str) -> list[Step]:
    labels = [
        ("packages", "The sandboxes' system packages", "battles start once installed"),
        ("toolchain", "The coding agents' toolchain", "coding battles start once installed"),
    ]
    return [
        Step(key, label, waits, state)
        for (key, label, waits), state in zip(labels, states, strict=True)
    ]


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def test_every_page_says_what_is_still_being_prepared(client, data_dir):
    import os

    status_write(data_dir, _steps("done", "running"), os.getpid())
    page = client.get("/").content.decode()
    assert "This arena is still being prepared" in page
    assert "The coding agents&#x27; toolchain</span> (in progress)" in page
    assert "system packages" not in page  # done: not listed

    status_write(data_dir, _steps("done", "failed"), os.getpid())
    page = client.get("/accounts/login/").content.decode()
    assert "failed: the terminal that runs make run says why" in page

    status_write(data_dir, _steps("done", "done"), os.getpid())
    assert "still being prepared" not in client.get("/").content.decode()

    # a step nothing visible waits for is not listed
    quiet = _steps("running", "done")
    quiet[0].shown = False
    status_write(data_dir, quiet, os.getpid())
    assert status_pending(data_dir) == []


def test_a_launcher_that_is_gone_leaves_no_banner(client, data_dir):
    gone = subprocess.Popen(["true"])
    gone.wait()
    status_write(data_dir, _steps("running", "waiting"), gone.pid)
    assert status_pending(data_dir) == []
    assert "still being prepared" not in client.get("/").content.decode()


@pytest.mark.parametrize("content", ["", "{", '{"pid": 1}', '{"pid": "x", "steps": 3}', "[]"])
def test_an_unreadable_file_shows_nothing_and_breaks_no_page(client, data_dir, content):
    (data_dir / "preparing.json").write_text(content)
    assert status_pending(data_dir) == []
    assert client.get("/").status_code == 200


def test_no_file_no_banner(client, data_dir):
    status_clear(data_dir)
    assert status_pending(data_dir) == []
    assert "still being prepared" not in client.get("/").content.decode()
