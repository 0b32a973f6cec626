"""Provisioning and tearing down sandboxes, with a slot lease per live sandbox."""

import os
import shutil
import socket
import subprocess
from contextlib import contextmanager

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from sandboxes.base import Sandbox, SandboxBackend, SandboxSpec
from sandboxes.local import LocalBackend
from sandboxes.models import SandboxLease

MAX_SLOTS = 64


def sandbox_backend() -> SandboxBackend:
    name = settings.ARENA["SANDBOX_BACKEND"]
    if name == "local":
        return LocalBackend(settings.ARENA["SANDBOX_ROOT"], settings.ARENA["SANDBOX_UID_BASE"])
    raise ValueError(f"unknown sandbox backend {name!r} (ARENA_SANDBOX_BACKEND)")


def lease_acquire(*, backend: str, run_id: int | None) -> SandboxLease:
    """Takes the lowest free slot on this host. Slots map to uids, so two live sandboxes
    never share a uid (RLIMIT_NPROC counts per uid)."""
    host = socket.gethostname()
    for slot in range(MAX_SLOTS):
        try:
            with transaction.atomic():
                return SandboxLease.objects.create(
                    slot=slot, backend=backend, host=host, worker_pid=os.getpid(), run_id=run_id
                )
        except IntegrityError:
            continue
    raise RuntimeError(f"all {MAX_SLOTS} sandbox slots on {host} are leased")


def lease_release(*, lease: SandboxLease) -> None:
    SandboxLease.objects.filter(pk=lease.pk, released_at=None).update(released_at=timezone.now())


@contextmanager
def sandbox_session(spec: SandboxSpec):
    """Provisions a sandbox for one run and always destroys it and frees its slot."""
    backend = sandbox_backend()
    lease = lease_acquire(backend=backend.name, run_id=spec.run_id)
    sandbox: Sandbox | None = None
    try:
        sandbox = backend.provision(spec, slot=lease.slot)
        SandboxLease.objects.filter(pk=lease.pk).update(path=str(getattr(sandbox, "run_dir", "")))
        yield sandbox
    finally:
        if sandbox is not None:
            sandbox.destroy()
        lease_release(lease=lease)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sandbox_janitor() -> int:
    """Reaps sandboxes whose worker died on this host: kills what still runs under the
    slot's uid, removes the run dir and frees the slot. Returns how many it reaped."""
    host = socket.gethostname()
    reaped = 0
    for lease in SandboxLease.objects.filter(host=host, released_at=None):
        if _pid_alive(lease.worker_pid):
            continue
        if os.geteuid() == 0:
            uid = settings.ARENA["SANDBOX_UID_BASE"] + lease.slot
            subprocess.run(["pkill", "-KILL", "-U", str(uid)], check=False)
        if lease.path:
            shutil.rmtree(lease.path, ignore_errors=True)
        lease_release(lease=lease)
        reaped += 1
    return reaped
