"""The S3 server fixtures of the shared-media tests (tests/s3_server.py): started only
by a test that asks for them."""

from tests.s3_server import s3_media, s3_server  # noqa: F401
