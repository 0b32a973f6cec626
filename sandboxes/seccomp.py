"""System-call filters for every sandboxed process, built with libseccomp (``pyseccomp``).

One deny list, two profiles:

- ``AGENT`` (the agent's sandbox: its shell, xdotool, the supervisor that serves them):
  the whole list, plus every namespace flag of ``clone``/``unshare`` and ``chroot``.
- ``BROWSER`` (the display sandbox: Xvfb and Chromium, under a uid of their own): the
  same list, except the user, PID and network namespaces and ``chroot`` that Chromium's
  own sandbox is built from (it clones each renderer into new user, PID and network
  namespaces and chroots it; measured with strace on this host's Chromium). The agent
  cannot reach those processes: another uid, another PID namespace.

Denied calls fail with EPERM (``clone3`` with ENOSYS, so the C library falls back to
``clone``, whose flags a filter can read). Calls of another architecture (32-bit
``int 0x80``) kill the caller: libseccomp's default for a filter of the native
architecture only. The BPF program is built once per process and handed to bubblewrap
as ``--seccomp FD``; :func:`docker_profile` renders the same list as a Docker profile."""

import errno
import json
import os
import threading
from typing import Any

AGENT = "agent"
BROWSER = "browser"
PROFILES = (AGENT, BROWSER)

CLONE_NEWTIME = 0x00000080
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (
    CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
)  # fmt: skip
# What Chromium's namespace sandbox creates (clone and unshare): the browser profile
# keeps these and nothing else.
CHROMIUM_NAMESPACES = (CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET)

# Denied to every sandboxed process, whatever it is: reading or steering other
# processes, (re)mounting, entering namespaces, the kernel keyring, eBPF, perf,
# io_uring, rebooting or replacing the kernel, userfaultfd (a favourite of kernel
# exploits), modules, clocks, swap, accounting, raw I/O ports, the kernel log, handles.
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    "setns",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "reboot",
    "userfaultfd",
    "init_module", "finit_module", "delete_module",
    "acct", "swapon", "swapoff", "quotactl",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "iopl", "ioperm", "syslog", "open_by_handle_at", "lookup_dcookie",
)  # fmt: skip
# personality(2) values from ADDR_NO_RANDOMIZE (0x0040000) up turn off address-space
# randomisation, make data executable or map page zero; below it are only the persona
# (PER_LINUX, PER_LINUX32) and UNAME26. The query (0xffffffff) is refused too: nothing
# in the desktop asks.
PERSONALITY_SAFE_BELOW = 0x0040000
# Denied to the agent's processes only (Chromium's sandbox chroots its renderers).
AGENT_ONLY = ("chroot",)


def rules(profile: str) -> list[dict[str, Any]]:
    """The filter as data: ``{"syscall", "errno", "arg0_masked"?, "arg0_at_least"?}``
    entries (a rule with a condition denies only calls whose first argument matches)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown seccomp profile {profile!r}")
    denied = [*DENIED, *(AGENT_ONLY if profile == AGENT else ())]
    out: list[dict[str, Any]] = [{"syscall": name, "errno": errno.EPERM} for name in denied]
    out.append({"syscall": "clone3", "errno": errno.ENOSYS})
    out.append(
        {"syscall": "personality", "errno": errno.EPERM, "arg0_at_least": PERSONALITY_SAFE_BELOW}
    )
    allowed = CHROMIUM_NAMESPACES if profile == BROWSER else ()
    for flag in NAMESPACE_FLAGS:
        if flag in allowed:
            continue
        for call in ("clone", "unshare"):  # the flags are the first argument on x86-64
            out.append({"syscall": call, "errno": errno.EPERM, "arg0_masked": flag})
    return out


_bpf: dict[str, bytes] = {}
_bpf_lock = threading.Lock()


def bpf(profile: str) -> bytes:
    """The compiled BPF program of ``profile`` (built once per process). Raises
    RuntimeError when libseccomp or its binding is missing: no sandbox starts without
    its filter."""
    with _bpf_lock:
        if profile not in _bpf:
            _bpf[profile] = _compile(profile)
        return _bpf[profile]


def _compile(profile: str) -> bytes:
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError) as exc:  # RuntimeError: libseccomp.so missing
        raise RuntimeError(
            "sandboxes need a seccomp filter: install libseccomp2 (Debian) and the "
            f"pyseccomp binding (the locked Python dependencies): {exc}"
        ) from exc
    program = sc.SyscallFilter(sc.ALLOW)
    # A binary tree over syscall numbers rather than a list: every call of every
    # process (Chromium makes many) pays a few comparisons, not one per rule.
    program.set_attr(sc.Attr.CTL_OPTIMIZE, 2)
    for rule in rules(profile):
        action = sc.ERRNO(rule["errno"])
        if "arg0_masked" in rule:
            flag = rule["arg0_masked"]
            program.add_rule(action, rule["syscall"], sc.Arg(0, sc.MASKED_EQ, flag, flag))
        elif "arg0_at_least" in rule:
            program.add_rule(action, rule["syscall"], sc.Arg(0, sc.GE, rule["arg0_at_least"]))
        else:
            program.add_rule(action, rule["syscall"])
    fd = os.memfd_create(f"seccomp-{profile}", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as out:
            program.export_bpf(out)
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)


def bpf_fd(profile: str) -> int:
    """A fresh file descriptor holding ``profile``'s BPF program, at offset 0, for
    ``bwrap --seccomp FD`` (hand it over with ``pass_fds``; bubblewrap reads it). The
    caller closes its own copy once the child started."""
    program = bpf(profile)
    fd = os.memfd_create(f"seccomp-{profile}")
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def docker_profile(profile: str) -> str:
    """The same rules as a Docker seccomp profile (JSON text): everything allowed but
    the deny list, as for the local backend."""
    syscalls = []
    for rule in rules(profile):
        entry: dict[str, Any] = {
            "names": [rule["syscall"]],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": rule["errno"],
        }
        if "arg0_masked" in rule:
            flag = rule["arg0_masked"]
            entry["args"] = [
                {"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}
            ]
        elif "arg0_at_least" in rule:
            entry["args"] = [{"index": 0, "value": rule["arg0_at_least"], "op": "SCMP_CMP_GE"}]
        syscalls.append(entry)
    return json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": syscalls})
