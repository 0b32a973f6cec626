"""The arena's ASGI application served by real server processes for the benchmarks:
uvicorn (the arena's server: httptools and uvloop), Daphne (the server before) and
Granian (a candidate), ``n`` processes at once, so that each benchmark can measure the
servers against each other in the same run.

Daphne processes accept on one listening socket made here (``--fd``: the kernel
spreads the connections). uvicorn and Granian run their own ``--workers`` on a port, as
``make run`` and the image's ``web`` role run uvicorn: uvicorn's ``--fd`` takes any
inherited socket for a Unix one, and uvloop then leaves Nagle's algorithm on for its
TCP connections (44 ms answers: the delayed ACK). The processes'
CPU time (their whole process group: Granian's workers are children) is read from
/proc, for CPU per request."""

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
SERVERS = ("uvicorn", "daphne", "granian")
APP = "arena_site.asgi:application"


def server_argv(server: str, *, fd: int | None = None, port: int | None = None,
                processes: int = 1) -> list[str]:  # fmt: skip
    """The command of one server process (Granian: of its ``processes`` workers)."""
    if server == "uvicorn":
        # the arena's own command (arena_site/webserver.py), as make run starts it
        from arena_site.webserver import command

        argv = command(host="127.0.0.1", port=port, processes=processes, server=server)
        return [PYTHON, *argv[1:]]
    if server == "daphne":
        return [PYTHON, "-m", "daphne", "--fd", str(fd), "-v", "0", APP]
    if server == "granian":
        return [
            PYTHON, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(processes), "--loop", "uvloop",
            "--http", "1", "--no-ws", "--log-level", "warning", "--no-access-log", APP,
        ]  # fmt: skip
    raise ValueError(f"unknown server {server!r}; one of {', '.join(SERVERS)}")


def cpu_of(names: tuple[str, ...]) -> float:
    """User + system CPU seconds of every live process whose command name is in
    ``names`` (e.g. PostgreSQL's backends, ``redis-server``): the services' share of a
    benchmark, read before and after it (a process that ended in between is missed)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head, tail = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        comm = head.split("(", 1)[1]
        if comm in names:
            fields = tail.split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


POSTGRES = ("postgres",)
REDIS = ("redis-server",)


class WebServers:
    """``n`` web processes of ``server`` serving the arena on one port of 127.0.0.1."""

    def __init__(self, n: int, log_dir: Path, env: dict[str, str], *,
                 server: str = "uvicorn") -> None:  # fmt: skip
        self.server = server
        self.sock = None
        self.procs: list[subprocess.Popen] = []
        if server in ("uvicorn", "granian"):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
            probe.close()
            self._spawn(server_argv(server, port=self.port, processes=n), env, log_dir, 0)
        else:
            self.sock = socket.socket()
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", 0))
            self.sock.listen(1024)
            self.sock.set_inheritable(True)
            self.port = self.sock.getsockname()[1]
            for i in range(n):
                self._spawn(server_argv(server, fd=self.sock.fileno()), env, log_dir, i)
        self.base = f"http://127.0.0.1:{self.port}"
        self.n = n
        deadline = time.monotonic() + 120
        while not self._answers():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                raise RuntimeError(f"{server} did not start; see {log_dir}")
            time.sleep(0.3)
        for _ in range(10 * n):  # warm every process
            self._answers()

    def _spawn(self, argv: list[str], env: dict[str, str], log_dir: Path, i: int) -> None:
        log = (log_dir / f"{self.server}-{i}.log").open("wb")
        pass_fds = (self.sock.fileno(),) if self.sock else ()
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=pass_fds, start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)

    def _answers(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/api/nope/")
            conn.getresponse().read()
            conn.close()
            return True
        except OSError:
            return False

    def cpu_s(self) -> float:
        """User + system CPU seconds of every process of the servers' process groups."""
        groups = {os.getpgid(p.pid) for p in self.procs if p.poll() is None}
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) in groups:  # field 5 of stat: the process group
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.sock is not None:
            self.sock.close()


if __name__ == "__main__":  # a quick look: python tests/bench/web.py uvicorn 2
    import tempfile

    servers = WebServers(int(sys.argv[2]), Path(tempfile.mkdtemp()), dict(os.environ),
                         server=sys.argv[1])  # fmt: skip
    print(servers.base, flush=True)
    try:
        signal.pause()
    finally:
        servers.stop()
