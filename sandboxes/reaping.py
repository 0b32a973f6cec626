"""Reaping sandbox orphans. When a sandbox's PID namespace dies, its members are
reparented to the nearest subreaper ancestor, else to the host's pid 1 (which reaps
slowly on this host kind, so zombies pile up). Workers and `make run` make themselves
subreapers and reap. No Django here: `make run`'s launcher imports it too."""

import contextlib
import ctypes
import os
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans(keep: set[int]) -> int:
    """Reaps zombie children of this process, except ``keep`` (the pids ``subprocess``
    objects still own, whose exit status they must read themselves)."""
    me = str(os.getpid())
    reaped = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in keep:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and fields[1] == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(entry.name), os.WNOHANG)
                reaped += 1
    return reaped
