"""Settings for Agent Arena. Every knob comes from the environment through the small
typed helpers below; a bad value fails loudly at start-up, not at first use."""

import json
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from arena_site.config import ArenaConfig

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


DEBUG = env_bool("ARENA_DEBUG", False)
SECRET_KEY = os.environ.get("ARENA_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and env_bool("ARENA_REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("ARENA_SECRET_KEY must be set in production")
    # Development default: `make run` and the tests work with no configuration.
    SECRET_KEY = "insecure-development-key-set-ARENA_SECRET_KEY-in-production"  # noqa: S105

ALLOWED_HOSTS = env_list("ARENA_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("ARENA_CSRF_TRUSTED_ORIGINS", [])

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
    "channels",
    "django_rq",
    "accounts",
    "agents",
    "sandboxes",
    "battles",
    "judging",
    "ratings",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
            ],
        },
    },
]

# PostgreSQL when DATABASE_URL is set; a SQLite file is the zero-setup fallback.
DATA_DIR = Path(env_str("ARENA_DATA_DIR", str(BASE_DIR / "var")))
DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL,
            conn_max_age=env_int("ARENA_DB_CONN_MAX_AGE", 60, minimum=0),
            conn_health_checks=True,
        )
    }
    # Server-side prepared statements after this many runs of a query (psycopg 3);
    # 0 turns them off, as a transaction-pooling PgBouncer needs.
    _prepare = env_int("ARENA_DB_PREPARE_THRESHOLD", 2, minimum=0)
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = _prepare or None
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "arena.sqlite3",
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
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
    }
}
RQ_QUEUES = {
    name: {"URL": REDIS_URL, "DEFAULT_TIMEOUT": timeout}
    for name, timeout in (("battles", 3600), ("judging", 300), ("ratings", 300), ("default", 300))
}
# Run jobs in-process only when explicitly asked (never in tests that claim a worker).
RQ_ASYNC = env_bool("ARENA_RQ_ASYNC", True)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "battles:submit"
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

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "arena_site.exceptions.api_exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Arena API",
    "DESCRIPTION": "Submit tasks, judge battles blind, read the leaderboard.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # Provider keys never reach a log line, whatever logs them.
    "filters": {"redact": {"()": "agents.providers.redaction.RedactingFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact"]}
    },
    "root": {"handlers": ["console"], "level": env_str("ARENA_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# The arena's own knobs (the method's constants among them): a typed, validated object
# (arena_site/config.py); a bad ARENA_* value stops start-up with its name.
ARENA = ArenaConfig.from_env(data_dir=DATA_DIR)
