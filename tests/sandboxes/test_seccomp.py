"""The system-call deny list as data (sandboxes.seccomp): what each profile refuses, and
the Docker profile built from the same rules. That the kernel enforces them inside a
real sandbox is test_hostile.py's."""

import errno
import json

import pytest

from sandboxes import seccomp


def denied(profile: str) -> set[str]:
    return {r["syscall"] for r in seccomp.rules(profile) if len(r) == 2}


def namespace_flags(profile: str, call: str) -> set[int]:
    return {
        r["arg0_masked"]
        for r in seccomp.rules(profile)
        if r["syscall"] == call and "arg0_masked" in r
    }


@pytest.mark.parametrize("profile", seccomp.PROFILES)
def test_both_profiles_deny_the_dangerous_calls(profile):
    must = {
        "ptrace", "process_vm_readv", "process_vm_writev", "setns", "mount", "umount2",
        "pivot_root", "move_mount", "fsopen", "keyctl", "add_key", "request_key", "bpf",
        "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register",
        "kexec_load", "kexec_file_load", "reboot", "userfaultfd",
    }  # fmt: skip
    assert must <= denied(profile)
    rules = seccomp.rules(profile)
    assert {"syscall": "clone3", "errno": errno.ENOSYS} in rules  # glibc falls back to clone
    assert {
        "syscall": "personality",
        "errno": errno.EPERM,
        "arg0_at_least": seccomp.PERSONALITY_SAFE_BELOW,
    } in rules


def test_the_agent_may_create_no_namespace_at_all():
    every = set(seccomp.NAMESPACE_FLAGS)
    assert namespace_flags(seccomp.AGENT, "clone") == every
    assert namespace_flags(seccomp.AGENT, "unshare") == every
    assert "chroot" in denied(seccomp.AGENT)


def test_the_browser_keeps_only_what_chromiums_sandbox_is_made_of():
    kept = {seccomp.CLONE_NEWUSER, seccomp.CLONE_NEWPID, seccomp.CLONE_NEWNET}
    for call in ("clone", "unshare"):
        assert namespace_flags(seccomp.BROWSER, call) == set(seccomp.NAMESPACE_FLAGS) - kept
    assert "chroot" not in denied(seccomp.BROWSER)


@pytest.mark.parametrize("profile", seccomp.PROFILES)
def test_the_filter_compiles_to_bpf(profile):
    program = seccomp.bpf(profile)
    assert len(program) % 8 == 0 and len(program) > 100  # sock_filter entries of 8 bytes
    assert seccomp.bpf(profile) is program  # built once per process


def test_the_docker_profile_is_the_same_list():
    profile = json.loads(seccomp.docker_profile(seccomp.BROWSER))
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    rules = seccomp.rules(seccomp.BROWSER)
    assert len(profile["syscalls"]) == len(rules)
    ptrace = next(s for s in profile["syscalls"] if s["names"] == ["ptrace"])
    assert ptrace == {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}
    clones = [s for s in profile["syscalls"] if s["names"] == ["clone"]]
    flag = seccomp.CLONE_NEWNS
    assert {
        "names": ["clone"],
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": errno.EPERM,
        "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
    } in clones


def test_an_unknown_profile_is_an_error():
    with pytest.raises(ValueError, match="unknown seccomp profile"):
        seccomp.rules("lenient")
