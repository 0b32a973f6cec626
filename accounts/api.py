"""The teams API: a user's teams, a team's invite links (its owners create, list and
revoke them), joining a team through one, and its members (its owners remove them,
anyone leaves). Invites are scoped through
``TenantScopedApiMixin``: another team's invites are a 404, exactly like missing ones;
a member who is not an owner gets 403 ``not_team_owner``."""

from django.contrib.auth import get_user_model
from django.db.models import OuterRef, QuerySet, Subquery
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Membership, Team, TeamInvite
from accounts.selectors import consent_is_current, user_team
from accounts.services import (
    team_invite_accept,
    team_invite_create,
    team_invite_revoke,
    team_member_remove,
    team_owner_check,
)
from accounts.tenancy import TenantScopedApiMixin
from arena_site.exceptions import ApplicationError
from arena_site.schema import StrictCharField, error_response


class TeamOutput(serializers.ModelSerializer):
    role = serializers.ChoiceField(
        source="my_role",
        choices=Membership.Role.choices,
        read_only=True,
        help_text="Your role in the team: owner (invites people, registers agents) or member.",
    )

    class Meta:
        model = Team
        fields = ["id", "name", "role", "created_at"]


class InviteOutput(serializers.ModelSerializer):
    state = serializers.SerializerMethodField(
        help_text="active (admits people), revoked, used (no use left) or expired."
    )
    created_by = serializers.SerializerMethodField(help_text="The owner who created it.")

    class Meta:
        model = TeamInvite
        fields = [
            "id", "hint", "state", "max_uses", "uses", "expires_at", "created_at",
            "revoked_at", "created_by",
        ]  # fmt: skip

    def get_state(self, invite: TeamInvite) -> str:
        return invite.state(timezone.now())

    def get_created_by(self, invite: TeamInvite) -> str | None:
        return invite.created_by.username if invite.created_by else None


class InviteCreatedOutput(InviteOutput):
    token = serializers.CharField(help_text="The invite's token: shown once, stored as a digest.")
    url = serializers.CharField(help_text="The link to send: it opens the join page.")

    class Meta(InviteOutput.Meta):
        fields = [*InviteOutput.Meta.fields, "token", "url"]


class InviteCreateInput(serializers.Serializer):
    max_uses = serializers.IntegerField(
        required=False,
        default=1,
        min_value=1,
        max_value=TeamInvite.MAX_USES,
        help_text="How many people may join through the link (default 1).",
    )
    days = serializers.IntegerField(
        required=False,
        default=TeamInvite.DEFAULT_DAYS,
        min_value=1,
        max_value=TeamInvite.MAX_DAYS,
        help_text=f"How long the link is valid (default {TeamInvite.DEFAULT_DAYS}).",
    )


class InviteAcceptInput(serializers.Serializer):
    token = StrictCharField(
        max_length=100, help_text="The token of an invite link (the link's last part)."
    )


class MembershipOutput(serializers.Serializer):
    team = serializers.IntegerField(help_text="The team's id.")
    team_name = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices)


NOT_OWNER = error_response(
    403, "not_team_owner: you are a member of the team but not one of its owners."
)


@extend_schema_view(
    get=extend_schema(description="The teams you belong to, with your role in each.")
)
class TeamListApi(TenantScopedApiMixin, generics.ListAPIView):
    serializer_class = TeamOutput
    pagination_class = None

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        role = Membership.objects.filter(team=OuterRef("pk"), user=self.request.user)
        return (
            Team.objects.filter(pk__in=team_ids)
            .annotate(my_role=Subquery(role.values("role")[:1]))
            .order_by("pk")
        )


class _PathTeam(TenantScopedApiMixin):
    """The path's ``team``, if the request's user is one of its members (else 404, as
    for a team that does not exist)."""

    def path_team(self) -> Team:
        team = user_team(self.request.user, self.kwargs["team"])
        if team is None:
            raise NotFound("Not found.")
        return team


class _TeamInvites(_PathTeam):
    """Invites of the path's team, if the request's user is one of its members; the
    owner check comes on top (403 for a member who is not an owner)."""

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return TeamInvite.objects.filter(
            team_id__in=team_ids, team_id=self.kwargs["team"]
        ).select_related("created_by", "team")


class TeamInviteListCreateApi(_TeamInvites, generics.ListAPIView):
    serializer_class = InviteOutput

    def list(self, request, *args, **kwargs):
        team = self.path_team()
        team_owner_check(user=request.user, team=team, doing="see its invites")
        return super().list(request, *args, **kwargs)

    @extend_schema(
        operation_id="teams_invites_list",
        responses={200: InviteOutput(many=True), 403: NOT_OWNER},
        description="The team's invite links, newest first (owners only). The tokens "
        "themselves are never shown again; hint tells them apart.",
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="teams_invites_create",
        request=InviteCreateInput,
        responses={201: InviteCreatedOutput, 403: NOT_OWNER},
        description="Creates an invite link (owners only): up to max_uses signed-in "
        "people who open it within days join the team as members, after accepting the "
        "current consent terms. The token and the link are in this answer only.",
    )
    def post(self, request, *args, **kwargs):
        team = self.path_team()
        data = InviteCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        invite, plain = team_invite_create(
            team=team,
            actor=request.user,
            max_uses=data.validated_data["max_uses"],
            days=data.validated_data["days"],
        )
        body = InviteOutput(invite).data
        body["token"] = plain
        body["url"] = request.build_absolute_uri(reverse("accounts:invite", args=[plain]))
        return Response(body, status=status.HTTP_201_CREATED)


class TeamInviteDetailApi(_TeamInvites, APIView):
    @extend_schema(
        operation_id="teams_invites_revoke",
        responses={204: None, 403: NOT_OWNER},
        description="Revokes the invite link at once (owners only; revoking a revoked "
        "one is a no-op). People who joined through it stay members.",
    )
    def delete(self, request, team: int, pk: int):
        team_row = self.path_team()
        team_owner_check(user=request.user, team=team_row, doing="revoke invites")
        team_invite_revoke(invite=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InviteAcceptApi(APIView):
    """Not tenant-scoped: the user is not a member of the team yet; the token is the
    authority (accounts.tenancy.UNSCOPED_API_VIEWS)."""

    @extend_schema(
        operation_id="invites_accept",
        request=InviteAcceptInput,
        responses={
            201: MembershipOutput,
            403: error_response(403, "consent_required: accept the current terms first."),
            404: error_response(404, "invite_not_found: the token names no invite."),
            409: error_response(409, "already_member: you are in the team already."),
            410: error_response(
                410, "invite_expired, invite_revoked or invite_used: ask the team's "
                "owner for a new link."
            ),
        },
        description="Join the invite's team as a member (one use of the link).",
    )  # fmt: skip
    def post(self, request):
        data = InviteAcceptInput(data=request.data)
        data.is_valid(raise_exception=True)
        if not consent_is_current(request.user):
            raise ApplicationError(
                "Accept the current publication consent terms first.",
                code="consent_required",
                status=403,
                extra={"consent_url": reverse("accounts:consent")},
            )
        membership = team_invite_accept(plain=data.validated_data["token"], user=request.user)
        body = {
            "team": membership.team_id,
            "team_name": membership.team.name,
            "role": membership.role,
        }
        return Response(body, status=status.HTTP_201_CREATED)


class MemberOutput(serializers.Serializer):
    user = serializers.IntegerField(source="pk", help_text="The member's user id.")
    username = serializers.CharField()
    role = serializers.ChoiceField(source="team_role", choices=Membership.Role.choices)
    joined_at = serializers.DateTimeField(help_text="When they joined the team.")


class _TeamMembers(_PathTeam):
    """The path's team's members (users), if the request's user is one of them; the
    path's ``user`` names the member."""

    lookup_url_kwarg = "user"

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        team = self.kwargs["team"]
        row = Membership.objects.filter(team_id=team, user=OuterRef("pk"))
        return (
            get_user_model()
            .objects.filter(memberships__team_id=team, memberships__team_id__in=team_ids)
            .annotate(
                team_role=Subquery(row.values("role")[:1]),
                joined_at=Subquery(row.values("created_at")[:1]),
            )
            .order_by("joined_at", "pk")
        )


@extend_schema_view(
    get=extend_schema(
        operation_id="teams_members_list",
        description="The team's members with their roles, first to join first (any member).",
    )
)
class TeamMemberListApi(_TeamMembers, generics.ListAPIView):
    serializer_class = MemberOutput
    pagination_class = None

    def list(self, request, *args, **kwargs):
        self.path_team()  # a team you are not in: 404, not an empty list
        return super().list(request, *args, **kwargs)


class TeamMemberDetailApi(_TeamMembers, APIView):
    @extend_schema(
        operation_id="teams_members_remove",
        responses={
            204: None,
            403: NOT_OWNER,
            409: error_response(409, "last_owner: a team keeps at least one owner."),
        },
        description="Removes a member from the team (owners), or leaves it (your own user "
        "id, anyone). The last owner cannot leave. Their open live pages of the team's "
        "battles close at once.",
    )
    def delete(self, request, team: int, user: int):
        team_row = self.path_team()
        team_member_remove(team=team_row, member=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
