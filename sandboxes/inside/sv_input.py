"""The display sandbox's ``input`` op: which xdotool commands are accepted
(:func:`input_argv_ok`), and running them (:func:`run_input`): as XTEST events
(``sv_xtest``) or by xdotool itself."""

import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sv_xtest import XTestInput

# The xdotool commands the host sends (sandboxes.local) and how many arguments each
# takes; "type" and "key" end the command line after "--". Anything else (exec,
# behave, search, a window command) is refused: input must not be a way to run
# programs outside the shell's limits.
XDOTOOL_ARGS = {"mousemove": 2, "mousedown": 1, "mouseup": 1}
XDOTOOL_OPTIONS = {"click": {"--repeat", "--delay"}, "type": {"--delay"}, "key": set()}


def input_argv_ok(argv: object) -> bool:
    """Whether ``argv`` is a chain of the xdotool commands the host sends: mousemove X Y,
    mousedown/mouseup B, click [--repeat N] [--delay MS] B, type [--delay MS] -- TEXT,
    key -- COMBO (the last two end the chain)."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return False
    i = 0
    while i < len(argv):
        command = argv[i]
        i += 1
        if command in XDOTOOL_ARGS:
            values = argv[i : i + XDOTOOL_ARGS[command]]
            if len(values) != XDOTOOL_ARGS[command] or not all(v.isdigit() for v in values):
                return False
            i += len(values)
            continue
        if command not in XDOTOOL_OPTIONS:
            return False
        while i < len(argv) and argv[i] in XDOTOOL_OPTIONS[command]:
            if i + 1 >= len(argv) or not argv[i + 1].isdigit():
                return False
            i += 2
        if command == "click":
            if i >= len(argv) or not argv[i].isdigit():
                return False
            i += 1
            continue
        return i < len(argv) and argv[i] == "--" and i + 1 < len(argv)  # type, key
    return True


def run_input(argv: list, xtest: "XTestInput | None" = None) -> dict:
    """``argv`` once it passed :func:`input_argv_ok` (so it runs nothing else): through
    ``xtest`` when given, else xdotool under this supervisor's own hard rlimits and a
    timeout. No ``preexec_fn``: it would force a fork of the whole supervisor on every
    click."""
    if not input_argv_ok(argv):
        return {"ok": False, "error": "bad input arguments"}
    if xtest is not None:
        return xtest.run(argv)
    proc = subprocess.run(["xdotool", *argv], capture_output=True, timeout=20, check=False)
    if proc.returncode != 0:
        return {
            "ok": False,
            "error": proc.stderr.decode(errors="replace")[:500] or "xdotool failed",
        }
    return {"ok": True, "via": "xdotool"}
