"""The run stamp: how a server of the worker's behind a simulated host (the model
gateway) learns which run is calling through the egress proxy (docs/egress.md).

On every request to a simulated host the proxy replaces whatever ``X-Arena-Run`` the
sandbox sent with ``<run id>.<hex HMAC-SHA256(stamp key, run id)>``. A sandbox cannot
claim another run's identity: it never sees the key, which lives only in the worker
process.
"""

import hashlib
import hmac
import re

STAMP_HEADER = "X-Arena-Run"
STAMP_KEY_BYTES = 32
_RUN_ID_RE = re.compile(r"-?(0|[1-9][0-9]{0,18})")


def run_stamp(key: bytes, run_id: int) -> str:
    """The ``X-Arena-Run`` value the proxy sends for ``run_id``."""
    digest = hmac.new(key, str(run_id).encode("ascii"), hashlib.sha256).hexdigest()
    return f"{run_id}.{digest}"


def verify_run_stamp(key: bytes, value: str | None) -> int | None:
    """The run id ``value`` (an ``X-Arena-Run`` header) was stamped for with ``key``, or
    None when it is missing, malformed or not made with ``key``."""
    if not value or len(value) > 100:
        return None
    run_text = value.partition(".")[0]
    if not _RUN_ID_RE.fullmatch(run_text):
        return None
    run_id = int(run_text)
    if not hmac.compare_digest(run_stamp(key, run_id).encode(), value.encode()):
        return None
    return run_id
