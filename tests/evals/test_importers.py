"""Importers of the task sets labs already have (evals.importers, issue 40 item 4), on
the bundled samples under examples/ and on broken copies of them: every bad input is
refused with the file, the record and the field named; what has no mapping is skipped
with its reason (refused under --strict). What they write is read back by
evals.suites, and the checks the OSWorld importer writes are run for real with bash
against a right and a wrong artifact. The SWE-bench sample runs end to end in
tests/evals/test_swebench_runs.py."""

import json
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from evals import suites
from evals.importers import ImportFailed, suite_yaml
from evals.importers.dataset import SCORERS, import_dataset
from evals.importers.osworld import import_osworld
from evals.importers.swebench import import_swebench

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SWE = EXAMPLES / "swebench"
OSWORLD = EXAMPLES / "osworld"
DATASETS = EXAMPLES / "datasets"
SHEET = OSWORLD / "sheet-table.json"
INSTANCES = [json.loads(line) for line in (SWE / "instances.jsonl").read_text().splitlines()]
# The sample repository's third commit fixes slugify: history no task may carry.
LATER_FIX = "94e2d23"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def parsed(imported) -> suites.Suite:
    return suites.parse_suite(suite_yaml(imported.tasks, header="t").encode(), name="t.yaml")


def refused(call) -> str:
    with pytest.raises(ImportFailed) as caught:
        call()
    return str(caught.value)


# -- SWE-bench -----------------------------------------------------------------------


def swe_file(tmp_path: Path, *rows: dict, as_list: bool = False) -> Path:
    path = tmp_path / ("instances.json" if as_list else "instances.jsonl")
    text = json.dumps(list(rows)) if as_list else "".join(json.dumps(r) + "\n" for r in rows)
    path.write_text(text)
    return path


def swe_refusal(tmp_path: Path, **changes) -> str:
    row = {**INSTANCES[0], **changes}
    row = {key: value for key, value in row.items() if value is not None}
    return refused(lambda: import_swebench(swe_file(tmp_path, row), repos=SWE / "repos"))


def test_swebench_sample_becomes_repo_tasks_whose_tests_only_the_judge_sees(tmp_path):
    imported = import_swebench(SWE / "instances.jsonl", repos=SWE / "repos")

    assert imported.skipped == []
    first, second = imported.tasks
    assert first == {
        "id": "arena-samples__textkit-1", "kind": "repo",
        "prompt": INSTANCES[0]["problem_statement"],
        "repo": "swebench/arena-samples__textkit-1.bundle", "ref": "task", "judge_ref": "judge",
        "success_cmd": "python3 -m pytest -q -p no:cacheprovider "
                       "tests/test_slug.py::test_collapses_spaces",
        "test_cmd": "python3 -m pytest -q -p no:cacheprovider tests/test_slug.py::test_lowercase "
                    "tests/test_slug.py::test_strips",
        "time_limit_s": 600,
        "meta": {"source": "swebench", "repo": "arena-samples/textkit",
                 "base_commit": INSTANCES[0]["base_commit"], "version": "0.1",
                 "created_at": "2026-01-02T12:00:00Z",
                 "environment_setup_commit": INSTANCES[0]["base_commit"],
                 "fail_to_pass": ["tests/test_slug.py::test_collapses_spaces"],
                 "pass_to_pass": ["tests/test_slug.py::test_lowercase",
                                  "tests/test_slug.py::test_strips"]},
    }  # fmt: skip
    # The published files' JSON strings and plain lists both read (the second has lists).
    assert second["meta"]["fail_to_pass"] == ["tests/test_words.py::test_extra_spaces"]
    assert [t.judge_ref for t in parsed(imported).tasks] == ["judge", "judge"]

    # The bundle: 'task' is the base commit's tree with no history; 'judge' adds the tests.
    bundle = tmp_path / "one.bundle"
    bundle.write_bytes(imported.files["swebench/arena-samples__textkit-1.bundle"])
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(bundle), str(clone), "-b", "task")
    source = tmp_path / "source"
    git(tmp_path, "clone", "-q", str(SWE / "repos" / "arena-samples__textkit.bundle"), str(source))
    base = INSTANCES[0]["base_commit"]
    assert git(clone, "rev-parse", "task^{tree}") == git(source, "rev-parse", f"{base}^{{tree}}")
    assert git(clone, "rev-list", "--all", "--count") == "2"
    assert git(clone, "rev-list", "task", "--count") == "1"
    assert "test_collapses_spaces" not in (clone / "tests" / "test_slug.py").read_text()
    with pytest.raises(subprocess.CalledProcessError):
        git(clone, "cat-file", "-e", f"{LATER_FIX}^{{commit}}")
    assert git(clone, "diff", "--name-only", "task", "origin/judge") == "tests/test_slug.py"
    assert "+def test_collapses_spaces" in git(clone, "diff", "task", "origin/judge")
    # The gold patch is never written out.
    assert all(b'return "-".join' not in data for data in imported.files.values())


def test_swebench_reads_a_json_list_a_tarball_or_a_directory_and_filters_instances(tmp_path):
    repos = tmp_path / "repos"
    repos.mkdir()
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(SWE / "repos" / "arena-samples__textkit.bundle"), str(work))
    with tarfile.open(repos / "arena-samples__textkit.tar.gz", "w:gz") as archive:
        archive.add(work, arcname="textkit")
    path = swe_file(tmp_path, *INSTANCES, as_list=True)
    from_tar = import_swebench(path, repos=repos, only=("arena-samples__textkit-2",))
    assert [t["id"] for t in from_tar.tasks] == ["arena-samples__textkit-2"]

    (repos / "arena-samples__textkit.tar.gz").unlink()
    shutil.move(work, repos / "arena-samples__textkit")
    from_dir = import_swebench(path, repos=repos, only=("arena-samples__textkit-2",))
    assert from_dir.files == from_tar.files  # the same bytes, whatever the source's form
    assert refused(lambda: import_swebench(path, repos=repos, only=("nope",))) == (
        f"{path}: no instance 'nope' in the file"
    )


def test_swebench_test_ids_are_quoted_for_the_shell(tmp_path):
    odd = ["tests/test_slug.py::test_x[a b]", "tests/test_slug.py::test_y[it's; rm -rf /]"]
    imported = import_swebench(
        swe_file(tmp_path, {**INSTANCES[0], "FAIL_TO_PASS": odd}), repos=SWE / "repos",
        test_cmd="python3 -m pytest -x",
    )  # fmt: skip
    assert shlex.split(imported.tasks[0]["success_cmd"]) == ["python3", "-m", "pytest", "-x", *odd]


def test_swebench_refuses_bad_instances_naming_the_record_and_field(tmp_path):
    at = f"{tmp_path}/instances.jsonl: line 1 (instance 'arena-samples__textkit-1'): field"
    assert swe_refusal(tmp_path, test_patch=None) == f"{at} 'test_patch': missing"
    assert swe_refusal(tmp_path, FAIL_TO_PASS="[nope") == (
        f"{at} 'FAIL_TO_PASS': must be a list of test ids or a JSON string of one"
    )
    assert swe_refusal(tmp_path, FAIL_TO_PASS="[]") == (
        f"{at} 'FAIL_TO_PASS': must name at least one test"
    )
    assert swe_refusal(tmp_path, FAIL_TO_PASS=["--co"]) == (
        f"{at} 'FAIL_TO_PASS[0]': must not start with '-' (it would be an option), got '--co'"
    )
    assert swe_refusal(tmp_path, PASS_TO_PASS=["a\nb"]) == (
        f"{at} 'PASS_TO_PASS[0]': must not contain control characters"
    )
    assert swe_refusal(tmp_path, PASS_TO_PASS=[3]) == (
        f"{at} 'PASS_TO_PASS[0]': must be a non-blank string"
    )
    assert swe_refusal(tmp_path, base_commit="HEAD") == (
        f"{at} 'base_commit': must be a commit id (7 to 64 lower-case hex digits)"
    )
    assert swe_refusal(tmp_path, base_commit="deadbeef") == (
        f"{at} 'base_commit': deadbeef is not a commit of the repository"
    )
    assert swe_refusal(tmp_path, test_patch=INSTANCES[1]["test_patch"]).startswith(
        f"{at} 'test_patch': does not apply at base_commit: error: tests/test_words.py"
    )
    assert swe_refusal(tmp_path, patch=INSTANCES[1]["patch"]).startswith(
        f"{at} 'patch': does not apply at base_commit"
    )
    assert swe_refusal(tmp_path, repo="a/..") == f"{at} 'repo': must be 'owner/name', got 'a/..'"
    assert swe_refusal(tmp_path, repo="other/repo") == (
        f"{at} 'repo': no repository for 'other/repo' in {SWE / 'repos'}: give other__repo (a "
        "git repository), other__repo.bundle or other__repo.tar.gz there"
    )
    assert swe_refusal(tmp_path, problem_statement="  ") == (
        f"{at} 'problem_statement': must not be blank"
    )
    assert swe_refusal(tmp_path, instance_id="a b") == (
        f"{tmp_path}/instances.jsonl: line 1: field 'instance_id': must be letters, digits, "
        "'.', '_' or '-' (at most 200)"
    )
    twice = swe_file(tmp_path, INSTANCES[0], INSTANCES[0])
    assert refused(lambda: import_swebench(twice, repos=SWE / "repos")) == (
        f"{twice}: line 2: field 'instance_id': duplicate instance_id (first at line 1)"
    )
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(INSTANCES[0]) + "\n{not json\n")
    assert refused(lambda: import_swebench(broken, repos=SWE / "repos")) == (
        f"{broken}: line 2: not valid JSON: Expecting property name enclosed in double quotes"
    )


def test_swebench_skips_an_instance_whose_command_is_too_long_or_refuses_it_when_strict(
    tmp_path,
):
    many = [f"tests/test_slug.py::test_lowercase[{i:04d}]" for i in range(60)]
    path = swe_file(tmp_path, {**INSTANCES[0], "PASS_TO_PASS": many}, INSTANCES[1])
    imported = import_swebench(path, repos=SWE / "repos")
    assert [t["id"] for t in imported.tasks] == ["arena-samples__textkit-2"]
    assert imported.skipped == [(
        "line 1 (instance 'arena-samples__textkit-1')",
        "its PASS_TO_PASS tests make a command of 2620 characters, over the limit of 2000",
    )]  # fmt: skip
    assert refused(lambda: import_swebench(path, repos=SWE / "repos", strict=True)) == (
        f"{path}: line 1 (instance 'arena-samples__textkit-1'): cannot be imported: its "
        "PASS_TO_PASS tests make a command of 2620 characters, over the limit of 2000"
    )


# -- OSWorld --------------------------------------------------------------------------


def test_osworld_samples_map_three_tasks_and_skip_two_with_their_reasons():
    imported = import_osworld(OSWORLD, files=OSWORLD / "files")

    by_id = {task["id"]: task for task in imported.tasks}
    assert list(by_id) == ["9e47b1d3-fix-typo", "5f2d7c90-fruits-list", "0c1a5e6b-hello-file"]
    hello = by_id["0c1a5e6b-hello-file"]
    assert hello["success_cmd"] == "test \"$(cat /work/hello.txt)\" = 'hello from osworld'"
    assert hello["meta"]["left_out"] == ["launch", "sleep"]
    fruits = by_id["5f2d7c90-fruits-list"]
    assert fruits["start_url"] == "https://en.wikipedia.org/wiki/Banana"
    assert fruits["success_cmd"] == (
        "out=$(cat /work/fruits.txt) && printf '%s' \"$out\" | grep -qF -- banana && "
        "! printf '%s' \"$out\" | grep -qF -- cherry"
    )
    typo = by_id["9e47b1d3-fix-typo"]
    assert typo["attachments"] == ["osworld/9e47b1d3-fix-typo/report.txt"]
    assert imported.files == {
        "osworld/9e47b1d3-fix-typo/report.txt": (OSWORLD / "files" / "report.txt").read_bytes()
    }
    assert [(record.split(" (")[0], why) for record, why in imported.skipped] == [
        ("task '7d31c0ee-setup-script'",
         "config step 0 ('execute') cannot be reproduced in the sandbox"),
        ("task '2b8e04fa-sheet-table'",
         "evaluator 'compare_table' has no mapping (mapped: exact_match, "
         "check_include_exclude, compare_text_file)"),
    ]  # fmt: skip
    kinds = {task.id: task.kind for task in parsed(imported).tasks}
    assert set(kinds.values()) == {"desktop"}


@pytest.mark.parametrize(
    ("task", "good", "bad"),
    [
        ("0c1a5e6b-hello-file", {"hello.txt": "hello from osworld\n"},
         {"hello.txt": "hello from the arena\n"}),
        ("5f2d7c90-fruits-list", {"fruits.txt": "apple\nbanana\npear\n"},
         {"fruits.txt": "apple\nbanana\ncherry\n"}),
        ("9e47b1d3-fix-typo", {"report_fixed.txt": (OSWORLD / "files" / "report_fixed.txt")},
         {"report_fixed.txt": (OSWORLD / "files" / "report.txt")}),
    ],
)  # fmt: skip
def test_osworld_checks_pass_the_right_artifact_and_fail_a_wrong_one(tmp_path, task, good, bad):
    (command,) = [
        t["success_cmd"]
        for t in import_osworld(OSWORLD, files=OSWORLD / "files").tasks
        if t["id"] == task
    ]

    def run(files: dict) -> int:
        work = tmp_path / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for name, content in files.items():
            text = content.read_bytes() if isinstance(content, Path) else content.encode()
            (work / name).write_bytes(text)
        local = command.replace("/work/", f"{work}/")
        return subprocess.run(["bash", "-c", local], cwd=work, check=False).returncode

    assert run(good) == 0
    assert run(bad) != 0
    assert run({}) != 0  # nothing left: fails too


def test_osworld_without_the_files_skips_downloads_and_strict_refuses(tmp_path):
    imported = import_osworld(OSWORLD / "fix-typo.json")
    assert imported.tasks == []
    assert imported.skipped == [(
        f"task '9e47b1d3-fix-typo' ({OSWORLD / 'fix-typo.json'})",
        "the expected file 'report_fixed.txt' is not given (--files DIR with it)",
    )]  # fmt: skip
    assert refused(lambda: import_osworld(SHEET, strict=True)) == (
        f"{SHEET}: task '2b8e04fa-sheet-table' ({SHEET}): cannot be imported: evaluator "
        "'compare_table' has no mapping (mapped: exact_match, "
        "check_include_exclude, compare_text_file)"
    )


def osworld_refusal(tmp_path: Path, **changes) -> str:
    task = {**json.loads((OSWORLD / "hello-file.json").read_text()), **changes}
    path = tmp_path / "task.json"
    path.write_text(json.dumps({k: v for k, v in task.items() if v is not None}))
    return refused(lambda: import_osworld(path))


def test_osworld_refuses_bad_tasks_naming_the_file_task_and_field(tmp_path):
    at = f"{tmp_path}/task.json: task '0c1a5e6b-hello-file': field"
    assert osworld_refusal(tmp_path, instruction=None) == f"{at} 'instruction': missing"
    assert osworld_refusal(tmp_path, evaluator=None) == f"{at} 'evaluator': must be an object"
    assert osworld_refusal(tmp_path, instrucion="x").startswith(
        f"{at} 'instrucion': unknown field (allowed: id, instruction"
    )
    assert osworld_refusal(tmp_path, config={"type": "launch"}) == (
        f"{at} 'config': must be a list of steps"
    )
    assert osworld_refusal(tmp_path, config=[{"parameters": {}}]) == (
        f"{at} 'config[0]': must be an object with a 'type'"
    )
    rule = {"func": "exact_match", "result": {"type": "vm_command_line", "command": "true"},
            "expected": {"type": "rule", "rules": {"match": 3}}}  # fmt: skip
    assert osworld_refusal(tmp_path, evaluator=rule) == (
        f"{at} 'evaluator.expected.rules.match': must be a string"
    )
    no_command = {**rule, "result": {"type": "vm_command_line"}}
    assert osworld_refusal(tmp_path, evaluator=no_command) == (
        f"{at} 'evaluator.result.command': must be a command (a string or a list of strings)"
    )
    assert osworld_refusal(tmp_path, id=7) == (
        f"{tmp_path}/task.json: field 'id': must be a string, got int"
    )
    (tmp_path / "task.json").write_text("{")
    assert refused(lambda: import_osworld(tmp_path / "task.json")).startswith(
        f"{tmp_path}/task.json: not valid JSON: line 1 column 2"
    )
    folder = tmp_path / "tasks"
    folder.mkdir()
    for name in ("a.json", "b.json"):
        shutil.copy(OSWORLD / "hello-file.json", folder / name)
    assert refused(lambda: import_osworld(folder)) == (
        f"{folder}/b.json: task '0c1a5e6b-hello-file': field 'id': duplicate id (first in "
        f"{folder}/a.json)"
    )


def test_osworld_skips_what_has_no_mapping(tmp_path):
    task = json.loads((OSWORLD / "hello-file.json").read_text())
    cases = {
        "several": {**task["evaluator"], "func": ["exact_match", "exact_match"]},
        "infeasible": {"func": "infeasible"},
        "outside": {"func": "compare_text_file",
                    "result": {"type": "vm_file", "path": "/etc/passwd", "dest": "p"},
                    "expected": {"type": "cloud_file", "path": "https://x/p", "dest": "p"}},
        "postconfig": {**task["evaluator"], "postconfig": [{"type": "sleep"}]},
    }  # fmt: skip
    reasons = {}
    for name, evaluator in cases.items():
        (tmp_path / f"{name}.json").write_text(
            json.dumps({**task, "id": name, "evaluator": evaluator})
        )
    for record, why in import_osworld(tmp_path, files=OSWORLD / "files").skipped:
        reasons[record.split("'")[1]] = why
    assert reasons == {
        "several": "several evaluator functions (exact_match, exact_match) are not mapped",
        "infeasible": "evaluator 'infeasible' has no mapping (mapped: exact_match, "
                      "check_include_exclude, compare_text_file)",
        "outside": "evaluator.result.path '/etc/passwd' is not under /home/user (the "
                   "arena's is /work)",
        "postconfig": "the evaluator's postconfig steps are not reproduced",
    }  # fmt: skip


# -- datasets -------------------------------------------------------------------------


def test_dataset_jsonl_sample_with_the_numeric_scorer():
    imported = import_dataset(DATASETS / "arithmetic.jsonl", scorer="numeric", tolerance=0.5)
    first = imported.tasks[0]
    assert first == {
        "id": "mul-add", "prompt": "What is 17 * 23 + 4? Give the number.",
        "scorers": [{"type": "numeric", "target": 395, "tolerance": 0.5, "relative": False}],
        "meta": {"topic": "arithmetic"},
    }  # fmt: skip
    targets = [task["scorers"][0]["target"] for task in imported.tasks]
    assert targets == [395, 42, 3.5, 144, 1440, -7]
    assert len(parsed(imported).tasks) == 6


def test_dataset_csv_sample_with_the_choice_scorer():
    imported = import_dataset(DATASETS / "capitals.csv", scorer="choice")
    answers = [(t["id"], t["scorers"][0]["answer"]) for t in imported.tasks]
    # 'Canberra' (a choice's text) becomes its letter.
    assert answers == [("fr", "B"), ("jp", "A"), ("au", "C"), ("ca", "C"), ("br", "B")]
    assert imported.tasks[4]["choices"] == ["Rio de Janeiro", "Brasília", "São Paulo"]
    assert imported.tasks[0]["meta"] == {"region": "Europe"}
    assert parsed(imported).tasks[0].choices == ("Lyon", "Paris", "Nice")


@pytest.mark.parametrize(
    ("scorer", "expected"),
    [
        ("exact", {"type": "exact", "expected": "Paris"}),
        ("includes", {"type": "includes", "text": "Paris", "ignore_case": True}),
        ("regex", {"type": "regex", "pattern": "Paris"}),
        ("f1", {"type": "f1", "target": "Paris"}),
        ("model_graded_fact", {"type": "model_graded_fact", "target": "Paris"}),
    ],
)
def test_dataset_each_text_scorer_emits_the_fixed_schema(tmp_path, scorer, expected):
    path = tmp_path / "d.jsonl"
    path.write_text('{"input": "Capital of France?", "target": "Paris"}\n')
    imported = import_dataset(path, scorer=scorer)
    assert imported.tasks == [{"id": "sample-1", "prompt": "Capital of France?",
                               "scorers": [expected]}]  # fmt: skip
    assert parsed(imported).tasks[0].id == "sample-1"
    assert set(SCORERS) == {"exact", "includes", "regex", "f1", "choice", "numeric",
                            "model_graded_fact"}  # fmt: skip


def test_dataset_columns_are_remapped(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("question,answer,source\nCapital of France?,paris,atlas\n")
    imported = import_dataset(
        path, scorer="includes", fields={"input": "question", "target": "answer"},
        ignore_case=False,
    )  # fmt: skip
    assert imported.tasks == [{
        "id": "sample-1", "prompt": "Capital of France?",
        "scorers": [{"type": "includes", "text": "paris", "ignore_case": False}],
        "meta": {"source": "atlas"},
    }]  # fmt: skip


def dataset_refusal(tmp_path: Path, text: str, scorer: str = "exact", name="d.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return refused(lambda: import_dataset(path, scorer=scorer))


def test_dataset_refuses_bad_records_naming_the_line_and_field(tmp_path):
    at = f"{tmp_path}/d.jsonl: line"
    assert dataset_refusal(tmp_path, '{"target": "x"}\n') == f"{at} 1: field 'input': missing"
    assert dataset_refusal(tmp_path, '\n{"input": "q", "target": ["a", "b"]}\n') == (
        f"{at} 2: field 'target': must be a string, got list"
    )
    assert dataset_refusal(tmp_path, '{"input": "q", "target": "many"}\n', "numeric") == (
        f"{at} 1: field 'target': must be a number for the numeric scorer, got 'many'"
    )
    assert dataset_refusal(tmp_path, '{"input": "q", "target": "nan"}\n', "numeric") == (
        f"{at} 1: field 'target': must be a number for the numeric scorer, got 'nan'"
    )
    assert dataset_refusal(tmp_path, '{"input": "q", "target": "D", "choices": ["a", "b"]}\n',
                           "choice") == (
        f"{at} 1: field 'target': must be a letter from A to B or one of the choices, got 'D'"
    )  # fmt: skip
    assert dataset_refusal(tmp_path, '{"input": "q", "target": "A"}\n', "choice") == (
        f"{at} 1: field 'choices': the choice scorer needs choices"
    )
    assert dataset_refusal(tmp_path, '{"input": "q", "target": "A", "choices": "ab"}\n') == (
        f"{at} 1: field 'choices': must be a list of 2 to 26 choices"
    )
    assert dataset_refusal(tmp_path, '{"input": "q", "target": "(", "id": 1}\n', "regex") == (
        f"{at} 1: field 'target': not a valid regular expression: missing ), unterminated "
        "subpattern at position 0"
    )
    assert dataset_refusal(tmp_path, '{"input": "q", "target": "a", "id": "x"}\n' * 2) == (
        f"{at} 2: field 'id': duplicate id 'x' (first at line 1)"
    )
    assert dataset_refusal(tmp_path, '{"input": "q", "target": "a", "metadata": [1]}\n') == (
        f"{at} 1: field 'metadata': must be an object"
    )
    assert dataset_refusal(tmp_path, '["q", "a"]\n') == f"{at} 1: must be a JSON object, got list"
    assert dataset_refusal(tmp_path, '{"input": "q", "input": "r", "target": "a"}\n') == (
        f"{at} 1: not valid JSON: duplicate key 'input'"
    )
    assert dataset_refusal(tmp_path, b"\xff\xfe") == (
        f"{tmp_path}/d.jsonl: not valid UTF-8: byte 0xff at offset 0"
    )
    assert dataset_refusal(tmp_path, "\n\n") == f"{tmp_path}/d.jsonl: the file is empty"


def test_dataset_refuses_bad_csv(tmp_path):
    at = f"{tmp_path}/d.csv: line"
    assert dataset_refusal(tmp_path, "input,target\nq,a,extra\n", name="d.csv") == (
        f"{at} 2: has 3 cells, the header 2"
    )
    assert dataset_refusal(tmp_path, "input,input\nq,a\n", name="d.csv") == (
        f"{at} 1: the header has a blank or repeated column 'input'"
    )
    assert dataset_refusal(tmp_path, 'input,target,choices\nq,A,"[""a"",\n', "choice",
                           name="d.csv").startswith(f"{at} ")  # fmt: skip
    assert dataset_refusal(tmp_path, "input,target,choices\nq,A,[oops\n", "choice",
                           name="d.csv") == (
        f"{at} 2: field 'choices': not valid JSON: Expecting value"
    )  # fmt: skip
    assert dataset_refusal(tmp_path, "input,target\n,a\n", name="d.csv") == (
        f"{at} 2: field 'input': must not be blank"
    )


# -- the command ----------------------------------------------------------------------


def test_the_command_writes_a_suite_the_parser_reads_and_lists_what_it_skipped(tmp_path, capsys):
    out = tmp_path / "out" / "suite.yaml"
    call_command("eval_import", "osworld", str(OSWORLD), "--files", str(OSWORLD / "files"),
                 "--output", str(out))  # fmt: skip
    said = capsys.readouterr()
    assert said.out.strip() == f"wrote {out}: 3 tasks, 2 skipped"
    assert "skipped task '2b8e04fa-sheet-table'" in said.err
    suite = suites.load_suite(out)
    assert [t.id for t in suite.tasks][2] == "0c1a5e6b-hello-file"
    assert (out.parent / "osworld" / "9e47b1d3-fix-typo" / "report.txt").read_bytes() == (
        OSWORLD / "files" / "report.txt"
    ).read_bytes()

    with pytest.raises(CommandError) as caught:
        call_command("eval_import", "osworld", str(OSWORLD), "--files", str(OSWORLD / "files"),
                     "--output", str(out), "--strict")  # fmt: skip
    assert caught.value.returncode == 2
    assert "cannot be imported: config step 0 ('execute')" in str(caught.value)

    with pytest.raises(CommandError) as caught:
        call_command("eval_import", "osworld", str(OSWORLD / "sheet-table.json"),
                     "--output", str(tmp_path / "none.yaml"))  # fmt: skip
    assert str(caught.value) == f"{OSWORLD / 'sheet-table.json'}: no record could be imported"
    assert not (tmp_path / "none.yaml").exists()

    call_command("eval_import", "dataset", str(DATASETS / "capitals.csv"), "--scorer", "choice",
                 "--output", str(tmp_path / "capitals.yaml"))  # fmt: skip
    assert len(suites.load_suite(tmp_path / "capitals.yaml").tasks) == 5


def test_the_command_refuses_bad_options_naming_them(tmp_path):
    def refusal(*args: str) -> str:
        with pytest.raises(CommandError) as caught:
            call_command("eval_import", *args, "--output", str(tmp_path / "s.yaml"))
        assert caught.value.returncode == 2
        return str(caught.value)

    instances = str(SWE / "instances.jsonl")
    assert refusal("swebench", instances, "--repos", str(SWE / "repos"), "--time-limit", "5") == (
        f"{instances}: the time limit must be from 10 to 3600 s"
    )
    assert refusal("swebench", instances, "--repos", str(tmp_path / "none")) == (
        f"{instances}: the repositories directory {tmp_path / 'none'} does not exist"
    )
    assert refusal("swebench", instances, "--repos", str(SWE / "repos"), "--test-cmd", " ") == (
        f"{instances}: the test command must be one non-blank line"
    )
    data = str(DATASETS / "arithmetic.jsonl")
    assert refusal("dataset", data, "--scorer", "numeric", "--tolerance", "-1") == (
        f"{data}: the tolerance must be a finite number ≥ 0, got -1.0"
    )
    assert refusal("dataset", data, "--scorer", "exact", "--input-field", "target") == (
        f"{data}: two fields are mapped to the same column"
    )
    assert (
        refusal("osworld", str(tmp_path)) == f"{tmp_path}: the directory holds no .json task file"
    )
    assert not (tmp_path / "s.yaml").exists()
