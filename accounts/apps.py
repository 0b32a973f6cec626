from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and teams"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from accounts import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from accounts.services import user_logged_out_sockets

        # Log-out (the site's or the admin's) closes the sockets of that session.
        user_logged_out.connect(user_logged_out_sockets, dispatch_uid="accounts-logout-sockets")
