"""The host's review of a stored patch (coding.patchcheck): real git diffs of every shape
the arena's own diff writes are read; anything else is refused with its reason."""

import subprocess
from pathlib import Path

import pytest

from coding.patchcheck import PatchRefused, review

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@x.invalid"]


def git_diff(tmp_path: Path, before: dict[str, bytes], after: dict[str, bytes | None]) -> bytes:
    """``git diff --cached --binary --full-index --no-renames`` as collect_diff makes it."""
    root = tmp_path / "r"
    root.mkdir()
    subprocess.run([*GIT, "init", "-q"], cwd=root, check=True)
    for name, data in before.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", "s"], cwd=root, check=True)
    for name, data in after.items():
        path = root / name
        if data is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
    return subprocess.run(
        [*GIT, "diff", "--cached", "--binary", "--full-index", "--no-renames", "HEAD"],
        cwd=root, capture_output=True, check=True,
    ).stdout  # fmt: skip


def test_every_shape_the_arenas_diff_writes_is_read(tmp_path):
    before = {"a.py": b"x = 1\n", "gone.py": b"y\n", "b.bin": b"\0old", "sp ace.py": b"a\n",
              "café.py": b"e\n", "crlf.txt": b"x\r\ny\r\n"}  # fmt: skip
    after = {"a.py": b"x = 2\n", "gone.py": None, "new/deep.py": b"z = 3\n", "empty.txt": b"",
             "b.bin": b"\0new", "sp ace.py": b"a\nb\n", "café.py": b"e\nf",
             "crlf.txt": b"x\r\nz\r\n", "tail.py": b"no newline"}  # fmt: skip
    data = git_diff(tmp_path, before, after)
    found = {c.path: c for c in review(data).files}
    assert sorted(found) == sorted(
        ["a.py", "gone.py", "new/deep.py", "empty.txt", "b.bin", "sp ace.py", "café.py",
         "crlf.txt", "tail.py"]
    )  # fmt: skip
    assert (found["a.py"].added, found["a.py"].removed) == (1, 1)
    assert found["gone.py"].status == "deleted" and found["new/deep.py"].status == "added"
    assert found["b.bin"].binary and not found["a.py"].binary
    assert (found["café.py"].added, found["café.py"].removed) == (1, 0)
    assert (found["crlf.txt"].added, found["crlf.txt"].removed) == (1, 1)


def test_a_mode_change_alone_is_read(tmp_path):
    root_data = {"run.sh": b"echo hi\n"}
    data = git_diff(tmp_path, root_data, {})
    assert data == b""  # nothing changed: nothing to review
    assert review(b"").files == []
    text = b"diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
    [change] = review(text).files
    assert (change.path, change.old_mode, change.new_mode) == ("run.sh", "100644", "100755")


HEADER = b"diff --git a/x.py b/x.py\nindex " + b"1" * 40 + b".." + b"2" * 40 + b" 100644\n"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"*** a/x.py\n--- b/x.py\n***************\n", "not a git diff"),
        (b"1c\nx = 2\n.\n", "not a git diff"),
        (b"--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-x\n+y\n", "not a git diff"),
        (HEADER + b"--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-x\n+y\nextra\n", "between two files"),
        (HEADER + b"--- a/x.py\n+++ b/x.py\n@@ -1,2 +1 @@\n-x\n", "ends before"),
        (HEADER + b"--- a/x.py\n+++ b/y.py\n@@ -1 +1 @@\n-x\n+y\n", "names another file"),
        (HEADER + b"--- a/x.py\n+++ b/x.py\n", "has no hunk"),
        (b"diff --git a/x.py b/y.py\nsimilarity index 100%\n", "one path twice"),
        (b"diff --git a/x.py b/x.py\nsimilarity index 90%\n", "extended header"),
        (b"diff --git a/x.py b/x.py\nBinary files a/x.py and b/x.py differ\n", "extended header"),
        (b"diff --git a/l b/l\nnew file mode 120000\n", "symbolic link"),
        (b"diff --git a/m b/m\nnew file mode 160000\n", "submodule"),
        (b"diff --git a/../x b/../x\nnew file mode 100644\n", "leaves the repository"),
        (b"diff --git a/.git/config b/.git/config\nnew file mode 100644\n", "enters .git"),
        (b"diff --git a/sub/.GIT/x b/sub/.GIT/x\nnew file mode 100644\n", "enters .git"),
        (b'diff --git "a/x\\ty" "b/x\\ty"\nnew file mode 100644\n', "control character"),
        (b"diff --git a/x b/x\nnew file mode 100644\n" * 2, "changed twice"),
        (
            b"diff --git a/m.so b/m.so\nnew file mode 100644\nindex "
            + b"0" * 40
            + b".."
            + b"1" * 40
            + b"\nGIT binary patch\nliteral 3\nKcmZQz!~g&S\n\nliteral 0\n"
            b"HcmV?d00001\n\n",
            "run as code",
        ),
        (
            b"diff --git a/d.bin b/d.bin\nindex "
            + b"0" * 40
            + b".."
            + b"1" * 40
            + b"\nGIT binary patch\nliteral 3\nthis is not base85!\n\n",
            "not base85",
        ),
    ],
)
def test_anything_else_is_refused(data, reason):
    with pytest.raises(PatchRefused, match=reason):
        review(data)
