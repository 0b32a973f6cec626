"""Tenancy (Team, Membership), publication consent (ConsentTerms, Consent) and
per-user API tokens (stored as SHA-256 digests; the plain token is shown once)."""

import hashlib

from django.conf import settings
from django.db import models


class Team(models.Model):
    """The tenant. Tasks, attachments, tokens and team-entered agents belong to one."""

    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MEMBER = "member", "Member"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_unique_team_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ConsentTerms(models.Model):
    """A published version of the publication-consent text. The newest is current."""

    version = models.PositiveIntegerField(unique=True)
    text = models.TextField()
    published_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]
        verbose_name_plural = "consent terms"

    def __str__(self) -> str:
        return f"Consent terms v{self.version}"


class Consent(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="consents"
    )
    terms = models.ForeignKey(ConsentTerms, on_delete=models.PROTECT, related_name="consents")
    accepted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "terms"], name="consent_unique_user_terms")
        ]

    def __str__(self) -> str:
        return f"{self.user} accepted v{self.terms.version}"


class ApiToken(models.Model):
    """A bearer token for the API. Only the SHA-256 digest is stored."""

    PREFIX = "arena_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, default="default")
    # The first characters of the token, so a person can tell tokens apart.
    hint = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.hint}… ({self.user})"

    @staticmethod
    def digest_of(plain: str) -> str:
        return hashlib.sha256(plain.encode()).hexdigest()
