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


class TeamInvite(models.Model):
    """A link that lets signed-in people join a team as members. Only the SHA-256
    digest of its token is stored (the link is shown once, like an API token). It
    admits ``max_uses`` people (1 by default) until ``expires_at``, unless an owner
    revokes it first; ``uses`` only grows, by a conditional UPDATE (two people
    opening the last use at once: one joins)."""

    PREFIX = "invite_"
    DEFAULT_DAYS = 7
    MAX_DAYS = 30
    MAX_USES = 50

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invites")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The first characters of the token, so an owner can tell links apart.
    hint = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    max_uses = models.PositiveSmallIntegerField(default=1)
    uses = models.PositiveSmallIntegerField(default=0)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(max_uses__gte=1), name="team_invite_max_uses_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(uses__lte=models.F("max_uses")),
                name="team_invite_uses_within_max",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.hint}… ({self.team})"

    digest_of = staticmethod(ApiToken.digest_of)

    def state(self, now) -> str:
        """One of "active", "revoked", "used", "expired" (checked in that order)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.uses >= self.max_uses:
            return "used"
        if now >= self.expires_at:
            return "expired"
        return "active"
