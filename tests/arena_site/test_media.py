"""The private storage's settings and its local default (arena_site/media.py): where
the S3 credentials come from, an atomic overwriting save, names that cannot leave the
root. The S3 side runs against a real server in test_media_s3.py."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from arena_site.media import (
    MediaTooLarge,
    MediaUnreadable,
    media_delete_tree,
    media_open,
    media_read,
    media_save,
    private_storage,
)
from arena_site.settings import env_secret

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_secret_comes_from_the_environment_else_from_its_file(tmp_path, monkeypatch):
    monkeypatch.delenv("ARENA_T_KEY", raising=False)
    monkeypatch.delenv("ARENA_T_KEY_FILE", raising=False)
    assert env_secret("ARENA_T_KEY") is None
    (tmp_path / "key").write_text("from-file\n")
    monkeypatch.setenv("ARENA_T_KEY_FILE", str(tmp_path / "key"))
    assert env_secret("ARENA_T_KEY") == "from-file"
    monkeypatch.setenv("ARENA_T_KEY", "from-env")
    assert env_secret("ARENA_T_KEY") == "from-env"


def test_an_unreadable_secret_file_stops_start_up_without_its_content(tmp_path, monkeypatch):
    monkeypatch.delenv("ARENA_T_KEY", raising=False)
    monkeypatch.setenv("ARENA_T_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="ARENA_T_KEY_FILE names"):
        env_secret("ARENA_T_KEY")
    (tmp_path / "empty").write_text("  \n")
    monkeypatch.setenv("ARENA_T_KEY_FILE", str(tmp_path / "empty"))
    with pytest.raises(ImproperlyConfigured, match="which is empty"):
        env_secret("ARENA_T_KEY")


def test_a_bucket_in_the_environment_selects_s3_with_the_filed_secret(tmp_path):
    (tmp_path / "secret").write_text("s3cr3t-value\n")
    environment = {
        **os.environ,
        "DATABASE_URL": "",
        "ARENA_DATA_DIR": str(tmp_path / "data"),
        "ARENA_SECRET_KEY": secrets.token_urlsafe(50),
        "ARENA_MEDIA_S3_BUCKET": "media",
        "ARENA_MEDIA_S3_ENDPOINT_URL": "http://127.0.0.1:9",
        "ARENA_MEDIA_S3_ACCESS_KEY_ID": "id",
        "ARENA_MEDIA_S3_SECRET_ACCESS_KEY_FILE": str(tmp_path / "secret"),
        "ARENA_MEDIA_SIGNED_URL_S": "30",
        "DJANGO_SETTINGS_MODULE": "arena_site.settings",
    }
    script = (
        "import json; from django.conf import settings as s; p = s.STORAGES['private'];"
        "print(json.dumps([p['BACKEND'], p['OPTIONS'], s.MEDIA_SIGNED_URL_S]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, cwd=ROOT, capture_output=True,
        text=True, check=True, timeout=60,
    )  # fmt: skip
    backend, options, seconds = json.loads(done.stdout)
    assert backend == "storages.backends.s3.S3Storage" and seconds == 30
    assert options["bucket_name"] == "media" and options["endpoint_url"] == "http://127.0.0.1:9"
    assert (options["access_key"], options["secret_key"]) == ("id", "s3cr3t-value")
    assert options["querystring_expire"] == 30 and options["addressing_style"] == "path"


def test_the_local_storage_writes_whole_files_and_replaces_them(settings):
    media_save("screens/run-1/step-0.png", b"first")
    media_save("screens/run-1/step-0.png", b"second")

    folder = Path(settings.PRIVATE_MEDIA_ROOT) / "screens" / "run-1"
    assert [p.name for p in folder.iterdir()] == ["step-0.png"]  # no .part left
    assert (folder / "step-0.png").read_bytes() == b"second"
    assert oct((folder / "step-0.png").stat().st_mode & 0o777) == "0o640"
    assert media_read("screens/run-1/step-0.png", 100) == b"second"
    with pytest.raises(MediaTooLarge):
        media_read("screens/run-1/step-0.png", 3)
    media_delete_tree("screens/run-1")
    assert not folder.exists()


def test_the_local_storage_follows_the_root_setting(settings, tmp_path):
    settings.PRIVATE_MEDIA_ROOT = tmp_path / "elsewhere"
    media_save("a/b.txt", b"x")
    assert (tmp_path / "elsewhere" / "a" / "b.txt").read_bytes() == b"x"
    assert private_storage().location == str(tmp_path / "elsewhere")


@pytest.mark.parametrize(
    "name", ["../outside.txt", "/etc/passwd", "a/../../outside.txt", "a/./b", "", "a\x00b"]
)
def test_names_that_would_leave_the_root_read_nothing(settings, tmp_path, name):
    (tmp_path / "outside.txt").write_text("secret")
    assert media_open(name) is None
    assert media_read(name, 100) is None


def test_a_link_is_not_followed_by_a_bounded_read(settings, tmp_path):
    (tmp_path / "outside.txt").write_text("secret")
    media_save("deliveries/run-1/x.txt", b"")
    link = Path(settings.PRIVATE_MEDIA_ROOT) / "deliveries" / "run-1" / "x.txt"
    link.unlink()
    link.symlink_to(tmp_path / "outside.txt")
    with pytest.raises(MediaUnreadable, match="not a plain file"):
        media_read("deliveries/run-1/x.txt", 100)
    assert media_open("deliveries/run-1/x.txt") is None  # resolved outside the root
