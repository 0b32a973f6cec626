"""One instance per process, made on first use and forgotten in a forked child.

A fork copies no thread (the instance's threads do not exist in the child) and may copy
a lock that some other thread of the parent held at that instant: the child drops the
parent's instance and lock (``os.register_at_fork``) and makes its own on first use.
Plain standard library: the sandboxes run without Django too (the benchmark)."""

import os
import threading
from collections.abc import Callable


class PerProcess[T]:
    """``PerProcess(factory)``, made at module level (it registers a fork hook that lives
    as long as the process): :meth:`get` returns this process's instance, calling
    ``factory`` under a lock on first use."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._instance: T | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget_parents)

    def get(self) -> T:
        """This process's instance, made now if there is none yet (``factory`` runs while
        the lock is held: it must not call :meth:`get` or :meth:`peek` of this object)."""
        with self._lock:
            if self._instance is None:
                self._instance = self._factory()
            return self._instance

    def peek(self) -> T | None:
        """This process's instance if it has been made, else None; never makes one."""
        with self._lock:
            return self._instance

    def _forget_parents(self) -> None:
        self._instance, self._lock = None, threading.Lock()
