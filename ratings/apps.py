from django.apps import AppConfig


class RatingsConfig(AppConfig):
    name = "ratings"
    verbose_name = "Ratings"

    def ready(self) -> None:
        # connects the roster signals that move the precomputed board's version
        from ratings import services  # noqa: F401
