"""The rlimits inside a sandbox: the supervisor's own (:func:`harden`) and those it sets
on what it starts (:func:`limiter`)."""

import ctypes
import resource

PR_SET_DUMPABLE = 4


def harden(limits: dict) -> None:
    """Makes this process not dumpable (no other process of the uid may trace it or
    read its memory, environment or file descriptors through /proc) and sets its own
    rlimits, soft and hard, so nothing it starts can have more; no core files."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def limiter(limits: dict):
    """A ``preexec_fn`` that sets ``limits`` (soft and hard: the child cannot raise
    them back) in the child before it runs anything."""

    def apply_limits() -> None:
        for name, value in limits.items():
            resource.setrlimit(getattr(resource, name), (value, value))

    return apply_limits
