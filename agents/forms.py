"""The forms of a team's agent pages: the same fields as the API's
``AgentRegisterInput`` and ``AgentEditInput`` (agents/api.py). They only shape input;
the rules are the services' (agents/registration.py, agents/entry_changes.py)."""

import json

from django import forms

from agents.entry_changes import PAUSE_REASON_MAX
from agents.keys import MAX_KEY_CHARS
from agents.providers.registry import PROVIDERS
from agents.registration import KEYED_PROVIDERS, NAME_MAX, PROMPT_MAX, SLUG_MAX, TEAM_KIND_CHOICES

PROVIDER_CHOICES = [("", "—"), *((name, name) for name in PROVIDERS)]
PARAMS_MAX_CHARS = 5000


class _ParamsField(forms.CharField):
    """A JSON object typed into a text box."""

    def to_python(self, value):
        text = super().to_python(value).strip()
        if not text:
            return {}
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}.") from None
        if not isinstance(parsed, dict):
            raise forms.ValidationError('A JSON object, e.g. {"temperature": 0.2}.')
        return parsed

    def has_changed(self, initial, data) -> bool:
        try:
            return self.to_python(initial or "") != self.to_python(data)
        except forms.ValidationError:
            return True


def _params_field() -> _ParamsField:
    return _ParamsField(
        required=False,
        max_length=PARAMS_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="Optional, a JSON object. Scaffold: max_tokens, temperature, top_p, "
        "base_url (a local OpenAI-compatible server), timeout_s. Remote: timeout_s.",
    )


class _AgentFields(forms.Form):
    display_name = forms.CharField(max_length=NAME_MAX, help_text="The name on the leaderboard.")
    endpoint = forms.CharField(
        required=False,
        max_length=2000,
        label="Endpoint (remote)",
        help_text="The http(s) URL the arena sends each observation to.",
    )
    provider = forms.ChoiceField(
        choices=PROVIDER_CHOICES,
        required=False,
        label="Provider (scaffold)",
        help_text=f"{', '.join(KEYED_PROVIDERS)} need your team's provider key; "
        "openai_compatible (a local server such as vLLM, Ollama or llama.cpp) may need none.",
    )
    model_id = forms.CharField(
        required=False, max_length=200, label="Model (scaffold)", help_text="e.g. gpt-4.1."
    )
    provider_key = forms.CharField(
        required=False,
        max_length=MAX_KEY_CHARS,
        label="Provider key (scaffold)",
        widget=forms.PasswordInput(attrs={"autocomplete": "off"}),
        help_text="Encrypted at rest, used only to call the provider, never shown again.",
    )
    system_prompt = forms.CharField(
        required=False,
        max_length=PROMPT_MAX,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Optional (scaffold): added to the arena's own instructions.",
    )
    params = _params_field()


class AgentRegisterForm(_AgentFields):
    field_order = ["kind", "team", "display_name", "slug"]

    kind = forms.ChoiceField(
        choices=TEAM_KIND_CHOICES,
        widget=forms.RadioSelect,
        help_text="Remote: your own server speaks the agent protocol. Scaffold: the arena "
        "runs a model of a provider for you.",
    )
    team = forms.TypedChoiceField(coerce=int, help_text="The team entering it (you own it).")
    slug = forms.CharField(
        required=False,
        max_length=SLUG_MAX,
        help_text="Optional: a short unique name; derived from the display name.",
    )

    def __init__(self, *args, teams=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(team.pk, team.name) for team in teams]

    def service_fields(self) -> dict:
        """The fields as ``agent_register`` takes them (without the team)."""
        data = dict(self.cleaned_data)
        data.pop("team")
        return data


class AgentEditForm(_AgentFields):
    """Blank provider key: the stored key stays."""

    def __init__(self, *args, agent, **kwargs) -> None:
        params = dict(agent.params or {})
        endpoint = params.pop("endpoint", "") if agent.kind == "remote" else ""
        initial = {
            "display_name": agent.display_name,
            "endpoint": endpoint,
            "provider": agent.provider,
            "model_id": agent.model_id,
            "system_prompt": agent.system_prompt,
            "params": json.dumps(params) if params else "",
        }
        super().__init__(*args, initial=initial, **kwargs)
        self.fields[
            "provider_key"
        ].help_text = (
            "Leave blank to keep the stored key; a new one replaces it (never shown again)."
        )
        # only what the agent's kind has
        remote_drops = ("provider", "model_id", "provider_key", "system_prompt")
        dropped = remote_drops if agent.kind == "remote" else ()
        dropped += ("endpoint",) if agent.kind != "remote" else ()
        for name in dropped:
            del self.fields[name]

    def changes(self) -> dict:
        """The fields that differ from the agent's, as ``agent_edit`` takes them."""
        data = dict(self.cleaned_data)
        if not data.get("provider_key"):
            data.pop("provider_key", None)
        return {
            name: value
            for name, value in data.items()
            if name == "provider_key" or name in self.changed_data
        }


class PauseForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=PAUSE_REASON_MAX,
        label="Why (optional)",
        help_text="Shown to your team and the admins.",
    )
