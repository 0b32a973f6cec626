"""Judges' pseudonyms: a keyed hash (HMAC-SHA256) of the account id, so researchers can
group a judge's votes while nobody without the key can tell whose they are. Pure: no
Django. The key is derived from the arena's secret key (``pseudonym_key``), never the
secret itself, so an export's pseudonyms say nothing about the key that signs sessions."""

import hashlib
import hmac

# Changing it changes every pseudonym (as rotating the secret key does).
KEY_PURPOSE = b"agent-arena open data: judge pseudonyms v1"
PREFIX = "j_"
HEX_CHARS = 20  # 80 bits: no collision among any realistic number of judges


def pseudonym_key(secret: str) -> bytes:
    """The pseudonyms' own key, derived from ``secret`` (the arena's secret key)."""
    return hmac.new(secret.encode(), KEY_PURPOSE, hashlib.sha256).digest()


def key_id(key: bytes) -> str:
    """A fingerprint of the key (not reversible): two exports with the same key_id have
    the same pseudonyms, so their votes can be grouped together."""
    return hashlib.sha256(b"key id:" + key).hexdigest()[:12]


def judge_pseudonym(user_id: int, key: bytes) -> str:
    digest = hmac.new(key, f"judge:{user_id}".encode(), hashlib.sha256).hexdigest()
    return PREFIX + digest[:HEX_CHARS]
