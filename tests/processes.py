"""Which processes of the sandbox uids are still alive, for tests that check a sandbox
left nothing running."""

import subprocess


def live_processes(*uids: int) -> list[str]:
    """Pids of live processes of ``uids``. A killed process may linger as a zombie until
    the host's init reaps it (slowly, on this kind of machine): it runs nothing and holds
    nothing, so it is not counted."""
    listing = subprocess.run(
        ["ps", "-U", ",".join(map(str, uids)), "-o", "pid=,stat="],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [pid for pid, stat in (line.split() for line in listing.splitlines()) if stat[0] != "Z"]
