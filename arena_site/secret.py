"""The arena's secret key: from ``ARENA_SECRET_KEY``, else from ``<data dir>/secret_key``,
which ``make setup`` and ``make run`` generate once and never overwrite. Standard library
only: ``scripts/setup.sh`` runs it before anything else (``python -m arena_site.secret``).

There is no built-in fallback key: a key published in the repository signs nothing."""

import contextlib
import hashlib
import hmac
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

ENV_NAME = "ARENA_SECRET_KEY"
FILE_NAME = "secret_key"
# Django's own rule (the security.W009 deploy check): at least 50 characters, at least 5
# distinct ones, and not one of startproject's throwaway keys.
MIN_LENGTH = 50
MIN_DISTINCT = 5
INSECURE_PREFIX = "django-insecure-"


class SecretKeyError(Exception):
    """No usable key; the message says what to do."""


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` is too weak to sign sessions, or None when it is fine."""
    if len(key) < MIN_LENGTH:
        return f"is {len(key)} characters long; it needs at least {MIN_LENGTH}"
    if len(set(key)) < MIN_DISTINCT:
        return f"has {len(set(key))} distinct characters; it needs at least {MIN_DISTINCT}"
    if key.startswith(INSECURE_PREFIX):
        return f"starts with {INSECURE_PREFIX!r} (a throwaway key from startproject)"
    return None


def secret_key_generate(data_dir: Path) -> Path:
    """``<data_dir>/secret_key`` with a fresh key, unless the file exists (it is never
    overwritten: sessions, password-reset links and signed values depend on it). The file
    is mode 0600 and appears whole or not at all (written aside, then hard-linked into
    place, which fails if another process got there first). Returns the file's path."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / FILE_NAME
    if path.exists():
        return path
    temporary = data_dir / f".{FILE_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(MIN_LENGTH) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        # another process may have generated it at the same moment: keep theirs
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def secret_key_load(data_dir: Path, environ: Mapping[str, str] | None = None) -> str:
    """The key: ``ARENA_SECRET_KEY`` when set, else the key file of ``data_dir``. Raises
    SecretKeyError, with what to do, when neither gives a strong enough key."""
    environ = os.environ if environ is None else environ
    key = environ.get(ENV_NAME, "").strip()
    if key:
        source = ENV_NAME
    else:
        path = data_dir / FILE_NAME
        try:
            key = path.read_text().strip()
        except FileNotFoundError:
            raise SecretKeyError(
                f"No secret key: {ENV_NAME} is not set and {path} does not exist. Set "
                f"{ENV_NAME} (e.g. to the output of `python -c 'import secrets; "
                f"print(secrets.token_urlsafe({MIN_LENGTH}))'`), or run `make setup` or "
                f"`make run`, which generate {path}."
            ) from None
        except OSError as exc:
            raise SecretKeyError(f"Cannot read the secret key file {path}: {exc}") from exc
        source = str(path)
    problem = secret_key_problem(key)
    if problem:
        raise SecretKeyError(
            f"The secret key from {source} {problem}. Use a random one, e.g. "
            f"`python -c 'import secrets; print(secrets.token_urlsafe({MIN_LENGTH}))'`."
        )
    return key


# --- the key-encryption key: teams' provider keys at rest (agents/keys.py) ----------------
# Fernet keys (32 random bytes, URL-safe base64): ARENA_KEY_ENCRYPTION_KEY, comma-separated
# (the first encrypts, every one decrypts: rotation), else <data dir>/key_encryption_key.

KEK_ENV_NAME = "ARENA_KEY_ENCRYPTION_KEY"
KEK_FILE_NAME = "key_encryption_key"


def key_encryption_key_generate(data_dir: Path) -> Path:
    """``<data_dir>/key_encryption_key`` with a fresh Fernet key, unless the file exists
    (never overwritten: the stored provider keys need it). Mode 0600, whole or not at
    all, like the secret key file. Returns the file's path."""
    import base64

    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / KEK_FILE_NAME
    if path.exists():
        return path
    temporary = data_dir / f".{KEK_FILE_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def key_encryption_keys_load(data_dir: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """The key-encryption keys, newest (the one that encrypts) first: from
    ``ARENA_KEY_ENCRYPTION_KEY`` when set, else the key file of ``data_dir`` (one key a
    line or comma-separated). Raises SecretKeyError, saying what to do, when neither
    gives one. Their form is checked where they are used (agents/keys.py)."""
    environ = os.environ if environ is None else environ
    raw = environ.get(KEK_ENV_NAME, "").strip()
    if not raw:
        path = data_dir / KEK_FILE_NAME
        try:
            raw = path.read_text().strip()
        except FileNotFoundError:
            raise SecretKeyError(
                f"No key-encryption key: {KEK_ENV_NAME} is not set and {path} does not "
                f"exist, so teams' provider keys can be neither stored nor used. Set "
                f"{KEK_ENV_NAME} (e.g. to the output of `python -c 'from "
                "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`), "
                f"or run `make setup`, which generates {path}."
            ) from None
        except OSError as exc:
            raise SecretKeyError(f"Cannot read the key-encryption key file {path}: {exc}") from exc
    return [key.strip() for key in raw.replace("\n", ",").split(",") if key.strip()]


def key_fingerprint(key: str) -> str:
    """A key-encryption key's fingerprint: what hosts compare to know they hold the same
    key (``sandboxes.fleet``), from which the key cannot be had back (an HMAC of a fixed
    text under the key, 16 hex digits)."""
    return hmac.new(key.encode(), b"arena key-encryption key", hashlib.sha256).hexdigest()[:16]


if __name__ == "__main__":
    # python -m arena_site.secret [DATA_DIR]: make sure the key file exists
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "var"
    created = not (target / FILE_NAME).exists()
    written = secret_key_generate(target)
    if created:
        print(f"setup: generated the secret key {written}")
    if not os.environ.get(KEK_ENV_NAME, "").strip() and not (target / KEK_FILE_NAME).exists():
        print(f"setup: generated the key-encryption key {key_encryption_key_generate(target)}")
