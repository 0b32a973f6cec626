"""Re-encrypts the teams' stored provider keys under the first key of
ARENA_KEY_ENCRYPTION_KEY (docs/security.md "Teams' provider keys at rest")."""

from django.core.management.base import BaseCommand, CommandError

from agents.keys import KeyEncryptionError, key_ring
from agents.registration import provider_keys_reseal
from sandboxes.fleet import fleet_ring_set, kek_fingerprints_here


class Command(BaseCommand):
    help = (
        "Re-encrypt every team's stored provider key under the first key of "
        "ARENA_KEY_ENCRYPTION_KEY (put the new key first, run this, then drop the old one)."
    )

    def handle(self, *args, **options) -> None:
        try:
            key_ring()
        except KeyEncryptionError as exc:
            raise CommandError(str(exc)) from None
        done, unreadable = provider_keys_reseal()
        self.stdout.write(f"re-encrypted {done} provider key(s) under the first key")
        # The fleet's ring is now this one: hosts must hold its first key to start
        ring = kek_fingerprints_here()
        fleet_ring_set(ring)
        self.stdout.write(f"the fleet's key ring is now {', '.join(ring)} (fingerprints)")
        if unreadable:
            raise CommandError(
                f"{len(unreadable)} key(s) open under none of the keys (agents "
                f"{', '.join(map(str, unreadable))}): keep the old key until their teams "
                "register their keys again"
            )
