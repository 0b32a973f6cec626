"""The diff splitter and highlighter (battles/diffview.py): a git diff file by file,
hunk lines told from headers by the hunk's counts, everything bounded and escaped."""

import pytest

from battles import diffview

TWO_FILES = (
    "diff --git a/calc.py b/calc.py\n"
    "index 1..2 100644\n"
    "--- a/calc.py\n"
    "+++ b/calc.py\n"
    "@@ -1,3 +1,3 @@\n"
    " def add(a, b):\n"
    "-    return a - b\n"
    "+    return a + b  # <b>&\n"
    " \n"
    "\\ No newline at end of file\n"
    "diff --git a/docs/a b.md b/docs/a b.md\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/docs/a b.md\n"
    "@@ -0,0 +1,2 @@\n"
    "+-- not a header\n"
    "++++ not a header either\n"
    "diff --git a/logo.png b/logo.png\n"
    "Binary files a/logo.png and b/logo.png differ\n"
)


def kinds(file: diffview.FileDiff) -> list[tuple[str, str]]:
    return [(line.kind, line.text) for line in file.lines]


def test_a_diff_is_split_file_by_file_with_its_lines_and_notes():
    split = diffview.split(TWO_FILES)

    assert [f.path for f in split.files] == ["calc.py", "docs/a b.md", "logo.png"]
    calc, notes, logo = split.files
    assert kinds(calc) == [
        ("@", "@@ -1,3 +1,3 @@"), (" ", "def add(a, b):"), ("-", "    return a - b"),
        ("+", "    return a + b  # <b>&"), (" ", ""), ("\\", " No newline at end of file"),
    ]  # fmt: skip
    assert (calc.added, calc.removed, calc.notes) == (1, 1, [])
    # Inside a hunk its counts decide: "-- x" and "+++ x" are added lines, not headers.
    assert kinds(notes)[1:] == [("+", "-- not a header"), ("+", "+++ not a header either")]
    assert notes.notes == ["new file mode 100644"]
    assert (logo.lines, logo.notes) == ([], ["Binary files a/logo.png and b/logo.png differ"])


@pytest.mark.parametrize(
    ("bounds", "kept_files", "kept_lines", "more_lines", "more_files"),
    [
        ({}, 3, [4, 4, 4], [0, 0, 0], 0),
        ({"max_files": 2}, 2, [4, 4], [0, 0], 1),
        ({"max_lines": 2}, 3, [2, 2, 2], [2, 2, 2], 0),
        ({"max_total_lines": 5}, 3, [4, 1, 0], [0, 3, 4], 0),
    ],
)
def test_what_is_kept_is_bounded_and_the_rest_counted(
    bounds, kept_files, kept_lines, more_lines, more_files
):
    one = "diff --git a/f{0}.py b/f{0}.py\n+++ b/f{0}.py\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n"
    diff = "".join(one.format(i) for i in range(3))

    split = diffview.split(diff, **bounds)

    assert len(split.files) == kept_files and split.more_files == more_files
    assert [len(f.lines) for f in split.files] == kept_lines
    assert [f.more_lines for f in split.files] == more_lines
    # Counted whole, shown or not.
    assert all((f.added, f.removed) == (1, 1) for f in split.files)


def test_a_hunk_whose_counts_lie_ends_at_the_next_file():
    diff = (
        "diff --git a/a b/a\n@@ -1,99 +1,99 @@\n-x\n+y\ndiff --git a/b b/b\n@@ -1 +1 @@\n-p\n+q\n"
    )

    split = diffview.split(diff)

    assert [(f.path, f.added, f.removed) for f in split.files] == [("a", 1, 1), ("b", 1, 1)]


def test_a_long_line_and_a_long_path_are_cut():
    long = "x" * (diffview.MAX_LINE_CHARS + 50)
    diff = f"diff --git a/{long} b/{long}\n+++ b/{long}\n@@ -0,0 +1 @@\n+{long}\n"

    file = diffview.split(diff).files[0]

    assert len(file.path) == diffview.MAX_PATH_CHARS + 1 and file.path.endswith("…")
    assert len(file.lines[1].text) == diffview.MAX_LINE_CHARS + 1


def test_python_is_highlighted_by_its_own_lexer_and_everything_is_escaped():
    file = diffview.render(TWO_FILES).files[0]
    html = {line.kind + line.text: line.html for line in file.lines}

    assert html[" def add(a, b):"] == (
        '<span class="tk-k">def</span> <span class="tk-f">add</span>(a, b):'
    )
    added = html["+    return a + b  # <b>&"]
    assert '<span class="tk-k">return</span>' in added
    assert '<span class="tk-c"># &lt;b&gt;&amp;</span>' in added
    assert "<b>" not in added
    # A hunk header is shown as it is, escaped, not lexed.
    assert html["@@@ -1,3 +1,3 @@"] == "@@ -1,3 +1,3 @@"


@pytest.mark.parametrize(
    ("path", "lexer"),
    [("calc.py", "Python"), ("src/app.js", "JavaScript"), ("notes.weird", "Text only"),
     ("Makefile", "Makefile")],
)  # fmt: skip
def test_the_lexer_is_guessed_from_the_file_name(path, lexer):
    assert diffview.lexer_for(path).name == lexer


def test_markup_in_a_file_without_a_lexer_is_escaped_and_lines_stay_lines():
    diff = (
        "diff --git a/x.unknown b/x.unknown\n+++ b/x.unknown\n@@ -0,0 +1,3 @@\n"
        '+<img src=x onerror="alert(1)">\n+\n+"""unclosed\n'
    )

    file = diffview.render(diff).files[0]

    assert [line.html for line in file.lines[1:]] == [
        "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;", "", "&quot;&quot;&quot;unclosed",
    ]  # fmt: skip
