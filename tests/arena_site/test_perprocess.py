"""One instance per process (arena_site.perprocess): a forked child forgets its parent's
instance and lock and makes its own; the parent keeps its own."""

import os
import threading
from collections.abc import Callable

import pytest

from arena_site.perprocess import PerProcess

pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")


def in_child(run: Callable[[], str]) -> str:
    """What ``run`` returns in a forked child (which leaves by ``os._exit``, whatever
    happens, so it never returns into pytest)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            answer = run()
        except BaseException as error:
            answer = f"raised {error!r}"
        finally:
            os.write(write, answer.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as reading:
        answer = reading.read().decode()
    os.waitpid(pid, 0)
    return answer


def test_get_makes_the_instance_once():
    calls = []
    shared = PerProcess(lambda: calls.append(1) or object())

    assert shared.peek() is None
    first = shared.get()

    assert shared.get() is first
    assert shared.peek() is first
    assert calls == [1]


def test_a_forked_child_makes_its_own_instance_and_the_parent_keeps_its_own():
    shared = PerProcess(lambda: {"pid": os.getpid()})
    parents = shared.get()

    def child() -> str:
        before = shared.peek()
        mine = shared.get()
        return repr((before, mine == {"pid": os.getpid()}, shared.get() is mine))

    assert in_child(child) == repr((None, True, True))
    assert shared.get() is parents
    assert parents == {"pid": os.getpid()}


def test_a_forked_child_is_not_blocked_by_the_lock_a_parent_thread_held_at_the_fork():
    parent_pid = os.getpid()
    in_factory, release = threading.Event(), threading.Event()

    def make() -> int:
        if os.getpid() == parent_pid:  # the parent's: holds the lock until released
            in_factory.set()
            release.wait(10)
        return os.getpid()

    shared = PerProcess(make)
    maker = threading.Thread(target=shared.get)
    maker.start()
    assert in_factory.wait(10)  # the parent's thread is inside get(), holding the lock

    def child() -> str:
        got: list[int] = []
        getter = threading.Thread(target=lambda: got.append(shared.get()), daemon=True)
        getter.start()
        getter.join(5)
        return "blocked" if getter.is_alive() else repr(got == [os.getpid()])

    try:
        answer = in_child(child)
    finally:
        release.set()
        maker.join(10)

    assert answer == "True"
    assert shared.get() == parent_pid
