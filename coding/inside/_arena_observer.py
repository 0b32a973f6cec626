"""The pytest plugin of the judge harness (``_arena_judge_harness.py``). It runs inside
the test process, beside the code under test, so nothing it reports is believed on its
own: the harness and the host check it against what an honest run must show.

It writes one JSON line per event on the records fd: the tests collected (after any
deselection), each collector that failed, each test phase's outcome, and the session's
end. In ``run`` mode it adds the host's check tests, tests that must fail, each under a
name the host chose, in a module of the suite at a place the host chose, written as
that module's own code would be; a run that reports one of them passed was not honest.
It turns off ``-x``/``--maxfail``: every test runs."""

import json
import os

import pytest

KINDS = {
    "assert": "def {name}():\n    assert {a} == {b}\n",
    "unittest": (
        "def {name}():\n    import unittest\n\n    unittest.TestCase().assertEqual({a}, {b})\n"
    ),
    "raise": "def {name}():\n    if {a} != {b}:\n        raise AssertionError({a})\n",
}


class Observer:
    def __init__(self, fd: int, config: dict) -> None:
        self.fd = fd
        self.mode = config.get("mode", "run")
        self.canaries = list(config.get("canaries", []))
        self.names: set[str] = set()

    def send(self, record: dict) -> None:
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        while data:
            try:
                written = os.write(self.fd, data)
            except OSError:
                return
            data = data[written:]

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config) -> None:
        config.option.maxfail = 0

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.send({"k": "collect_error", "id": report.nodeid})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        self.send({"k": "collected", "ids": [item.nodeid for item in items]})
        if self.mode != "run" or not items:
            return
        modules = []
        for item in items:
            module = item.getparent(pytest.Module)
            if module is not None and module not in modules:
                modules.append(module)
        if not modules:
            return
        for canary in self.canaries:
            module = modules[min(int(float(canary["parent"]) * len(modules)), len(modules) - 1)]
            name = str(canary["name"])
            source = KINDS[canary["kind"]].format(name=name, a=int(canary["a"]), b=int(canary["b"]))
            namespace = {"__name__": module.obj.__name__}
            exec(compile(source, str(module.path), "exec"), namespace)  # noqa: S102
            item = pytest.Function.from_parent(module, name=name, callobj=namespace[name])
            self.names.add(name)
            at = min(int(float(canary["slot"]) * (len(items) + 1)), len(items))
            items.insert(at, item)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session) -> None:
        session.testscollected -= len(self.names)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config):
        """The check tests are the judge's, not the suite's: they show nowhere in the
        output people read (no progress mark, no failure, not in the counts)."""
        if report.nodeid.rsplit("::", 1)[-1] in self.names:
            return "", "", ""
        return None

    def pytest_runtest_logreport(self, report) -> None:
        self.send(
            {
                "k": "report",
                "id": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"),
            }
        )

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        self.send({"k": "finish", "status": int(exitstatus)})
