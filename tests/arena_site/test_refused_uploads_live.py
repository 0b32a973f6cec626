"""Refused uploads through the real web server (uvicorn, as `make run` starts it): the
body of a submission over FILE_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB) is spooled by the ASGI
server and by Django's upload handler into the server's temporary directory; whatever
refuses the submission, nothing stays there, and nothing stays in the private media
(tests/battles/test_refused_uploads.py tries every kind of refusal in-process)."""

import http.client
import io
import json
import os
import tarfile
import uuid
from pathlib import Path

import pytest

from accounts.services import api_token_create
from agents.models import Agent, Arena
from battles.models import Battle
from tests.servers import (
    START_TIMEOUT_S,
    ServerProcess,
    child_env,
    ensure_public_arena,
    free_port,
    http_answers,
    poll_until,
    wait_for_child_sessions_to_end,
    web_command,
)

pytestmark = pytest.mark.django_db(transaction=True)

BIG_CSV = b"n,square\n" + b"".join(f"{n},{n * n}\n".encode() for n in range(300_000))


def big_tarball() -> bytes:
    """A 3 MiB gzipped tarball (random bytes inside, so it does not shrink)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = os.urandom(3 * 1024**2)
        info = tarfile.TarInfo("blob-main/blob.bin")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
            .encode()
        )  # fmt: skip
    for name, (filename, data) in files.items():
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
            f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        )
        parts.append(head.encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def post(port: int, token: str, fields: dict, files: dict) -> tuple[int, dict]:
    body, content_type = multipart(fields, files)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
        conn.request("POST", "/api/tasks/", body, headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def listing(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def settles(media: Path, temp: Path, kept: list[str], web: ServerProcess) -> None:
    """The files are as expected, at the latest a moment after the answer: Django's ASGI
    handler closes a request's uploads (removing their spooled files) once the answer
    is sent, so a quick client can look before."""
    poll_until(
        lambda: (listing(media), listing(temp)) == (kept, []),
        timeout=10, interval=0.05, what=f"only {kept} kept, the temporary files gone",
        processes=[web],
    )  # fmt: skip


def test_refusals_after_a_spooled_body_leave_no_file(alice, roster, tmp_path, sandbox_root):
    ensure_public_arena()
    coders = [
        Agent.objects.create(
            arena=Arena.objects.public(), slug=f"coder-{n}", display_name=f"Coder {n}",
            kind="scaffold", provider="anthropic", model_id="m", tool_set=["shell", "deliver"],
        )
        for n in (1, 2)
    ]  # fmt: skip
    _, token = api_token_create(user=alice)
    media, temp = tmp_path / "private", tmp_path / "server-tmp"
    temp.mkdir()
    env = child_env(sandbox_root=sandbox_root, private_media_root=media)
    env.update(TMPDIR=str(temp), ARENA_QUEUE_MAX="1", ARENA_SUBMIT_ACCOUNT_RATE_PER_HOUR="3")
    port = free_port()
    web = ServerProcess.start("web", web_command(port), env, tmp_path / "logs")
    try:
        poll_until(lambda: http_answers(f"http://127.0.0.1:{port}/accounts/login/"),
                   timeout=START_TIMEOUT_S, what="the web server", processes=[web])  # fmt: skip
        csv = {"attachments": ("squares.csv", BIG_CSV)}
        repo = {"repo_upload": ("blob.tar.gz", big_tarball())}
        task = {"instruction": "Sum the squares in the attached CSV"}
        repo_task = {"instruction": "Make the tests pass", "success_cmd": "python3 -m pytest"}

        # bytes that are not what the name says (read, staged, refused)
        status, body = post(port, token, task, {"attachments": ("squares.png", BIG_CSV)})
        assert (status, body["error"]["code"]) == (400, "attachment_content_mismatch")
        settles(media, temp, [], web)

        # fewer than two coding agents (the upload read and hashed, then the roster)
        Agent.objects.filter(pk__in=[c.pk for c in coders]).update(is_paused=True)
        status, body = post(port, token, repo_task, repo)
        assert (status, body["error"]["code"]) == (503, "roster_too_small"), body
        settles(media, temp, [], web)
        Agent.objects.filter(pk__in=[c.pk for c in coders]).update(is_paused=False)

        # admitted: its attachment is kept, under its task
        status, body = post(port, token, task, csv)
        assert status == 201, body
        kept = listing(media)
        assert len(kept) == 1 and kept[0].startswith(f"attachments/{body['task']}/")
        settles(media, temp, kept, web)

        # the queue full (ARENA_QUEUE_MAX=1): an attachment, then a repository
        chart = {"instruction": "Draw a bar chart of every tenth row from the spreadsheet"}
        status, body = post(port, token, chart, csv)
        assert (status, body["error"]["code"]) == (429, "queue_full"), body
        status, body = post(port, token, repo_task, repo)
        assert (status, body["error"]["code"]) == (429, "queue_full"), body
        settles(media, temp, kept, web)

        # the account's hourly allowance (3, of which the refusals above spent none):
        # one more admitted would be the second; spend it, then the refusal is up front
        Battle.objects.update(status=Battle.Status.RUNNING)  # out of the queue
        largest = {"instruction": "Report the largest value you find in that table"}
        status, body = post(port, token, largest, csv)
        assert status == 201, body
        Battle.objects.update(status=Battle.Status.RUNNING)  # out of the queue
        even = {"instruction": "Count how many rows end with an even number"}
        status, body = post(port, token, even, csv)
        assert status == 201, body
        kept = listing(media)
        median = {"instruction": "Write the median row of the file to answer.txt"}
        status, body = post(port, token, median, csv)
        assert (status, body["error"]["code"]) == (429, "rate_limited"), body
        settles(media, temp, kept, web)
    finally:
        web.stop()
        wait_for_child_sessions_to_end()
