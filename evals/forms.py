"""The "New evaluation" form: the files and the choices as a page sends them. It checks
only what the browser sends (a file is there and not too big, a number is a number, the
order names the ticked candidates, a matchup is two names); every rule of an evaluation
or a tournament is the services' (their ApplicationError is shown beside the form; a
refusal of the baseline beside its field, in the page's words)."""

import re

from django import forms

from agents.models import Agent
from arena_site.exceptions import ApplicationError
from evals import calls, reducers, tournaments
from evals.keyless import SAMPLE_CHOICES, candidate_label, judge_label
from evals.suites import MAX_FILE_BYTES

FORMAT_CHOICES = [
    ("", "None: no tournament"),
    (tournaments.ROUND_ROBIN, "Round robin: every pair plays one series per task"),
    (tournaments.SINGLE_ELIMINATION, "Single elimination: a bracket, winners advance"),
    (tournaments.KING_OF_THE_HILL, "King of the hill: the holder meets each challenger in turn"),
]
# A list of slugs as a person types it: separated by commas and/or spaces.
_SEPARATORS = re.compile(r"[\s,]+")
# One matchup: "p vs s", "p v s", "p, s" or "p s".
_VERSUS = re.compile(r"\s+vs?\.?\s+|\s*,\s*|\s+", re.IGNORECASE)


TOURNAMENT_FIELDS = ("tournament", "best_of", "seed", "opening")


NO_JUDGE = "No judge: exact match and success commands only (needs no key)"
NO_BASELINE = "No baseline (every pair, or no pairwise judging)"
# The services' refusals of a baseline in this page's words (theirs name the command's
# options), by their code; each is shown beside the baseline field.
BASELINE_REFUSALS = {
    "baseline_not_candidate": "The baseline agent must be one of the ticked candidates (its "
    "answers are made like theirs): tick it, or choose another baseline.",
    "too_few_agents": "A baseline needs another ticked candidate to play against it.",
    "no_judge": "A baseline needs a judge: choose one above, or no baseline.",
    "baseline_in_tournament": "A baseline plays every other candidate once per task, and a "
    "tournament schedules its own games: choose a baseline or a tournament format, not both.",
    "baseline_with_pairwise": "With a baseline each candidate is judged against it only, never "
    "against each other: untick judging every pair of replies, or choose no baseline.",
}


class EvaluationForm(forms.Form):
    sample = forms.ChoiceField(
        required=False,
        choices=[("", "None: I upload my own suite"), *SAMPLE_CHOICES],
        label="Bundled sample suite",
        help_text="A suite that ships with the arena (examples/suites), to try an evaluation "
        "without writing one; or leave it at None and upload your own below.",
    )
    suite = forms.FileField(
        required=False,
        help_text="The task suite, YAML or JSON (docs/evaluations.md has the format).",
    )
    rubric = forms.FileField(
        required=False, help_text="Optional criteria for the rubric judge, YAML or JSON."
    )
    agents = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        help_text="The candidates: your team's agents or the arena's, with the kinds of task "
        "each can run (the built-in agents run desktop tasks and need no key). Without an "
        "order below they play in this list's order.",
    )
    order = forms.CharField(
        required=False,
        max_length=2000,
        label="Candidates' order",
        help_text="Optional: the ticked candidates' slugs in the order they should play, "
        "separated by spaces or commas (e.g. q p s r); it must name every ticked "
        "candidate once. The order is the tournament's seeding: round robin plays the pairs "
        "in it, single elimination pairs neighbours (1st v 2nd, 3rd v 4th) unless opening "
        "matchups are given, king of the hill starts with the first as the holder.",
    )
    judge = forms.ChoiceField(
        required=False,
        help_text="A model agent that judges the rubric, the pairs or a tournament's games; "
        "never one of the candidates. Exact answers and success commands need no judge.",
    )
    pairwise = forms.BooleanField(required=False, label="Judge every pair of replies (both orders)")
    baseline = forms.ChoiceField(
        required=False,
        label="Baseline agent every other candidate plays",
        help_text="Optional: each other candidate is judged against this one on every task, "
        "in both orders, the judge answering each task first. Needs a judge; not with a "
        "tournament nor with judging every pair.",
    )
    max_tokens = forms.IntegerField(
        min_value=1,
        max_value=200_000,
        initial=calls.MAX_TOKENS,
        label="Longest reply of a candidate, in tokens",
        help_text="The most each candidate may write per answer (sent to its model).",
    )
    epochs = forms.IntegerField(
        required=False,
        initial=1,
        min_value=1,
        max_value=reducers.MAX_EPOCHS,
        label="Runs of each task (epochs)",
        help_text="How many times each candidate runs each task; the figures are then per "
        "task first, over its runs (below), then over the tasks.",
    )
    reducer = forms.ChoiceField(
        required=False,
        initial="mean",
        choices=[
            ("mean", "The mean of its runs"),
            ("max", "The best of its runs"),
            ("mode", "The most frequent score of its runs"),
            ("pass_at_k", "The chance that one of K runs drawn passes (pass@K)"),
            ("at_least_k", "1 when K runs or more passed, else 0"),
        ],
        label="One score per task from its runs",
    )
    reducer_k = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=reducers.MAX_EPOCHS,
        label="K",
        help_text="For the last two: how many runs (at most the runs of each task).",
    )
    tournament = forms.ChoiceField(
        required=False,
        choices=FORMAT_CHOICES,
        label="Format",
        help_text="A tournament plays pairwise games under the judge (pairwise is implied); "
        "it takes no rubric.",
    )
    best_of = forms.IntegerField(
        required=False,
        initial=1,
        label="Best of",
        widget=forms.NumberInput(attrs={"min": 1, "step": 2}),
        help_text="Games per series, odd (1, 3, 5, …).",
    )
    seed = forms.IntegerField(
        required=False,
        initial=0,
        label="Seed",
        widget=forms.NumberInput(attrs={"min": 0}),
        help_text="Decides the seeded fallback after three drawn tie-breaks, and seeds the "
        "ratings' bootstrap.",
    )
    opening = forms.CharField(
        required=False,
        max_length=4000,
        label="Opening matchups",
        widget=forms.Textarea(attrs={"rows": 4, "cols": 30}),
        help_text="Single elimination only, optional: the first round, one pair a line "
        "('p vs s' or 'p, s'); empty pairs neighbours in the order.",
    )

    def __init__(
        self, *args, agents: list[Agent], judges: list[tuple[Agent, str | None]], **kwargs
    ) -> None:
        """``agents`` are the possible candidates; ``judges`` the model agents, each with
        why it cannot be called here (None when it can)."""
        super().__init__(*args, **kwargs)
        self.fields["agents"].choices = [(a.slug, candidate_label(a)) for a in agents]
        self.fields["baseline"].choices = [
            ("", NO_BASELINE),
            *self.fields["agents"].choices,
        ]
        self.fields["judge"].choices = [
            ("", NO_JUDGE),
            *((a.slug, judge_label(a, unready)) for a, unready in judges),
        ]
        self.unready = {a.slug: unready for a, unready in judges if unready}
        self.judges_ready = any(unready is None for _, unready in judges)

    def evaluation_fields(self) -> list[forms.BoundField]:
        """The fields of every evaluation, in order (the page groups the rest)."""
        return [field for field in self if field.name not in TOURNAMENT_FIELDS]

    def tournament_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in TOURNAMENT_FIELDS]

    def refusal_mark(self, error: ApplicationError) -> bool:
        """Marks the baseline field with a service's refusal of the chosen baseline, in
        this page's words; False when the refusal is not the baseline's (the page then
        shows the service's own words)."""
        words = BASELINE_REFUSALS.get(error.code)
        if not self.cleaned_data.get("baseline") or words is None:
            return False
        if error.code == "no_judge" and self.cleaned_data.get("judge"):
            return False
        self.add_error("baseline", words)
        return True

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

    def clean_judge(self) -> str:
        """A judge that cannot be called from here is refused now, with the fix, rather
        than failing every call once the evaluation runs."""
        slug = self.cleaned_data.get("judge", "")
        if slug in self.unready:
            raise forms.ValidationError(
                f"The judge {slug} cannot be called here: {self.unready[slug]} Or pick a "
                "model on a local server (docs/local-models.md), or no judge."
            )
        return slug

    def clean_epochs(self) -> int:
        value = self.cleaned_data.get("epochs")
        return 1 if value is None else value

    def clean_reducer_k(self) -> str:
        """The reducer as the service reads it (``mean``, ``pass_at_k:K``, …); whether K
        fits the runs is the service's rule."""
        name = self.cleaned_data.get("reducer") or "mean"
        k = self.cleaned_data.get("reducer_k")
        return name if k is None else f"{name}:{k}"

    def clean_best_of(self) -> int:
        value = self.cleaned_data.get("best_of")
        return 1 if value is None else value

    def clean_seed(self) -> int:
        value = self.cleaned_data.get("seed")
        return 0 if value is None else value

    def clean_opening(self) -> list[list[str]] | None:
        """The matchups, one pair a line (blank lines skipped); None when there are none.
        Whether they fit the field is the schedule's rule (the service's)."""
        pairs = []
        for number, line in enumerate(self.cleaned_data.get("opening", "").splitlines(), 1):
            names = [n for n in _VERSUS.split(line.strip()) if n]
            if not names:
                continue
            if len(names) != 2:
                raise forms.ValidationError(
                    f"Line {number}: '{line.strip()}' is not one pair; write 'p vs s' or 'p, s'."
                )
            pairs.append(names)
        return pairs or None

    def clean(self):
        """The candidates in play order (``candidates``): the order field's when given,
        which must name exactly the ticked ones, else the list's."""
        data = super().clean()
        if "suite" not in self.errors and bool(data.get("suite")) == bool(data.get("sample")):
            self.add_error(
                "suite",
                "Upload a suite file or choose a bundled sample suite above (one of the two)."
                if not data.get("suite")
                else "Choose either a bundled sample suite or a file of your own, not both.",
            )
        ticked = data.get("agents")
        if ticked is None:
            return data
        order = [s for s in _SEPARATORS.split(data.get("order", "")) if s]
        if not order:
            data["candidates"] = list(ticked)
            return data
        repeated = sorted({s for s in order if order.count(s) > 1})
        unticked = [s for s in order if s not in ticked]
        left_out = [s for s in ticked if s not in order]
        problems = []
        if repeated:
            problems.append(f"named more than once: {', '.join(repeated)}")
        if unticked:
            problems.append(f"not ticked: {', '.join(unticked)}")
        if left_out:
            problems.append(f"ticked but not in the order: {', '.join(left_out)}")
        if problems:
            self.add_error(
                "order",
                "The order must name every ticked candidate once (" + "; ".join(problems) + ").",
            )
        else:
            data["candidates"] = order
        return data
