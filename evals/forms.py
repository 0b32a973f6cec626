"""The "New evaluation" form: the files and the choices as a page sends them. It checks
only what the browser sends (a file is there and not too big, a number is a number);
every rule of an evaluation is the services' (their ApplicationError is shown beside
the form)."""

from django import forms

from agents.models import Agent
from evals import calls
from evals.suites import MAX_FILE_BYTES


def _agent_label(agent: Agent) -> str:
    return f"{agent.display_name} ({agent.slug}) · {agent.model_id}"


class EvaluationForm(forms.Form):
    suite = forms.FileField(
        help_text="The task suite, YAML or JSON (docs/evaluations.md has the format)."
    )
    rubric = forms.FileField(
        required=False, help_text="Optional criteria for the rubric judge, YAML or JSON."
    )
    agents = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        help_text="The candidates, in this order: your team's model agents or the arena's.",
    )
    judge = forms.ChoiceField(
        required=False, help_text="Judges the rubric and the pairs; never one of the candidates."
    )
    pairwise = forms.BooleanField(required=False, label="Judge every pair of replies (both orders)")
    max_tokens = forms.IntegerField(
        min_value=1,
        max_value=200_000,
        initial=calls.MAX_TOKENS,
        label="Candidates' max_tokens",
    )

    def __init__(self, *args, agents: list[Agent], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        choices = [(a.slug, _agent_label(a)) for a in agents]
        self.fields["agents"].choices = choices
        self.fields["judge"].choices = [("", "No judge"), *choices]

    def _file(self, name: str):
        upload = self.cleaned_data.get(name)
        if upload is not None and upload.size > MAX_FILE_BYTES:
            raise forms.ValidationError(
                f"The file is {upload.size} bytes; the limit is {MAX_FILE_BYTES} bytes "
                "(use manage.py eval run for larger suites)."
            )
        return upload

    def clean_suite(self):
        return self._file("suite")

    def clean_rubric(self):
        return self._file("rubric")
