"""An environment's package (environments.packages): a deterministic tar.gz whose
task.json, snapshot.json, grader, trajectories and files agree; the same environment
as a suite the evaluations' own loader reads; a package read back is verified, and a
tampered one is refused with the reason."""

import gzip
import hashlib
import io
import json
import re
import tarfile

import pytest

from arena_site.media import media_delete, media_save
from battles.snapshots import manifest_digest
from environments.graders import grader_command
from environments.models import Environment
from environments.packages import PackageError, PackageInvalid, environment_package, package_read
from evals.suites import load_suite, parse_suite
from tests.environments.environment_factories import (
    BLOB_PREFIX,
    CSV,
    FAILING,
    GRADER,
    REFERENCE,
    environment,
    repo_state,
    source_battle,
)
from tests.ratings.factories import judges

PATCH = b"--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.fixture
def published(alice, roster, settings):
    settings.ARENA = settings.ARENA.replace(export_delay_days=7)
    return source_battle(alice, roster, judges(1)[0], days=30)


@pytest.fixture
def env(published):
    return environment(published)


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def contents(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def rebuilt(files: dict[str, bytes], extra: list[tarfile.TarInfo] = ()) -> bytes:
    """A tar.gz of ``files`` (and ``extra`` members without data)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return buffer.getvalue()


def csv_sha() -> str:
    return hashlib.sha256(CSV).hexdigest()


# -- what a package holds ------------------------------------------------------------


def test_a_package_holds_the_task_state_grader_trajectories_files_and_suite(env, published):
    data = environment_package(env)

    names = sorted(members(data))
    assert names == [
        "attachments/data.csv",
        f"files/{csv_sha()}",
        "grader.json",
        "snapshot.json",
        "suite.json",
        "task.json",
        "trajectories/failing.json",
        "trajectories/reference.json",
    ]
    files = contents(data)
    assert files[f"files/{csv_sha()}"] == CSV
    assert json.loads(files["snapshot.json"]) == env.state
    assert json.loads(files["grader.json"]) == GRADER
    assert json.loads(files["trajectories/failing.json"]) == FAILING
    assert json.loads(files["trajectories/reference.json"]) == REFERENCE


def test_task_json_is_an_osworld_like_task(env, published):
    task = json.loads(contents(environment_package(env))["task.json"])

    assert task == {
        "id": f"arena-env-{env.pk}",
        "package_version": 1,
        "kind": "desktop",
        "snapshot": manifest_digest(env.state),
        "instruction": "Sort <PERSON_1>'s data.csv by amount into out.csv.",
        "source": {"arena": "public", "failure_mode": "gave_up", "battle": published.pk},
        "config": [
            {
                "type": "upload_file",
                "parameters": {
                    "files": [
                        {"local_path": f"files/{csv_sha()}", "path": "/work/attachments/data.csv"}
                    ]
                },
            },
            {
                "type": "chrome_open_tabs",
                "parameters": {"urls_to_open": ["https://example.com/start"]},
            },
        ],
        "simulated_web": None,
        "evaluator": {
            "func": "arena_checks",
            "checks": GRADER["checks"],
            "command": grader_command(GRADER),
            "host_checks": [{"type": "message_contains", "text": "sorted"}],
        },
        "budgets": {"step_budget": 20, "wall_budget_s": 300},
        "screen": {"width": 1280, "height": 800},
        "tools": ["shell", "screenshot", "deliver"],
    }


def test_the_source_battle_is_null_until_the_open_data_publishes_it(alice, roster, settings):
    settings.ARENA = settings.ARENA.replace(export_delay_days=7)
    recent = environment(source_battle(alice, roster, judges(1)[0], days=2))

    task = json.loads(contents(environment_package(recent))["task.json"])

    assert task["source"] == {"arena": "public", "failure_mode": "gave_up", "battle": None}


def test_the_package_is_deterministic(env):
    first = environment_package(env)
    env.refresh_from_db()

    assert environment_package(env) == first
    assert gzip.decompress(first)  # a plain gzip stream
    assert first[4:8] == b"\x00\x00\x00\x00"  # no time in the gzip header
    for info in members(first).values():
        assert (info.mtime, info.uid, info.gid, info.uname, info.gname) == (0, 0, 0, "", "")
    regular = [n for n, m in members(first).items() if m.isfile()]
    assert regular == sorted(regular)


def test_a_repo_environment_ships_both_bundles_and_the_patches(published):
    bundle, judge_bundle = b"# v2 git bundle\nagents", b"# v2 git bundle\njudge"
    patch = {"sha256": hashlib.sha256(PATCH).hexdigest(), "size": len(PATCH)}
    media_save(BLOB_PREFIX + patch["sha256"], PATCH)
    state = repo_state(bundle=bundle, judge_bundle=judge_bundle)
    env = environment(
        published,
        state=state,
        failure_mode=Environment.FailureMode.TESTS_FAILED,
        failing=[{"tool": "apply_patch", "args": patch}],
        reference=[],
    )

    package = package_read(environment_package(env))

    repo = state["repo"]
    assert package["files"] == {
        repo["sha256"]: bundle,
        repo["judge"]["sha256"]: judge_bundle,
        patch["sha256"]: PATCH,
    }
    assert package["task"]["config"] == [
        {
            "type": "git_checkout",
            "parameters": {
                "bundle": f"files/{repo['sha256']}",
                "branch": "arena",
                "commit": "a" * 40,
                "tree": "b" * 40,
                "path": "/work/repo",
            },
        }
    ]
    assert package["task"]["evaluator"]["judge_checkout"] == {
        "bundle": f"files/{repo['judge']['sha256']}",
        "branch": "arena",
        "commit": "c" * 40,
    }
    assert package["task"]["budgets"] == {
        "step_budget": 40,
        "wall_budget_s": 600,
        "time_limit_s": 600,
    }
    suite = {**package["suite"], "tasks": [{**package["suite"]["tasks"][0], "success_cmd": "true"}]}
    (task,) = parse_suite(json.dumps(suite).encode(), name="suite.json").tasks
    assert (task.kind, task.repo, task.ref, task.time_limit_s) == (
        "repo",
        f"files/{repo['sha256']}",
        "arena",
        600,
    )


# -- the suite ------------------------------------------------------------------------


def test_suite_json_is_a_desktop_task_with_the_attachments_beside_it(env, tmp_path):
    with tarfile.open(fileobj=io.BytesIO(environment_package(env)), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    suite = json.loads((tmp_path / "suite.json").read_text())

    (task,) = suite["tasks"]
    assert task == {
        "id": f"arena-env-{env.pk}",
        "kind": "desktop",
        "prompt": "Sort <PERSON_1>'s data.csv by amount into out.csv.",
        "start_url": "https://example.com/start",
        "attachments": ["attachments/data.csv"],
        "success_cmd": grader_command(GRADER),
        "meta": {
            "arena_environment": env.pk,
            "snapshot": env.state_digest,
            "failure_mode": "gave_up",
            "host_checks": [{"type": "message_contains", "text": "sorted"}],
        },
    }
    # The attachment the suite names is the blob, under the name the agent gets.
    assert (tmp_path / "attachments" / "data.csv").read_bytes() == CSV


def test_the_suite_without_its_command_parses_with_the_evaluations_loader(env, tmp_path):
    """Everything of the suite but the command's length, through evals.suites."""
    with tarfile.open(fileobj=io.BytesIO(environment_package(env)), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    suite = json.loads((tmp_path / "suite.json").read_text())
    suite["tasks"][0]["success_cmd"] = "true"
    (tmp_path / "short.json").write_text(json.dumps(suite))

    loaded = load_suite(tmp_path / "short.json")

    (task,) = loaded.tasks
    assert (task.id, task.kind, task.start_url) == (
        f"arena-env-{env.pk}",
        "desktop",
        "https://example.com/start",
    )
    assert task.attachments == ("attachments/data.csv",)
    assert all((tmp_path / path).is_file() for path in task.attachments)


def test_suite_json_loads_with_the_evaluations_loader(env, tmp_path):
    with tarfile.open(fileobj=io.BytesIO(environment_package(env)), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")

    suite = load_suite(tmp_path / "suite.json")

    (task,) = suite.tasks
    assert task.success_cmd == grader_command(GRADER)


# -- reading a package back -----------------------------------------------------------


def test_a_package_reads_back_as_it_was_written(env):
    package = package_read(environment_package(env))

    assert package["task"]["id"] == f"arena-env-{env.pk}"
    assert package["snapshot"] == env.state
    assert package["grader"] == GRADER
    assert package["trajectories"] == {"failing": FAILING, "reference": REFERENCE}
    assert package["files"] == {csv_sha(): CSV}
    assert package["attachments"] == {"data.csv": csv_sha()}
    assert package["suite"]["tasks"][0]["id"] == f"arena-env-{env.pk}"


def test_a_blob_whose_bytes_changed_is_refused(env):
    files = contents(environment_package(env))
    files[f"files/{csv_sha()}"] = CSV + b"<PERSON_3>,9\n"

    with pytest.raises(PackageInvalid, match=r"does not hold the bytes its name says"):
        package_read(rebuilt(files))


def test_a_snapshot_that_disagrees_with_the_task_is_refused(env):
    files = contents(environment_package(env))
    snapshot = json.loads(files["snapshot.json"])
    snapshot["instruction"] = "Something else."
    files["snapshot.json"] = json.dumps(snapshot).encode()

    with pytest.raises(
        PackageInvalid, match=re.escape("task.json's snapshot digest is not snapshot.json's")
    ):
        package_read(rebuilt(files))


def test_a_task_whose_instruction_was_edited_is_refused(env):
    files = contents(environment_package(env))
    task = json.loads(files["task.json"])
    task["instruction"] = "Something else."
    files["task.json"] = json.dumps(task).encode()

    with pytest.raises(
        PackageInvalid, match=re.escape("task.json's instruction is not snapshot.json's")
    ):
        package_read(rebuilt(files))


def test_a_grader_that_disagrees_with_the_task_is_refused(env):
    files = contents(environment_package(env))
    files["grader.json"] = json.dumps({"version": 1, "checks": []}).encode()

    with pytest.raises(PackageInvalid, match=re.escape("task.json's checks are not grader.json's")):
        package_read(rebuilt(files))


def test_a_suite_whose_command_differs_from_the_task_is_refused(env):
    files = contents(environment_package(env))
    suite = json.loads(files["suite.json"])
    suite["tasks"][0]["success_cmd"] = "true"
    files["suite.json"] = json.dumps(suite).encode()

    with pytest.raises(PackageInvalid, match=re.escape("suite.json's task is not task.json's")):
        package_read(rebuilt(files))


def test_a_missing_blob_an_extra_member_and_a_link_elsewhere_are_refused(env):
    files = contents(environment_package(env))
    link = tarfile.TarInfo("attachments/data.csv")
    link.type, link.linkname = tarfile.LNKTYPE, f"files/{csv_sha()}"

    without = {k: v for k, v in files.items() if not k.startswith("files/")}
    with pytest.raises(PackageInvalid, match=rf"files/{csv_sha()} is missing"):
        package_read(rebuilt(without, [link]))
    with pytest.raises(PackageInvalid, match=re.escape("unexpected member 'notes.txt'")):
        package_read(rebuilt({**files, "notes.txt": b"hi"}, [link]))
    elsewhere = tarfile.TarInfo("attachments/data.csv")
    elsewhere.type, elsewhere.linkname = tarfile.LNKTYPE, "task.json"
    with pytest.raises(PackageInvalid, match="links are not the snapshot's attachments"):
        package_read(rebuilt(files, [elsewhere]))


def test_unsafe_members_and_other_archives_are_refused(env):
    files = contents(environment_package(env))
    symlink = tarfile.TarInfo("attachments/data.csv")
    symlink.type, symlink.linkname = tarfile.SYMTYPE, "/etc/passwd"

    with pytest.raises(PackageInvalid, match="not a regular file or a hard link"):
        package_read(rebuilt(files, [symlink]))
    with pytest.raises(PackageInvalid, match="not a plain relative path"):
        package_read(rebuilt({**files, "../escape": b"x"}))
    with pytest.raises(PackageInvalid, match=r"not a tar.gz archive"):
        package_read(b"not an archive")
    with pytest.raises(PackageInvalid, match="more than 10 bytes unpacked"):
        package_read(environment_package(env), max_bytes=10)


# -- what cannot be packaged ----------------------------------------------------------


def test_a_blob_gone_from_storage_is_a_package_error(env):
    media_delete(BLOB_PREFIX + csv_sha())

    with pytest.raises(PackageError, match=rf"the file {csv_sha()} is missing from storage"):
        environment_package(env)


def test_an_environment_without_a_grader_cannot_be_packaged(published):
    env = environment(published, status=Environment.Status.NEEDS_GRADER, grader=None)

    with pytest.raises(PackageError, match=rf"environment {env.pk} has no grader yet"):
        environment_package(env)
