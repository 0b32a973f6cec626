"""A team's own provider key, encrypted at rest.

The key is sealed with Fernet (AES-128-CBC and HMAC-SHA256, from ``cryptography``)
under the arena's key-encryption key (``ARENA_KEY_ENCRYPTION_KEY``, else
``<data dir>/key_encryption_key``: arena_site/secret.py), and stored in
``Agent.provider_key_encrypted``. What is sealed is the key *and the agent's id*, so a
ciphertext copied onto another agent's row does not open there. The plain key exists
only in the worker that builds the agent's model client, which registers it for log
redaction (agents/providers/redaction.py); no API answer, admin page or span carries it.

Rotation: ``ARENA_KEY_ENCRYPTION_KEY`` may hold several keys, comma-separated. The first
encrypts, every one decrypts (``MultiFernet``), so an operator puts a new key first,
runs ``manage.py agent_keys_rotate`` (every stored key re-encrypted under the first),
then drops the old key.
"""

import json

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from arena_site.secret import KEK_ENV_NAME, SecretKeyError, key_encryption_keys_load

MAX_KEY_CHARS = 500  # no provider's key is longer; bounds what is sealed


class KeyEncryptionError(Exception):
    """The key-encryption key is missing or malformed, or a sealed key does not open
    (tampered with, copied from another agent, or sealed under a key no longer in
    ``ARENA_KEY_ENCRYPTION_KEY``). The message says which, never any key."""


def key_ring() -> MultiFernet:
    """The arena's key-encryption keys, read now (a restart is not needed to pick up a
    rotated file, and tests change the environment)."""
    try:
        raw = key_encryption_keys_load(settings.DATA_DIR)
    except SecretKeyError as exc:
        raise KeyEncryptionError(str(exc)) from None
    keys = []
    for position, value in enumerate(raw, start=1):
        try:
            keys.append(Fernet(value.encode()))
        except (ValueError, TypeError):
            raise KeyEncryptionError(
                f"{KEK_ENV_NAME}: key {position} of {len(raw)} is not a Fernet key (32 bytes, "
                "URL-safe base64, 44 characters); generate one with `python -c 'from "
                "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`."
            ) from None
    return MultiFernet(keys)


def provider_key_seal(*, agent_id: int, plain: str) -> bytes:
    """``plain`` (a provider key) sealed for the agent ``agent_id``."""
    payload = json.dumps({"agent": agent_id, "key": plain}).encode()
    return key_ring().encrypt(payload)


def provider_key_open(*, agent_id: int, sealed: bytes | memoryview) -> str:
    """The plain key sealed for ``agent_id``. Raises ``KeyEncryptionError``."""
    try:
        payload = json.loads(key_ring().decrypt(bytes(sealed)))
    except InvalidToken:
        raise KeyEncryptionError(
            "this agent's stored provider key cannot be decrypted: it was altered, or "
            f"sealed under a key that is no longer in {KEK_ENV_NAME}; the team must "
            "register its key again"
        ) from None
    if not isinstance(payload, dict) or payload.get("agent") != agent_id:
        raise KeyEncryptionError(
            "the stored provider key was sealed for another agent; it is not used"
        )
    return str(payload["key"])


def provider_key_reseal(sealed: bytes | memoryview) -> bytes:
    """``sealed`` re-encrypted under the first key of the ring (rotation)."""
    try:
        return key_ring().rotate(bytes(sealed))
    except InvalidToken:
        raise KeyEncryptionError(
            f"a stored provider key opens under none of the keys in {KEK_ENV_NAME}"
        ) from None
