"""What the worker hosts of one arena must agree on, checked at each battle worker's
start (docs/deployment.md, "A fleet that checks itself"): one row (``FleetSettings``)
that the first host writes and every host reads.

- The heartbeat and dead-after times: a host whose own ``ARENA_HOST_HEARTBEAT_S`` or
  ``ARENA_HOST_DEAD_AFTER_S`` differs is refused, and every janitor's "dead" is the
  row's (``sandboxes.selectors.hosts_silent``), whatever its environment says. Before,
  a janitor with a shorter dead-after than another host's beat took that live host for
  dead, and both attempts of its battle ran at once.
- The key-encryption key ring (by fingerprint, ``arena_site.secret.key_fingerprint``):
  a host must open what the fleet seals (the fleet's first key in its ring) and seal
  what the fleet opens (its first key in the fleet's ring). A host with a key of its
  own would fail to open teams' provider keys and charge the failures to their agents.
"""

from django.conf import settings
from django.db import transaction

from arena_site.hosts import host_id
from arena_site.secret import SecretKeyError, key_encryption_keys_load, key_fingerprint
from sandboxes.models import FleetSettings


class FleetMismatch(RuntimeError):
    """This host's settings are not the fleet's; the message says which and what to do."""


def kek_fingerprints_here() -> list[str]:
    """This host's key-encryption keys' fingerprints, the sealing one first ([] when it
    has none: then it can open no team's key, which its own checks say)."""
    try:
        keys = key_encryption_keys_load(settings.DATA_DIR)
    except SecretKeyError:
        return []
    return [key_fingerprint(key) for key in keys]


def fleet_join() -> FleetSettings:
    """Checks this host against the fleet's row (written now, from this host's settings,
    when there is none). Raises :class:`FleetMismatch`; changes nothing then."""
    arena = settings.ARENA
    ring = kek_fingerprints_here()
    mine = {"heartbeat_s": arena.host_heartbeat_s, "dead_after_s": arena.host_dead_after_s}
    with transaction.atomic():
        row, created = FleetSettings.objects.select_for_update().get_or_create(
            pk=1, defaults={**mine, "kek_fingerprints": ring, "set_by": host_id()}
        )
        if created:
            return row
        problems = []
        if (row.heartbeat_s, row.dead_after_s) != (mine["heartbeat_s"], mine["dead_after_s"]):
            problems.append(
                f"ARENA_HOST_HEARTBEAT_S and ARENA_HOST_DEAD_AFTER_S are {mine['heartbeat_s']:g} s "
                f"and {mine['dead_after_s']:g} s here, the fleet's {row.heartbeat_s:g} s and "
                f"{row.dead_after_s:g} s (set by {row.set_by or 'an operator'}): give every "
                "host the fleet's, or change the fleet's in the admin (Fleet settings)"
            )
        fleet = list(row.kek_fingerprints or [])
        if ring and fleet and not (ring[0] in fleet and fleet[0] in ring):
            problems.append(
                f"the key-encryption key here (ARENA_KEY_ENCRYPTION_KEY, fingerprint "
                f"{ring[0]}) is not the fleet's (fingerprint {fleet[0]}): every host must "
                "hold the fleet's key ring, or teams' provider keys fail to open on this "
                "host and their agents are charged for it (docs/security.md, rotating keys)"
            )
        if problems:
            raise FleetMismatch("; ".join(problems))
        if ring and not fleet:
            FleetSettings.objects.filter(pk=row.pk).update(kek_fingerprints=ring)
    return row


def fleet_ring_set(ring: list[str]) -> None:
    """Makes ``ring`` (fingerprints, the sealing key first) the fleet's: after every
    stored key was sealed again under its first key (``agent_keys_rotate``)."""
    arena = settings.ARENA
    FleetSettings.objects.update_or_create(
        pk=1,
        defaults={"kek_fingerprints": ring},
        create_defaults={
            "heartbeat_s": arena.host_heartbeat_s,
            "dead_after_s": arena.host_dead_after_s,
            "kek_fingerprints": ring,
            "set_by": host_id(),
        },
    )
