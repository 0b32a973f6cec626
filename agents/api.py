"""The team's agents API: a team owner registers the team's agents (remote, or a
scaffold with the team's own provider key), changes them (PATCH: edit, rotate the
secret, replace the key, pause, resume) and withdraws them (DELETE); the team reads
them back (approval state and note, pause reason) and runs their entry check. Tenant-scoped
(``accounts.tenancy``): another team's agents are a 404, exactly like missing ones.
No answer ever carries a provider key or, after the registering call, a remote secret."""

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import user_primary_team, user_team
from accounts.tenancy import TenantScopedApiMixin
from agents.entry_changes import (
    NOT_EDITABLE,
    PAUSE_REASON_MAX,
    agent_edit,
    agent_pause,
    agent_resume,
    agent_withdraw,
)
from agents.keys import MAX_KEY_CHARS
from agents.models import Agent
from agents.providers.registry import PROVIDERS
from agents.registration import (
    FORBIDDEN_PARAMS,
    NAME_MAX,
    PROMPT_MAX,
    SLUG_MAX,
    TEAM_KIND_CHOICES,
    agent_entry_check_asked,
    agent_register,
)
from arena_site.exceptions import ApplicationError
from arena_site.schema import StrictCharField, error_response


class AgentRegisterInput(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=TEAM_KIND_CHOICES,
        help_text="remote: your own server speaks the agent protocol (/api/agent-protocol/); "
        "scaffold: the arena runs a model of a provider with your team's key.",
    )
    display_name = StrictCharField(max_length=NAME_MAX, help_text="The name on the leaderboard.")
    slug = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=SLUG_MAX,
        help_text="A short unique name (letters, digits, hyphens); derived from "
        "display_name when omitted. 409 slug_taken when another agent has it.",
    )
    team = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=2**63 - 1,
        help_text="The team entering it (you must own it); default: the team you act for.",
    )
    endpoint = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="remote: the http(s) URL the arena POSTs each observation to; it must "
        "pass the address policy (no internal address).",
    )
    provider = serializers.ChoiceField(
        choices=list(PROVIDERS), required=False, allow_blank=True, help_text="scaffold only."
    )
    model_id = StrictCharField(
        required=False, allow_blank=True, max_length=200, help_text="scaffold: the model's name."
    )
    provider_key = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=MAX_KEY_CHARS,
        write_only=True,
        help_text="scaffold: your team's own key for the provider (required for anthropic "
        "and openai). Encrypted at rest, used only to call the provider, never shown again.",
    )
    system_prompt = StrictCharField(
        required=False, allow_blank=True, max_length=PROMPT_MAX, trim_whitespace=False
    )
    params = serializers.DictField(
        required=False,
        help_text="scaffold: provider parameters (max_tokens, temperature, top_p, base_url, "
        "timeout_s, max_retries, keep_screenshots); remote: timeout_s. Not accepted: "
        + ", ".join(FORBIDDEN_PARAMS)
        + ".",
    )


class AgentOutput(serializers.ModelSerializer):
    team = serializers.IntegerField(source="team_id", help_text="The entering team's id.")
    endpoint = serializers.SerializerMethodField(help_text="remote: the endpoint; else empty.")
    params = serializers.SerializerMethodField(help_text="The agent's parameters (no secrets).")
    has_provider_key = serializers.SerializerMethodField(
        help_text="Whether the team's own provider key is stored (it is never shown)."
    )
    approval = serializers.ChoiceField(
        choices=Agent.Approval.choices,
        help_text="pending until an admin approves it; only approved agents are drawn.",
    )
    approval_note = serializers.CharField(help_text="The admin's note (why it was rejected).")

    class Meta:
        model = Agent
        fields = [
            "id", "slug", "display_name", "kind", "team", "provider", "model_id", "endpoint",
            "params", "has_provider_key", "approval", "approval_note", "approved_at",
            "is_paused", "paused_reason", "retired_at", "created_at",
        ]  # fmt: skip

    def get_endpoint(self, agent: Agent) -> str:
        params = agent.params if isinstance(agent.params, dict) else {}
        return str(params.get("endpoint", "")) if agent.kind == Agent.Kind.REMOTE else ""

    def get_params(self, agent: Agent) -> dict:
        params = agent.params if isinstance(agent.params, dict) else {}
        return {k: v for k, v in params.items() if k not in ("endpoint", "api_key")}

    def get_has_provider_key(self, agent: Agent) -> bool:
        return bool(agent.provider_key_encrypted)


class AgentRegisteredOutput(AgentOutput):
    remote_secret = serializers.CharField(
        allow_null=True,
        help_text="remote: the HMAC secret the arena signs every request with; shown in "
        "this answer only. null for a scaffold agent.",
    )

    class Meta(AgentOutput.Meta):
        fields = [*AgentOutput.Meta.fields, "remote_secret"]


class EntryCheckOutput(serializers.Serializer):
    ok = serializers.BooleanField(help_text="Nothing stops the agent from making a move.")
    problems = serializers.DictField(
        child=serializers.CharField(), help_text="{field: what to fix}; empty when ok."
    )


class _TeamAgents(TenantScopedApiMixin):
    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:
        return Agent.objects.filter(team_id__in=team_ids).order_by("-created_at", "-pk")


@extend_schema_view(
    get=extend_schema(
        operation_id="agents_list",
        description="Your teams' agents, newest first, with their approval state; "
        "?kind= narrows them to one kind (builtin, scaffold, remote, cli, human).",
        parameters=[
            OpenApiParameter(
                "kind",
                enum=list(Agent.Kind.values),
                required=False,
                description="Only agents of this kind (400 invalid_kind for another).",
            )
        ],
    )
)
class AgentListCreateApi(_TeamAgents, generics.ListAPIView):
    serializer_class = AgentOutput

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        kind = self.request.query_params.get("kind")
        if kind is None or kind == "":
            return queryset
        if kind not in Agent.Kind.values:
            raise ApplicationError(
                f"kind {kind[:40]!r} is unknown; it is one of {', '.join(Agent.Kind.values)}.",
                code="invalid_kind",
            )
        return queryset.filter(kind=kind)

    @extend_schema(
        operation_id="agents_register",
        request=AgentRegisterInput,
        responses={
            201: AgentRegisteredOutput,
            400: error_response(
                400, "invalid (a field), invalid_kind, forbidden_param, key_missing, "
                "invalid_key, or entry_refused (problems names each field to fix: unknown "
                "provider, an endpoint or base URL the address policy refuses, ...)."
            ),
            403: error_response(403, "not_team_owner: only a team's owners register agents."),
            409: error_response(409, "slug_taken: choose another slug."),
            503: error_response(
                503, "key_storage_unavailable: the arena has no key-encryption key "
                "configured; tell its operator."
            ),
        },
        description="Registers an agent of your team (owners only). It waits for an "
        "admin's approval (approval: pending) before it is drawn into battles. A remote "
        "agent's remote_secret is in this answer only: configure your endpoint with it, "
        "then POST /api/agents/{id}/check/ (the health call). A scaffold agent's "
        "provider_key is encrypted at rest and never returned.",
    )  # fmt: skip
    def post(self, request):
        data = AgentRegisterInput(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        team_id = fields.pop("team", None)
        team = user_team(request.user, team_id) if team_id else user_primary_team(request.user)
        if team is None:
            raise ApplicationError(
                "team: not one of your teams." if team_id else "You belong to no team.",
                code="invalid" if team_id else "no_team",
                status=400 if team_id else 403,
            )
        agent, secret = agent_register(team=team, actor=request.user, **fields)
        body = AgentOutput(agent).data
        body["remote_secret"] = secret
        return Response(body, status=status.HTTP_201_CREATED)


class AgentEditInput(serializers.Serializer):
    display_name = StrictCharField(
        required=False, max_length=NAME_MAX, help_text="The name on the leaderboard."
    )
    endpoint = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="remote: a corrected or moved endpoint; it must pass the address policy. "
        "Then POST /api/agents/{id}/check/.",
    )
    provider = serializers.ChoiceField(
        choices=list(PROVIDERS),
        required=False,
        help_text="scaffold only. Another provider needs its own provider_key (if keyed).",
    )
    model_id = StrictCharField(required=False, max_length=200, help_text="scaffold only.")
    provider_key = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=MAX_KEY_CHARS,
        write_only=True,
        help_text="scaffold: a new key replaces the stored one (sealed, never shown); "
        "blank or omitted keeps it.",
    )
    system_prompt = StrictCharField(
        required=False, allow_blank=True, max_length=PROMPT_MAX, trim_whitespace=False
    )
    params = serializers.DictField(
        required=False,
        help_text="Replaces the whole params object (same rules as at registration).",
    )
    rotate_secret = serializers.BooleanField(
        required=False,
        default=False,
        help_text="remote: a new HMAC secret, in this answer only; the old one stops at once.",
    )
    is_paused = serializers.BooleanField(
        required=False,
        help_text="true pauses the agent (out of matchmaking); false resumes it after "
        "checking it as if drawn now (a remote agent's health call). Applied after the "
        "other changes.",
    )
    paused_reason = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=PAUSE_REASON_MAX,
        help_text="With is_paused true: why, shown to your team and the admins.",
    )


EDIT_ERRORS = {
    400: error_response(
        400, "invalid (a field), not_editable (kind, slug, team), forbidden_param, "
        "key_missing, invalid_key or entry_refused (problems names each field to fix)."
    ),
    403: error_response(403, "not_team_owner: only a team's owners change its agents."),
    404: error_response(404, "not_found: no agent of your teams has this id."),
    409: error_response(
        409, "agent_withdrawn: a withdrawn agent cannot change; name_taken: choose another name."
    ),
}  # fmt: skip


class AgentDetailApi(_TeamAgents, generics.RetrieveAPIView):
    serializer_class = AgentOutput

    @extend_schema(operation_id="agents_retrieve", description="One of your teams' agents.")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="agents_edit",
        request=AgentEditInput,
        responses={
            200: AgentRegisteredOutput,
            **EDIT_ERRORS,
            429: error_response(429, "rate_limited: too many checks (resuming checks)."),
            503: error_response(503, "key_storage_unavailable: tell the arena's operator."),
        },
        description="Changes one of your team's agents (owners only): only the fields "
        "sent change. A change of what runs (endpoint, provider, model_id, system_prompt, "
        "params) sends an approved agent back to pending: an admin approves it again. "
        "A new name, a replaced provider_key or a rotated secret keep its approval. "
        "remote_secret is set only when rotate_secret was asked (shown once). is_paused "
        "pauses or resumes it (a pause an admin made: 403 paused_by_admin; resuming "
        "counts as one of the team's checks: 429 rate_limited over them).",
    )
    def patch(self, request, pk: int):
        agent = self.get_object()
        sent = request.data.keys() if hasattr(request.data, "keys") else ()
        fixed = sorted(set(NOT_EDITABLE) & set(sent))
        if fixed:
            raise ApplicationError(
                f"{', '.join(fixed)} cannot change: withdraw the agent and register a new one.",
                code="not_editable",
            )
        data = AgentEditInput(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        paused, reason = fields.pop("is_paused", None), fields.pop("paused_reason", "")
        secret = None
        if set(fields) - {"rotate_secret"} or fields.get("rotate_secret") or paused is None:
            agent, secret = agent_edit(agent=agent, actor=request.user, **fields)
        if paused is True:
            agent = agent_pause(agent=agent, actor=request.user, reason=reason)
        elif paused is False:
            agent = agent_resume(agent=agent, actor=request.user)
        body = AgentOutput(agent).data
        body["remote_secret"] = secret
        return Response(body)

    @extend_schema(
        operation_id="agents_withdraw",
        request=None,
        responses={204: None, **{k: v for k, v in EDIT_ERRORS.items() if k in (403, 404)}},
        description="Withdraws one of your team's agents (owners only): it leaves the "
        "roster and matchmaking at once and cannot be driven or changed; its battles, "
        "votes and ratings stay, and GET still shows it with retired_at. Withdrawing it "
        "again changes nothing.",
    )
    def delete(self, request, pk: int):
        agent_withdraw(agent=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AgentCheckApi(_TeamAgents, APIView):
    @extend_schema(
        operation_id="agents_check",
        request=None,
        responses={200: EntryCheckOutput},
        description="Checks the agent as if it were drawn now: for a remote agent the "
        "protocol's health call to its endpoint, signed with its secret (at most 5 s); "
        "for a scaffold agent its provider, key and base URL. Writes nothing. An admin "
        "approves only an agent that passes. At most 10 checks a team in 10 minutes "
        "(429 rate_limited with Retry-After).",
    )
    def post(self, request, pk: int):
        problems = agent_entry_check_asked(agent=self.get_object())
        return Response({"ok": not problems, "problems": problems})
