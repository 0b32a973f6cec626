from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and teams"

    def ready(self) -> None:
        from accounts import schema  # noqa: F401  (registers the OpenAPI auth extension)
