"""The arena's own settings (``settings.ARENA``): one typed, validated, frozen object.

Every knob is a field with its type, default and bounds; ``ArenaConfig.from_env`` reads
the ``ARENA_<FIELD>`` variables that exist for it, and any bad value, in the
environment or in a test's ``replace(...)``, stops with ``ImproperlyConfigured`` naming
the variable. A field that no code reads does not belong here.

The method's constants (SPEC) carry their SPEC symbol in the comment beside them; the
operations guide (docs/operations.md) lists the variables."""

import dataclasses
import ipaddress
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

# Where per-run directories go unless ARENA_SANDBOX_ROOT says (from_env puts it under
# the data directory).
DEFAULT_SANDBOX_ROOT = Path(__file__).resolve().parent.parent / "var" / "sandboxes"
# Where Debian's tesseract-ocr-eng installs the OCR language data (the leak scan).
DEFAULT_TESSDATA = Path("/usr/share/tesseract-ocr/5/tessdata")
# Bounds: (minimum, maximum) for numbers; None is unbounded on that side.
_BOUNDS = "bounds"
# The environment variable a field is read from (absent: a constant, not read).
_ENV = "env"


def knob(default: Any, env: str | None = None, *, lo: float | None = None,
         hi: float | None = None, choices: tuple[str, ...] | None = None) -> Any:  # fmt: skip
    """A field of ArenaConfig: its default, the variable it comes from, its bounds. A
    mutable default (a dict) is copied for each instance."""
    metadata = {_ENV: env, _BOUNDS: (lo, hi), "choices": choices}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class ArenaConfig:
    # --- capacity (docs/performance.md "Requests beyond capacity") ------------------
    # PostgreSQL connections per process through psycopg's pool (0: no pool, connections
    # per thread kept ARENA_DB_CONN_MAX_AGE, e.g. behind PgBouncer); a request waits at
    # most the timeout for one, then gets 503 with Retry-After.
    db_pool_min: int = knob(1, "ARENA_DB_POOL_MIN", lo=0, hi=1000)
    db_pool_max: int = knob(20, "ARENA_DB_POOL_MAX", lo=0, hi=1000)
    db_pool_timeout_s: float = knob(3.0, "ARENA_DB_POOL_TIMEOUT_S", lo=0.05, hi=60.0)
    # HTTP requests handled at once per web process; the next one is answered 503 with
    # Retry-After at once. At most ARENA_DB_POOL_MAX (start-up checks it): an admitted
    # request never queues for a connection. Past a few per core, more in flight only
    # adds latency (each waits for the CPU); a browser loads up to 6 requests at once.
    max_inflight: int = knob(16, "ARENA_MAX_INFLIGHT", lo=1, hi=100_000)
    # --- logs (docs/operations.md "Logs") --------------------------------------------
    # One JSON object per line (for a log collector) or text for people; `make run`
    # sets plain, everything else gets JSON unless it says otherwise.
    log_format: str = knob("json", "ARENA_LOG_FORMAT", choices=("json", "plain"))
    # --- SPEC §2 admission ---------------------------------------------------------
    queue_max: int = knob(1000, "ARENA_QUEUE_MAX", lo=1)  # QUEUE_MAX
    team_queue_quota: int = knob(100, "ARENA_TEAM_QUEUE_QUOTA", lo=1)
    dup_theta: float = knob(0.55, "ARENA_DUP_THETA", lo=0.0, hi=1.0)  # θ
    dup_window_days: int = knob(7, "ARENA_DUP_WINDOW_DAYS", lo=0)  # DUP_WINDOW
    dup_max_tasks: int = knob(200, lo=1)  # the newest tasks the guard compares with
    # Bytes each process may hold of earlier tasks' trigram hashes, MinHash signatures and
    # LSH band keys (battles/admission_db.py); beyond it the least recently used go.
    dup_cache_bytes: int = knob(
        64 * 1024**2, "ARENA_DUP_CACHE_BYTES", lo=64 * 1024, hi=16 * 1024**3
    )
    # Tasks admitted per clock hour through the site and the API: per account (whatever
    # team they were for) and per client address (many accounts behind one); 429 above.
    submit_account_rate_per_hour: int = knob(
        30, "ARENA_SUBMIT_ACCOUNT_RATE_PER_HOUR", lo=1, hi=1_000_000
    )
    submit_address_rate_per_hour: int = knob(
        60, "ARENA_SUBMIT_ADDRESS_RATE_PER_HOUR", lo=1, hi=1_000_000
    )
    instruction_max_chars: int = knob(20_000, "ARENA_INSTRUCTION_MAX_CHARS", lo=1)
    attachments_max_count: int = knob(5, "ARENA_ATTACHMENTS_MAX_COUNT", lo=0)
    attachment_max_bytes: int = knob(10 * 1024**2, "ARENA_ATTACHMENT_MAX_BYTES", lo=1)
    attachments_max_total_bytes: int = knob(25 * 1024**2, "ARENA_ATTACHMENTS_MAX_TOTAL_BYTES", lo=1)
    # --- SPEC §3 matchmaking -------------------------------------------------------
    match_kappa: float = knob(4.0, "ARENA_MATCH_KAPPA", lo=0.0)  # κ
    match_epsilon: float = knob(0.05, "ARENA_MATCH_EPSILON", lo=1e-9)  # ε > 0
    # --- live frames (arena_site/realtime.py) -----------------------------------------
    # "process": a web process joins each group once and fans frames out to its sockets;
    # "socket": every socket joins (the old path, the benchmark's reference).
    realtime_fanout: str = knob("process", "ARENA_REALTIME_FANOUT", choices=("process", "socket"))
    # A process re-adds its group memberships this often (Redis restarted without them).
    realtime_rejoin_s: float = knob(30.0, "ARENA_REALTIME_REJOIN_S", lo=0.1, hi=3600.0)
    # A socket that shows a team's data (a battle, an evaluation, a judge's own) checks
    # this often that its session is still signed in and may still see it, and closes
    # when not; log-out and a membership removed make it check at once (docs/security.md).
    realtime_recheck_s: float = knob(60.0, "ARENA_REALTIME_RECHECK_S", lo=1.0, hi=3600.0)
    # --- execution -----------------------------------------------------------------
    # A running battle without a lane heartbeat for this long is failed by the janitor.
    stuck_after_s: int = knob(300, "ARENA_STUCK_AFTER_S", lo=10)
    # How often the janitor looks for battles whose worker process died on its host
    # (re-run once at once, not after the stuck bound).
    fault_check_s: int = knob(5, "ARENA_FAULT_CHECK_S", lo=1)
    battle_slots: int = knob(4, "ARENA_BATTLE_SLOTS", lo=1)  # C
    step_budget: int = knob(20, "ARENA_STEP_BUDGET", lo=1)
    wall_budget_s: int = knob(300, "ARENA_WALL_BUDGET_S", lo=1)
    shell_timeout_s: int = knob(20, "ARENA_SHELL_TIMEOUT_S", lo=1)
    shell_output_max_bytes: int = knob(64 * 1024, "ARENA_SHELL_OUTPUT_MAX_BYTES", lo=1024)
    sandbox_backend: str = knob("local", "ARENA_SANDBOX_BACKEND", choices=("local", "docker"))
    docker_image: str = knob("agent-arena-desktop", "ARENA_DOCKER_IMAGE")
    # A coding lane's image (scripts/docker.sh image --coding: the desktop image and the
    # toolchain); where the engine lacks it, the toolchain is bound from var/toolchain.
    docker_coding_image: str = knob("agent-arena-coding", "ARENA_DOCKER_CODING_IMAGE")
    # The engine shares no file system with the worker (docs/sandboxes.md, "Remote
    # engines"): no bind mount of a run dir, everything over the network contract.
    # Implied when DOCKER_HOST is a tcp:// or ssh:// URL.
    docker_remote: bool = knob(False, "ARENA_DOCKER_REMOTE")
    # A desktop (Xvfb + Chromium) in every sandbox; off gives shell-only sandboxes.
    sandbox_desktop: bool = knob(True, "ARENA_SANDBOX_DESKTOP")
    # Pre-booted idle desktops a battle worker (battles.worker.PooledBattleWorker) keeps, each
    # ~1.3 GB and a slot; never reused after a run. 2: one battle's lanes. 0: off.
    sandbox_pool_size: int = knob(2, "ARENA_SANDBOX_POOL_SIZE", lo=0, hi=16)
    sandbox_root: Path = knob(DEFAULT_SANDBOX_ROOT, "ARENA_SANDBOX_ROOT")
    # Resolve sandbox egress destinations through the host's DNS. Off: only literal
    # addresses pass the policy and no DNS query leaves the host (the tests run so).
    egress_resolve: bool = knob(True, "ARENA_EGRESS_RESOLVE")
    # Serve the bundled demo web to sandboxes as http://demo.arena.test/ (port 80, plain
    # HTTP) from a server on the worker's loopback, through the egress proxy; nothing
    # else on loopback becomes reachable (docs/demo-web.md). Off: the name is refused
    # like any unresolvable one.
    demo_web: bool = knob(True, "ARENA_DEMO_WEB")
    # The demo board (docs/leaderboard.md "The demo board"): `manage.py seed_demo` builds
    # an arena of simulated votes between the built-ins, and the leaderboard shows it
    # until the public arena has ratings. Off by default; `make run` turns it on.
    demo_board: bool = knob(False, "ARENA_DEMO_BOARD")
    # Internal destinations the worker's own calls (remote-agent endpoints, provider
    # base URLs) may reach: comma-separated addresses, CIDR blocks or host names. Never
    # consulted for a sandbox's egress; metadata endpoints stay refused (docs/egress.md).
    internal_allowlist: str = knob("", "ARENA_INTERNAL_ALLOWLIST")
    sandbox_uid_base: int = knob(61000, "ARENA_SANDBOX_UID_BASE", lo=1000)
    # Sandboxes one host runs at once (one slot lease and uid each, warm desktops
    # included); below the display uids' offset (sandboxes.rundir.DISPLAY_UID_OFFSET).
    sandbox_slots: int = knob(64, "ARENA_SANDBOX_SLOTS", lo=1, hi=999)
    # This worker host's name in leases, battles and heartbeats (docs/deployment.md);
    # empty: the machine's host name. Hosts sharing one database need distinct ids.
    host_id: str = knob("", "ARENA_HOST_ID")
    # Battle workers beat their host's row this often; a host silent for
    # ARENA_HOST_DEAD_AFTER_S is taken for dead by any host's janitor, which re-queues
    # its running battles (docs/deployment.md). Above a lane's longest step without a
    # beat is not needed: the host beats from a thread of its own.
    host_heartbeat_s: float = knob(5.0, "ARENA_HOST_HEARTBEAT_S", lo=0.1, hi=600.0)
    host_dead_after_s: float = knob(60.0, "ARENA_HOST_DEAD_AFTER_S", lo=1.0, hi=86400.0)
    deliver_max_files: int = knob(10, lo=1)
    deliver_max_bytes: int = knob(5 * 1024**2, lo=1)
    # --- sandbox hardening (docs/sandboxes.md) -------------------------------------
    # The kernel's hard quota on a run's writable space (a root worker mounts a tmpfs
    # per sandbox; its pages count against the run's memory cgroup too): the agent's
    # /work, /tmp and home together, in bytes and in files; the display's (Chromium's
    # profile and cache, the framebuffer) in bytes, with the same file count.
    sandbox_disk_bytes: int = knob(512 * 1024**2, "ARENA_SANDBOX_DISK_BYTES",
                                   lo=16 * 1024**2, hi=16 * 1024**3)  # fmt: skip
    sandbox_disk_inodes: int = knob(65_536, "ARENA_SANDBOX_DISK_INODES", lo=1024, hi=10**7)
    sandbox_display_disk_bytes: int = knob(256 * 1024**2, "ARENA_SANDBOX_DISPLAY_DISK_BYTES",
                                           lo=64 * 1024**2, hi=16 * 1024**3)  # fmt: skip
    # A step's screenshot PNG is at most this many bytes: a screen that does not fit is
    # re-encoded with fewer colours, then fewer pixels (the step says so).
    screenshot_max_bytes: int = knob(2 * 1024**2, "ARENA_SCREENSHOT_MAX_BYTES",
                                     lo=64 * 1024, hi=64 * 1024**2)  # fmt: skip
    # --- SPEC §5 judging -----------------------------------------------------------
    redundancy_fraction: float = knob(0.10, "ARENA_REDUNDANCY_FRACTION", lo=0.0, hi=1.0)
    redundancy_target: int = knob(3, lo=2)
    min_read_s: float = knob(5.0, "ARENA_MIN_READ_S", lo=0.0)  # MIN_READ_S
    read_words_per_s: float = knob(4.0, lo=0.1)
    trust_new: float = knob(0.5, lo=0.1, hi=1.0)  # ω of a new judge
    trust_min: float = knob(0.1, lo=0.0, hi=1.0)  # ω_min
    calibration_gamma: float = knob(0.25, "ARENA_CALIBRATION_GAMMA", lo=0.0, hi=1.0)  # γ_cal
    # A judge may undo a vote this long after casting it, before any name shows (and then
    # vote again); after it the vote stands. 0: votes are final at once.
    vote_undo_window_s: int = knob(10, "ARENA_VOTE_UNDO_WINDOW_S", lo=0, hi=600)
    # How long a battle stays open for judging: past it, it is decided with the votes it
    # has (the submitting team's alone, self-judged, when no independent one is
    # admissible) or excluded under rule 7 (JUDGING_TTL).
    judging_ttl_s: int = knob(86_400, "ARENA_JUDGING_TTL_S", lo=60)
    # Rule 7 early: this many × the target distinct judges abstained or voted too fast,
    # and no admissible vote exists.
    rule6_factor: int = knob(6, lo=1)
    # §5.4 probation: a judge's votes carry at most this ω and cannot decide against
    # established judges until PROBATION_VOTES of them were compared on redundancy
    # battles (or an operator ends the probation).
    probation_votes: int = knob(5, "ARENA_PROBATION_VOTES", lo=0)
    probation_trust_cap: float = knob(0.5, lo=0.1, hi=1.0)
    # Judge accounts need an operator's approval before they are served battles.
    judge_approval: bool = knob(False, "ARENA_JUDGE_APPROVAL")
    # Per-judge request limits (fixed one-minute windows in the shared cache): 429 above.
    vote_rate_per_min: int = knob(30, "ARENA_VOTE_RATE_PER_MIN", lo=1)
    judge_next_rate_per_min: int = knob(60, "ARENA_JUDGE_NEXT_RATE_PER_MIN", lo=1)
    # §5.4 calibration showcase: a new submitter's first battles pair a strong and a
    # weak rated agent, weighted γ_cal.
    calibration_tasks: int = knob(3, "ARENA_CALIBRATION_TASKS", lo=0)
    calibration_showcase: bool = knob(True, "ARENA_CALIBRATION_SHOWCASE")
    # --- SPEC §5.1 identity-leak scan (docs/leak-scan.md) ------------------------------
    # Read step screenshots and delivered images with OCR (Tesseract) before a battle
    # is judged; off, only text is scanned.
    leak_ocr: bool = knob(True, "ARENA_LEAK_OCR")
    # Tesseract's language data (eng.traineddata; Debian's tesseract-ocr-eng).
    leak_tessdata: Path = knob(DEFAULT_TESSDATA, "ARENA_LEAK_TESSDATA")
    # --- agents (providers): a call may take timeout × (1 + retries) plus backoff ----
    provider_timeout_s: float = knob(60.0, "ARENA_PROVIDER_TIMEOUT_S", lo=1.0)
    provider_max_retries: int = knob(2, "ARENA_PROVIDER_MAX_RETRIES", lo=0)
    # Offline evaluations (docs/evaluations.md): calls in flight at once per provider
    # endpoint within one evaluation job.
    eval_provider_concurrency: int = knob(4, "ARENA_EVAL_PROVIDER_CONCURRENCY", lo=1, hi=64)
    # An agent whose lanes fail through its own fault this many times in a row (its
    # provider, its endpoint, a protocol violation; never the sandbox or the other side)
    # is paused automatically with the reason (docs/operations.md "When an agent fails").
    agent_failure_pause: int = knob(3, "ARENA_AGENT_FAILURE_PAUSE", lo=1, hi=1000)
    # An MCP entrant's per-run server (agents/mcp_server.py): where it listens, and the
    # base URL the entrant is given (empty: http://<bind host>:<port>). Behind a proxy
    # that forwards to the worker, set both (docs/computer-use.md).
    mcp_bind_host: str = knob("127.0.0.1", "ARENA_MCP_BIND_HOST")
    mcp_public_base_url: str = knob("", "ARENA_MCP_PUBLIC_BASE_URL")
    # {"model id": [usd per million input tokens, usd per million output tokens]}
    model_prices: Mapping[str, tuple[float, float]] = knob({}, "ARENA_MODEL_PRICES")
    # --- SPEC §7 ratings -------------------------------------------------------------
    r0: float = knob(1000.0)  # R0
    k_max: float = knob(48.0, lo=0.0)  # K_max
    k_min: float = knob(12.0, lo=0.0)  # K_min
    n0: int = knob(30, lo=1)  # n0: provisional below
    ridge: float = knob(1e-3, lo=0.0)  # r
    refit_period_s: int = knob(60, "ARENA_REFIT_PERIOD_S", lo=1)  # Δ
    # Bootstrap replicates of each refit's rank bands (SPEC §7.3; tests set it low).
    bootstrap_replicates: int = knob(1000, "ARENA_BOOTSTRAP_REPLICATES", lo=0)
    # --- open data (docs/open-data.md) ------------------------------------------------
    # A battle is exported this many days after it was decided (or excluded), never before.
    export_delay_days: int = knob(7, "ARENA_EXPORT_DELAY_DAYS", lo=0, hi=3650)
    # GET /api/open-data/ and its downloads; off: they answer 403 open_data_disabled.
    export_api: bool = knob(True, "ARENA_EXPORT_API")
    # Downloads (a table or the archive) per client address per hour; 429 above.
    export_rate_per_hour: int = knob(10, "ARENA_EXPORT_RATE_PER_HOUR", lo=1, hi=100_000)
    # --- training environments (docs/environments.md) ---------------------------------
    # A run's initial state is kept this many days after the last run that started from it.
    snapshot_retention_days: int = knob(90, "ARENA_SNAPSHOT_RETENTION_DAYS", lo=1, hi=3650)
    # The licence the data card names (e.g. "CC BY 4.0"); empty: the card says none is set.
    export_licence: str = knob("", "ARENA_EXPORT_LICENCE")

    def __post_init__(self) -> None:
        for f in fields(self):
            _check(f, getattr(self, f.name))
        if self.k_min > self.k_max:
            raise ImproperlyConfigured(f"K_MIN ({self.k_min}) must not exceed K_MAX ({self.k_max})")
        if self.host_dead_after_s < 2 * self.host_heartbeat_s:
            raise ImproperlyConfigured(
                f"ARENA_HOST_DEAD_AFTER_S ({self.host_dead_after_s}) must be at least twice "
                f"ARENA_HOST_HEARTBEAT_S ({self.host_heartbeat_s}): one late beat must not "
                "make a live host look dead"
            )

    def replace(self, **changes: Any) -> "ArenaConfig":
        """A copy with ``changes``, validated like the original (tests, commands)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 data_dir: Path | None = None) -> "ArenaConfig":  # fmt: skip
        """The config from ``environ`` (default ``os.environ``): each field's variable
        when set and not empty, else its default. Relative defaults of paths are under
        ``data_dir``."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            variable = f.metadata[_ENV]
            raw = environ.get(variable, "") if variable else ""
            if raw.strip():
                values[f.name] = _parse(f, variable, raw)
            elif f.name == "sandbox_root" and data_dir is not None:
                values[f.name] = data_dir / "sandboxes"
        return cls(**values)


def _name(f: dataclasses.Field) -> str:
    return f.metadata[_ENV] or f"ARENA {f.name.upper()}"


def _parse(f: dataclasses.Field, variable: str, raw: str) -> Any:
    kind = f.type
    text = raw.strip()
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered in {"1", "true", "yes", "on"}:
                return True
            if lowered in {"0", "false", "no", "off"}:
                return False
            raise ValueError("not a boolean")
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is Path:
            return Path(text)
        if kind is str:
            return text
        return json.loads(text)
    except ValueError as exc:
        expected = {bool: "a boolean (true/false)", int: "an integer", float: "a number"}
        raise ImproperlyConfigured(
            f"{variable} must be {expected.get(kind, 'JSON')}, got {raw!r}"
        ) from exc


def _check(f: dataclasses.Field, value: Any) -> None:
    name = _name(f)
    kind = f.type
    if kind is bool:
        if not isinstance(value, bool):
            raise ImproperlyConfigured(f"{name} must be a boolean, got {value!r}")
        return
    if kind in (int, float):
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not numeric or (kind is int and not isinstance(value, int)):
            expected = "an integer" if kind is int else "a number"
            raise ImproperlyConfigured(f"{name} must be {expected}, got {value!r}")
        if not math.isfinite(value):
            raise ImproperlyConfigured(f"{name} must be finite, got {value!r}")
        lo, hi = f.metadata[_BOUNDS]
        if lo is not None and value < lo:
            raise ImproperlyConfigured(f"{name} must be >= {lo}, got {value}")
        if hi is not None and value > hi:
            raise ImproperlyConfigured(f"{name} must be <= {hi}, got {value}")
        return
    if kind is str:
        choices = f.metadata["choices"]
        if not isinstance(value, str) or (choices and value not in choices):
            allowed = f"one of {', '.join(choices)}" if choices else "a string"
            raise ImproperlyConfigured(f"{name} must be {allowed}, got {value!r}")
        if f.name == "internal_allowlist":
            _check_allowlist(name, value)
        return
    if kind is Path:
        if not isinstance(value, Path):
            raise ImproperlyConfigured(f"{name} must be a path, got {value!r}")
        return
    if f.name == "model_prices":
        _check_prices(name, value)


_HOST_NAME = re.compile(r"(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z][a-z0-9_-]*", re.ASCII)


def _check_allowlist(name: str, value: str) -> None:
    """Each entry an address, a CIDR block or a host name (sandboxes.netpolicy reads
    them; this only stops start-up on a typo, naming it)."""
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            ipaddress.ip_network(entry.removeprefix("[").removesuffix("]"), strict=False)
            continue
        except ValueError:
            pass
        if len(entry) > 253 or not _HOST_NAME.fullmatch(entry.lower().removesuffix(".")):
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not an address, a CIDR block or a host name"
            )


def _check_prices(name: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(f'{name} must be a JSON object {{"model": [in, out]}}')
    for model, price in value.items():
        ok = (
            isinstance(model, str)
            and isinstance(price, list | tuple)
            and len(price) == 2
            and all(isinstance(p, int | float) and not isinstance(p, bool) for p in price)
            and all(math.isfinite(p) and p >= 0 for p in price)
        )
        if not ok:
            raise ImproperlyConfigured(
                f"{name}: the price of {model!r} must be [usd per million input tokens, "
                f"usd per million output tokens], two numbers >= 0; got {price!r}"
            )
