"""``manage.py media_bucket [--create]``: checks that the media bucket answers (the
app image's ``arena migrate`` runs it after the migrations, deploy/compose.yaml), waiting
up to ``--wait`` seconds for a store that is still starting; ``--create`` makes the
bucket when it does not exist. Then it writes, reads and deletes one object under the
arena's prefix, so a key without write access is found at deploy time, not at the first
battle. Nothing to do when media live in a directory (no ``ARENA_MEDIA_S3_BUCKET``)."""

import time
import uuid

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.management.base import BaseCommand, CommandError

from arena_site.media import private_storage


class Command(BaseCommand):
    help = "Check (and with --create make) the S3 bucket the media go to."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--create", action="store_true", help="Make the bucket if missing.")
        parser.add_argument("--wait", type=float, default=60.0, help="Seconds to wait (60).")

    def handle(self, *args, create: bool, wait: float, **options) -> None:
        bucket = settings.MEDIA_S3_BUCKET
        if not bucket:
            self.stdout.write("media are files under ARENA_PRIVATE_MEDIA_ROOT: no bucket")
            return
        storage = private_storage()
        client = storage.connection.meta.client
        deadline = time.monotonic() + wait
        while True:
            try:
                self._ensure(client, bucket, create)
                probe = f"arena-probe-{uuid.uuid4().hex}"
                storage.save(probe, ContentFile(b"ok"))
                with storage.open(probe) as handle:
                    ok = handle.read() == b"ok"
                storage.delete(probe)
                if not ok:
                    raise CommandError(f"bucket {bucket}: an object read back differs")
                break
            except (BotoCoreError, ClientError, OSError) as exc:
                code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
                # (a HEAD's refusal has no body: its code is the status)
                if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                    raise CommandError(f"bucket {bucket}: {code} (check the media keys)") from None
                if time.monotonic() > deadline:
                    message = f"bucket {bucket} did not answer in {wait:.0f} s: {exc}"
                    raise CommandError(message) from None
                time.sleep(1)
        self.stdout.write(f"bucket {bucket}: reachable, writable")

    def _ensure(self, client, bucket: str, create: bool) -> None:
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                raise
            if not create:
                raise CommandError(f"bucket {bucket} does not exist (--create makes it)") from None
            client.create_bucket(Bucket=bucket)
            self.stdout.write(f"bucket {bucket}: created")
