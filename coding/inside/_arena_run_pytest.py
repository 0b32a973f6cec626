"""pytest as the judge harness starts it (``_arena_judge_harness.py``): argv is the fd
the harness writes this run's configuration to and the fd the observer writes records
on. pytest is imported before anything of the repository can be on sys.path (a
repository's own ``pytest.py`` never replaces it); then, for ``python -m pytest``, the
working directory goes first on sys.path, as Python itself would put it."""

import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def main() -> int:
    config_fd, records_fd = int(sys.argv[1]), int(sys.argv[2])
    config = json.loads(_read_all(config_fd))
    os.set_inheritable(records_fd, False)  # the tests' own subprocesses never get it
    if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:
        del sys.path[0]
    import pytest

    spec = importlib.util.spec_from_file_location(
        "_arena_observer", os.path.join(HERE, "_arena_observer.py")
    )
    observer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(observer)
    args = list(config["args"])
    if config["mode"] == "collect":
        args += ["--collect-only", "-q", "--continue-on-collection-errors"]
    if config.get("module"):
        sys.path.insert(0, os.getcwd())
    plugin = observer.Observer(records_fd, config)
    return int(pytest.main(args, plugins=[plugin]))


if __name__ == "__main__":
    sys.exit(main())
