"""Settings for Agent Arena. Every knob comes from the environment through the small
typed helpers below; a bad value fails loudly at start-up, not at first use."""

import json
import os
import re
from datetime import timedelta
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from arena_site.config import ArenaConfig
from arena_site.secret import SecretKeyError, secret_key_load

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_json(name: str, default: object) -> object:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be JSON: {exc}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str) -> tuple[IPv4Network | IPv6Network, ...]:
    """Comma-separated addresses or CIDR blocks (``10.0.0.0/8,::1``)."""
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ip_network(item, strict=False))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"{name} must be addresses or CIDR blocks separated by commas, got {item!r}"
            ) from exc
    return tuple(networks)


def env_header_value(name: str) -> tuple[str, str] | None:
    """``HEADER=value`` with the header in request.META form, e.g.
    ``HTTP_X_FORWARDED_PROTO=https``; unset is None."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    header, _, value = raw.partition("=")
    header, value = header.strip(), value.strip()
    if not re.fullmatch(r"HTTP_[A-Z0-9_]+", header) or not re.fullmatch(r"[A-Za-z0-9._-]+", value):
        raise ImproperlyConfigured(
            f"{name} must be HEADER=value with the header as Django's request.META names it, "
            f"e.g. HTTP_X_FORWARDED_PROTO=https; got {raw!r}"
        )
    return header, value


DEBUG = env_bool("ARENA_DEBUG", False)

ALLOWED_HOSTS = env_list("ARENA_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("ARENA_CSRF_TRUSTED_ORIGINS", [])

# HTTPS (docs/security.md): off by default so `make run` serves plain http://127.0.0.1;
# a production environment turns them on.
SECURE_SSL_REDIRECT = env_bool("ARENA_SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("ARENA_SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("ARENA_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("ARENA_SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("ARENA_SECURE_COOKIES", False)
# Only behind a proxy that sets this header itself (and strips it from clients).
SECURE_PROXY_SSL_HEADER = env_header_value("ARENA_SECURE_PROXY_SSL_HEADER")
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Every response: nothing but the arena's own files runs or loads (htmx runs without
# eval; computed bar widths are SVG attributes, not inline styles). 'self' covers the
# pages' websockets to the same host and port (CSP 3; tests/e2e/test_csp.py checks it).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
# The client address that per-address limits count (arena_site/ratelimit.py): the peer,
# or behind these proxies the nearest X-Forwarded-For hop that is not one of them.
TRUSTED_PROXIES = env_networks("ARENA_TRUSTED_PROXIES")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served from here (/api/docs/)
    "channels",
    "django_rq",
    "axes",
    "accounts",
    "agents",
    "sandboxes",
    "battles",
    "judging",
    "ratings",
    "evals",
    "exports",
    "environments",
]

MIDDLEWARE = [
    "arena_site.renderers.StrictJSONMiddleware",  # JSON bodies without NaN (strict_json)
    # first: /healthz, /readyz and /metrics/prometheus, answered before host checks,
    # HTTPS redirects, shedding and sessions apply (arena_site/ops.py)
    "arena_site.ops.OpsEndpointsMiddleware",
    # every line logged while a request is handled carries its id (X-Request-ID, echoed
    # in the response); after the probes, which stay as fast and quiet as they were
    "arena_site.logs.RequestIdMiddleware",
    # HTTP latency by route (arena_site/prometheus.py); before shedding, to count it too
    "arena_site.prometheus.RequestLatencyMiddleware",
    # a request beyond ARENA_MAX_INFLIGHT is answered 503 before anything else runs
    "arena_site.shedding.CapacityMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # last: turns a log-in lockout into the 429 page (accounts/throttling.py)
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "arena_site.urls"
ASGI_APPLICATION = "arena_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # what `make run` still prepares after its first page (a line on every page)
                "arena_site.preparing.preparing_context",
            ],
        },
    },
]

# PostgreSQL when DATABASE_URL is set; a SQLite file is the zero-setup fallback.
DATA_DIR = Path(env_str("ARENA_DATA_DIR", str(BASE_DIR / "var")))
# No built-in key: ARENA_SECRET_KEY, else <data dir>/secret_key (generated by `make setup`
# and `make run`), else start-up stops and says so (arena_site/secret.py).
try:
    SECRET_KEY = secret_key_load(DATA_DIR)
except SecretKeyError as exc:
    raise ImproperlyConfigured(str(exc)) from None
_INHERITED_POOLS: list = []


def _pools_left_to_the_parent() -> None:
    """In a forked child (RQ's work horse): the parent's pooled connections are its own
    (their sockets are shared; the pool's threads did not survive the fork), so the
    child opens a pool of its own. The inherited ones are kept referenced, never closed:
    closing would end the parent's sessions."""
    from django.db import connections
    from django.db.backends.postgresql.base import DatabaseWrapper

    _INHERITED_POOLS.extend(DatabaseWrapper._connection_pools.values())
    DatabaseWrapper._connection_pools.clear()
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None:  # checked out of the parent's pool
            _INHERITED_POOLS.append(conn.connection)
            conn.connection = None


# The arena's own knobs (the method's constants among them): a typed, validated object
# (arena_site/config.py); a bad ARENA_* value stops start-up with its name.
ARENA = ArenaConfig.from_env(data_dir=DATA_DIR)
DATABASE_URL = os.environ.get("DATABASE_URL", "")
# The SQLite fallback's options (a writer waits its turn instead of failing at once).
SQLITE_OPTIONS = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
if DATABASE_URL:
    try:
        _database = dj_database_url.parse(DATABASE_URL, conn_health_checks=True)
    except ValueError as exc:  # an unknown scheme, a malformed URL
        raise ImproperlyConfigured(
            f"DATABASE_URL is not a database URL Django knows: {exc}"
        ) from None
    _options = _database.setdefault("OPTIONS", {})
    _pooled = _database["ENGINE"] == "django.db.backends.postgresql" and ARENA.db_pool_max > 0
    # Without the pool each thread keeps its connection this long (web requests run on
    # the handler's threads, arena_site/handlers.py: keep it 0 there, or put PgBouncer
    # in front).
    _database["CONN_MAX_AGE"] = env_int("ARENA_DB_CONN_MAX_AGE", 0, minimum=0)
    if _pooled and _database["CONN_MAX_AGE"]:
        raise ImproperlyConfigured(
            "ARENA_DB_CONN_MAX_AGE must be 0 with the connection pool (ARENA_DB_POOL_MAX > 0):"
            " pooled connections go back to the pool after each request; set "
            "ARENA_DB_POOL_MAX=0 to keep per-thread connections instead"
        )
    if _database["ENGINE"] == "django.db.backends.postgresql":
        # Server-side prepared statements after this many runs of a query (psycopg 3);
        # 0 turns them off, as a transaction-pooling PgBouncer needs.
        _prepare = env_int("ARENA_DB_PREPARE_THRESHOLD", 2, minimum=0)
        _options["prepare_threshold"] = _prepare or None
        # A transaction-pooling PgBouncer cannot hold a named cursor across statements.
        _database["DISABLE_SERVER_SIDE_CURSORS"] = env_bool(
            "ARENA_DB_DISABLE_SERVER_SIDE_CURSORS", False
        )
    if _pooled and ARENA.max_inflight > ARENA.db_pool_max:
        raise ImproperlyConfigured(
            f"ARENA_MAX_INFLIGHT ({ARENA.max_inflight}) must not exceed ARENA_DB_POOL_MAX "
            f"({ARENA.db_pool_max}): a request admitted must find a database connection"
        )
    if _pooled:
        os.register_at_fork(after_in_child=lambda: _pools_left_to_the_parent())
        # psycopg's pool, one per process (docs/operations.md): at most max_size
        # connections; getting one waits at most `timeout`, then PoolTimeout, answered
        # 503 with Retry-After (arena_site/shedding.py).
        _options["pool"] = {
            "min_size": min(ARENA.db_pool_min, ARENA.db_pool_max),
            "max_size": ARENA.db_pool_max,
            "timeout": ARENA.db_pool_timeout_s,
            "name": "arena",
        }
    elif _database["ENGINE"] == "django.db.backends.sqlite3":
        for _key, _value in SQLITE_OPTIONS.items():
            _options.setdefault(_key, _value)
    DATABASES = {"default": _database}
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "arena.sqlite3",
            "OPTIONS": dict(SQLITE_OPTIONS),
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py's default 5 s socket timeout equals channels_redis' blocking pop
            # (BZPOPMIN 5 s): idle consumers would die with TimeoutError. Give reads room.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30, "socket_connect_timeout": 5}],
            "prefix": env_str("ARENA_CHANNEL_PREFIX", "arena"),
        },
    }
}
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env_str("ARENA_CACHE_PREFIX", "arena"),
        # one connection pool per process, not one per request thread
        "OPTIONS": {"pool_class": "arena_site.redis.SharedConnectionPool"},
    }
}
RQ_QUEUES = {
    name: {"URL": REDIS_URL, "DEFAULT_TIMEOUT": timeout}
    for name, timeout in (
        ("battles", 3600),
        ("judging", 300),
        ("ratings", 300),
        ("default", 300),
        ("exports", 300),  # the instructions' redaction ahead (arena_site/cron.py)
        ("evals", 86_400),  # an evaluation job runs a whole suite: hours for a big one
    )
}
# Run jobs in-process only when explicitly asked (never in tests that claim a worker).
RQ_ASYNC = env_bool("ARENA_RQ_ASYNC", True)
# Workers that outlive a Redis or PostgreSQL restart (arena_site/worker.py).
RQ = {"WORKER_CLASS": "arena_site.worker.ArenaWorker"}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    # ASVS 2.1.1: at least 12 characters (docs/security.md "Passwords")
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Log-in throttling (django-axes; accounts/throttling.py, docs/security.md): failed
# log-ins within the cool-off are counted per (username, client address) and per client
# address; a rule at its limit answers 429 with Retry-After until its failures age out.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out client
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_LOCKOUT_RULES = ((("username", "ip_address"), 5), (("ip_address",), 20))
AXES_LOCKOUT_PARAMETERS = [list(parameters) for parameters, _ in LOGIN_LOCKOUT_RULES]
AXES_FAILURE_LIMIT = LOGIN_LOCKOUT_RULES[0][1]
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_HANDLER = "accounts.throttling.LoginFailureHandler"
AXES_LOCKOUT_CALLABLE = "accounts.throttling.lockout_response"
AXES_CLIENT_IP_CALLABLE = "arena_site.ratelimit.client_address"
# A success must not wipe the per-address count (an attacker's own account would).
AXES_RESET_ON_SUCCESS = False
AXES_VERBOSE = False  # no start-up banner from every process
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "judging:landing"  # judges to /judge/, submitters to /submit/
LOGOUT_REDIRECT_URL = "ratings:leaderboard"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = True
# Private files (step screenshots, deliveries, attachments) live outside any web root
# and are served only through views that check access.
PRIVATE_MEDIA_ROOT = Path(env_str("ARENA_PRIVATE_MEDIA_ROOT", str(DATA_DIR / "private")))


def env_secret(name: str) -> str | None:
    """A secret from ``NAME``, else from the file ``NAME_FILE`` names (a mounted
    secret); None when neither is set. The value is never part of an error message."""
    value = os.environ.get(name, "").strip()
    if value:
        return value
    path = os.environ.get(f"{name}_FILE", "").strip()
    if not path:
        return None
    try:
        value = Path(path).read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}_FILE names {path!r}, which cannot be read") from exc
    if not value:
        raise ImproperlyConfigured(f"{name}_FILE names {path!r}, which is empty")
    return value


# Where those files are kept (arena_site/media.py, docs/media.md): under
# PRIVATE_MEDIA_ROOT, or, with a bucket named, in any S3-compatible store shared by every
# worker host and web replica. Access keys from the environment or a mounted file, else
# boto3's own chain (an instance role).
MEDIA_S3_BUCKET = env_str("ARENA_MEDIA_S3_BUCKET", "").strip()
# With S3: answer a permitted download with a redirect to a URL signed for this many
# seconds; 0 streams the file through the arena (checks and headers as on the local disk).
MEDIA_SIGNED_URL_S = env_int("ARENA_MEDIA_SIGNED_URL_S", 0, minimum=0)
if MEDIA_SIGNED_URL_S > 604_800:
    raise ImproperlyConfigured("ARENA_MEDIA_SIGNED_URL_S must be at most 604800 (7 days)")
MEDIA_S3_ADDRESSING_STYLE = env_str("ARENA_MEDIA_S3_ADDRESSING_STYLE", "path")
if MEDIA_S3_ADDRESSING_STYLE not in ("path", "virtual", "auto"):
    raise ImproperlyConfigured("ARENA_MEDIA_S3_ADDRESSING_STYLE must be path, virtual or auto")
if MEDIA_S3_BUCKET:
    _private_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": MEDIA_S3_BUCKET,
            "endpoint_url": env_str("ARENA_MEDIA_S3_ENDPOINT_URL", "").strip() or None,
            "region_name": env_str("ARENA_MEDIA_S3_REGION", "").strip() or None,
            "access_key": env_secret("ARENA_MEDIA_S3_ACCESS_KEY_ID"),
            "secret_key": env_secret("ARENA_MEDIA_S3_SECRET_ACCESS_KEY"),
            "location": env_str("ARENA_MEDIA_S3_PREFIX", "").strip("/"),
            "addressing_style": MEDIA_S3_ADDRESSING_STYLE,
            "signature_version": "s3v4",
            "file_overwrite": True,
            "default_acl": None,
            "querystring_auth": True,
            "querystring_expire": MEDIA_SIGNED_URL_S or 60,
        },
    }
else:
    _private_storage = {"BACKEND": "arena_site.media.PrivateFileSystemStorage"}
# /metrics/prometheus (arena_site/prometheus.py): with a token, served to requests that
# bear it (Authorization: Bearer); without, only to requests made on this machine.
METRICS_TOKEN = env_secret("ARENA_METRICS_TOKEN")
if METRICS_TOKEN is not None and len(METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("ARENA_METRICS_TOKEN must be at least 16 characters long")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "private": _private_storage,
}

# Request bodies: form fields and JSON bodies up to 2.5 MiB, 1000 fields (Django's
# defaults, stated: the admin's bulk actions post one field per row); few files (a task
# takes ATTACHMENTS_MAX_COUNT, the margin lets the service name a few too many itself).
# Attachments are bounded before parsing (battles/attachments.py); an upload over
# FILE_UPLOAD_MAX_MEMORY_SIZE spools to disk. Over a limit the API answers 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000
DATA_UPLOAD_MAX_NUMBER_FILES = 20
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Strict input, one output shape (arena_site/parsers.py, docs/api.md): JSON bodies
    # everywhere, multipart only where a view says so (task attachments); JSON answers.
    "DEFAULT_PARSER_CLASSES": ["arena_site.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["arena_site.renderers.StrictJSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "arena_site.parsers.FallbackNegotiation",
    "DEFAULT_SCHEMA_CLASS": "arena_site.schema.ArenaAutoSchema",
    "EXCEPTION_HANDLER": "arena_site.exceptions.api_exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_PAGINATION_CLASS": "arena_site.parsers.StrictLimitOffsetPagination",
    "PAGE_SIZE": 50,
    # Anonymous calls per client address (accounts/throttling.py); signed-in users are
    # not throttled here (the judge limits of judging/services.py stay as they are).
    "DEFAULT_THROTTLE_CLASSES": ["accounts.throttling.AnonymousAddressThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": "120/min"},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Arena API",
    "DESCRIPTION": "Submit tasks, judge battles blind, read the leaderboard.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The documentation page (/api/docs/): Swagger UI from drf-spectacular-sidecar; no
    # deep links, whose anchors would sit inside each operation's button (axe:
    # nested-interactive).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    # "status" means a battle's or a run's: one enum name each (arena_site/schema.py)
    "ENUM_NAME_OVERRIDES": {
        "BattleStatusEnum": "battles.models.Battle.Status",
        "RunStatusEnum": "battles.models.Run.Status",
        # an agent's kind; a team registers only some of them (agents/api.py)
        "AgentKindEnum": "agents.models.Agent.Kind",
        "TeamAgentKindEnum": "agents.registration.TEAM_KIND_CHOICES",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # One line per record, from every logger (structlog's stdlib integration,
    # arena_site/logs.py): a JSON object with the request, user, host and battle ids
    # (ARENA_LOG_FORMAT=json, the default), or text (plain, as `make run` shows it).
    "formatters": {"arena": {"()": "arena_site.logs.formatter", "log_format": ARENA.log_format}},
    # Provider keys never reach a log line, whatever logs them (the formatter redacts
    # the formatted traceback and every context value too).
    "filters": {"redact": {"()": "arena_site.logs.RedactingFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "arena", "filters": ["redact"]}
    },
    "root": {"handlers": ["console"], "level": env_str("ARENA_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
