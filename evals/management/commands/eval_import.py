"""``manage.py eval_import``: a task set labs already have → a suite ``eval run`` reads
(docs/evaluations.md, "Importing task sets").

    python manage.py eval_import swebench instances.jsonl --output suite.yaml --repos DIR \\
        [--test-cmd "python3 -m pytest -q -p no:cacheprovider"] [--time-limit 600] \\
        [--instance ID ...] [--strict]
    python manage.py eval_import osworld TASK.json|DIR --output suite.yaml [--files DIR] \\
        [--strict]
    python manage.py eval_import dataset data.jsonl|data.csv --output suite.yaml \\
        --scorer exact|includes|regex|f1|choice|numeric|model_graded_fact \\
        [--input-field F --target-field F --id-field F --choices-field F \\
         --metadata-field F] [--tolerance X --relative] [--case-sensitive]

The suite goes to ``--output``, with its files (SWE-bench bundles, OSWorld attachments)
beside it; it is read back with ``evals.suites`` before the command says it is done.
Each record skipped is listed on stderr with its reason (``--strict``: refused
instead). A bad file or flag exits 2 with one line naming the file, record and field."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from evals import suites
from evals.importers import ImportFailed, write_suite
from evals.importers.dataset import SCORERS, import_dataset
from evals.importers.osworld import import_osworld
from evals.importers.swebench import DEFAULT_TEST_CMD, import_swebench


class Command(BaseCommand):
    help = "Import SWE-bench instances, OSWorld-style tasks or a dataset as a suite."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="source", required=True)
        swe = sub.add_parser("swebench", help="SWE-bench instances (JSON list or JSONL)")
        osw = sub.add_parser("osworld", help="OSWorld-style task JSON (a file or a directory)")
        data = sub.add_parser("dataset", help="an Inspect-style dataset (JSONL or CSV)")
        for each in (swe, osw, data):
            each.add_argument("file", help="the file (or, for osworld, directory) to import")
            each.add_argument("--output", required=True, help="the suite file to write")
        for each in (swe, osw):
            each.add_argument(
                "--strict", action="store_true", help="refuse a record instead of skipping it"
            )
        swe.add_argument("--repos", required=True, help="DIR with owner__name repositories")
        swe.add_argument("--test-cmd", default=DEFAULT_TEST_CMD, help="runs the test ids")
        swe.add_argument("--time-limit", type=int, default=suites.REPO_TIME_LIMIT_DEFAULT)
        swe.add_argument("--instance", action="append", default=[], help="only this id")
        osw.add_argument("--files", help="DIR holding the files the tasks download")
        data.add_argument("--scorer", required=True, choices=SCORERS)
        data.add_argument("--format", choices=("jsonl", "csv"), help="default: by extension")
        for name in ("input", "target", "id", "choices", "metadata"):
            data.add_argument(f"--{name}-field", default=name, help=f"the column of '{name}'")
        data.add_argument("--tolerance", type=float, default=0.0, help="numeric: |error| ≤ X")
        data.add_argument("--relative", action="store_true", help="numeric: X is relative")
        data.add_argument("--case-sensitive", action="store_true", help="includes: exact case")

    def handle(self, *args, source, file, output, **options) -> None:
        path, out = Path(file), Path(output)
        try:
            imported = self._import(source, path, options)
        except ImportFailed as error:
            raise CommandError(str(error), returncode=2) from None
        for record, reason in imported.skipped:
            self.stderr.write(f"skipped {record}: {reason}")
        if not imported.tasks:
            raise CommandError(f"{path}: no record could be imported", returncode=2)
        header = f"Imported by manage.py eval_import {source} from {path.name}."
        try:
            write_suite(imported, out, header=header)
            suites.load_suite(out)
        except suites.SuiteError as error:
            raise CommandError(f"the suite written is refused: {error}", returncode=2) from None
        self.stdout.write(
            f"wrote {out}: {len(imported.tasks)} tasks, {len(imported.skipped)} skipped"
        )

    @staticmethod
    def _import(source: str, path: Path, options: dict):
        if source == "swebench":
            return import_swebench(
                path, repos=Path(options["repos"]), test_cmd=options["test_cmd"],
                time_limit_s=options["time_limit"], only=tuple(options["instance"]),
                strict=options["strict"],
            )  # fmt: skip
        if source == "osworld":
            files = Path(options["files"]) if options["files"] else None
            return import_osworld(path, files=files, strict=options["strict"])
        fields = {name: options[f"{name}_field"] for name in ("input", "target", "id",
                                                               "choices", "metadata")}  # fmt: skip
        return import_dataset(
            path, scorer=options["scorer"], fields=fields, file_format=options["format"],
            tolerance=options["tolerance"], relative=options["relative"],
            ignore_case=not options["case_sensitive"],
        )  # fmt: skip
