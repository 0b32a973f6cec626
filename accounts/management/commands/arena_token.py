"""Creates an API token for a user and prints it once."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (shown once; stored as a digest)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", required=True, help="username the token acts for")
        parser.add_argument("--name", default="cli", help="a label to tell tokens apart")

    def handle(self, *args, user: str, name: str, **options) -> None:
        account = get_user_model().objects.filter(username=user).first()
        if account is None:
            raise CommandError(f"no user named {user!r}")
        _, plain = api_token_create(user=account, name=name)
        self.stdout.write(plain)
