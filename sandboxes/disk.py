"""Hard disk quotas for a run's writable space, enforced by the kernel.

A root worker mounts one tmpfs per sandbox of a run (the agent's: ``/work``, ``/tmp``,
home; the display's: the framebuffer dir, its ``/tmp`` and home) with ``size=`` (bytes)
and ``nr_inodes=`` (files); a write past either fails inside with ENOSPC. tmpfs pages
are charged to the memory cgroup of the process that writes them, the run's own, so a
lane's disk is also its memory, bounded twice; the host's disks are never written.
Unmounted on destroy, and by the janitor for a dead worker's runs.

Without root nothing can be mounted: bubblewrap's ``--size`` tmpfs bounds ``/tmp`` and
home in bytes only, and ``/work`` stays a host directory bounded by the shell's
``RLIMIT_FSIZE`` per file (README, "Sandboxes")."""

import contextlib
import ctypes
import errno
import os
from dataclasses import dataclass
from pathlib import Path

MS_NOSUID = 0x2
MS_NODEV = 0x4
MNT_DETACH = 0x2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]  # fmt: skip
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


@dataclass(frozen=True)
class Quota:
    bytes: int
    inodes: int


def can_mount() -> bool:
    """Whether this process may mount the quota filesystems (a root worker)."""
    return os.geteuid() == 0


def mount_tmpfs(target: Path, quota: Quota, *, source: str) -> None:
    """Mounts a tmpfs of ``quota`` on the existing directory ``target`` (root-owned,
    mode 0711: sandbox uids traverse it to their own subdirectories, nobody lists it).
    ``source`` names it in the mount table (the janitor matches by path, not by it)."""
    options = f"size={quota.bytes},nr_inodes={quota.inodes},mode=0711,uid=0,gid=0"
    result = _libc.mount(
        source.encode(), os.fsencode(target), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()
    )
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot mount the run's tmpfs on {target}: {os.strerror(code)}")


def unmount(target: Path) -> None:
    """Detaches the mount at ``target`` (lazily: a process that still holds a file
    there keeps it until it lets go). Nothing mounted there is not an error."""
    if _libc.umount2(os.fsencode(target), MNT_DETACH) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOENT):
            raise OSError(code, f"cannot unmount {target}: {os.strerror(code)}")


def mounts_under(root: Path) -> list[Path]:
    """The mount points at or under ``root`` in this process's mount table, deepest
    first (the order to unmount them in)."""
    prefix = os.fsencode(os.path.realpath(root))
    found: list[bytes] = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", "rb") as table:
        for line in table:
            point = _unescape(line.split(b" ")[4])
            if point == prefix or point.startswith(prefix + b"/"):
                found.append(point)
    return [Path(os.fsdecode(p)) for p in sorted(set(found), key=len, reverse=True)]


def unmount_all_under(root: Path) -> int:
    """Unmounts every mount at or under ``root``; returns how many there were."""
    points = mounts_under(root)
    for point in points:
        unmount(point)
    return len(points)


def _unescape(field: bytes) -> bytes:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040)."""
    out, i = bytearray(), 0
    while i < len(field):
        if field[i : i + 1] == b"\\" and field[i + 1 : i + 4].isdigit():
            out.append(int(field[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)
