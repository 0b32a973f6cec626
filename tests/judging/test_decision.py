"""The decision rule (judging.decision), as a table: ballots in, verdict out."""

import pytest

from judging.decision import Ballot, Case, consensus, decide, outcome_of

_ids = iter(range(1, 10_000))


def ballot(choice="A", *, judge=None, submitter=False, admissible=True, final=True, trust=0.5,
           established=True, reason="") -> Ballot:  # fmt: skip
    vote_id = next(_ids)
    return Ballot(
        vote_id=vote_id,
        judge_id=judge if judge is not None else vote_id,
        choice=choice,
        submitter=submitter,
        admissible=admissible,
        final=final,
        trust=trust,
        established=established,
        reason=reason if not admissible else "",
    )


def case(target=1, *, expired=False, probation=True, gamma=1.0) -> Case:
    return Case(target=target, gamma=gamma, expired=expired, probation_applies=probation)


def skip(**kw) -> Ballot:
    return ballot("abstain", admissible=False, reason="abstain", **kw)


def fast(**kw) -> Ballot:
    return ballot("A", admissible=False, reason="too_fast", **kw)


P = {"established": False}  # a probationary judge's ballot


@pytest.mark.parametrize(
    ("name", "the_case", "ballots", "action", "outcome", "source"),
    [
        ("no vote: wait", case(), [], "wait", "", ""),
        ("one admissible final vote decides", case(), [ballot("B")], "decide", "B", "crowd"),
        (
            "a vote in its undo window decides nothing",
            case(),
            [ballot(final=False)],
            "wait",
            "",
            "",
        ),
        ("a skip consumes nothing", case(), [skip()], "wait", "", ""),
        ("a too-fast vote consumes nothing", case(), [fast()], "wait", "", ""),
        (
            "untrusted: nothing",
            case(),
            [ballot(admissible=False, reason="untrusted_judge")],
            "wait",
            "",
            "",
        ),
        ("a skip, then a real vote", case(), [skip(), ballot("B")], "decide", "B", "crowd"),
        ("target 3 waits for three", case(3), [ballot(), ballot()], "wait", "", ""),
        (
            "target 3: three decide",
            case(3),
            [ballot("A"), ballot("B"), ballot("B")],
            "decide",
            "B",
            "crowd",
        ),
        (
            "target 3: inadmissible ones do not count",
            case(3),
            [ballot(), skip(), fast(), ballot()],
            "wait",
            "",
            "",
        ),
        (
            "a submitter vote alone waits for the window",
            case(),
            [ballot(submitter=True)],
            "wait",
            "",
            "",
        ),
        (
            "past the window the submitter decides",
            case(expired=True),
            [ballot("B", submitter=True)],
            "decide",
            "B",
            "submitter",
        ),
        (
            "an independent vote beats the submitter's",
            case(),
            [ballot("A", submitter=True), ballot("B")],
            "decide",
            "B",
            "crowd",
        ),
        (
            "past the window, fewer than the target still decide",
            case(3, expired=True),
            [ballot("A"), ballot("A", submitter=True)],
            "decide",
            "A",
            "crowd",
        ),
        (
            "past the window with nothing admissible: rule 7",
            case(expired=True),
            [skip(), fast()],
            "exclude",
            "",
            "",
        ),
        ("past the window with no vote at all: rule 7", case(expired=True), [], "exclude", "", ""),
        # probation (an established judge exists in the arena)
        ("a probationary vote alone cannot decide", case(), [ballot(**P)], "wait", "", ""),
        (
            "many probationary votes cannot either",
            case(3),
            [ballot(**P), ballot(**P), ballot(**P), ballot(**P)],
            "wait",
            "",
            "",
        ),
        (
            "an established vote backs them",
            case(),
            [ballot("B", **P), ballot("B")],
            "decide",
            "B",
            "crowd",
        ),
        (
            "probationary votes cannot overturn an established one",
            case(),
            [ballot("A", **P), ballot("A", **P), ballot("A", **P), ballot("B", trust=0.3)],
            "decide",
            "B",
            "crowd",
        ),
        (
            "probationary votes break an established tie",
            case(3),
            [ballot("A"), ballot("B"), ballot("B", **P)],
            "decide",
            "B",
            "crowd",
        ),
        (
            "before any judge is established, probationary votes decide",
            case(probation=False),
            [ballot("A", **P)],
            "decide",
            "A",
            "crowd",
        ),
        (
            "past the window, probationary votes alone: the submitter decides",
            case(expired=True),
            [ballot("A", **P), ballot("B", submitter=True)],
            "decide",
            "B",
            "submitter",
        ),
        (
            "past the window, probationary votes alone and no submitter: rule 7",
            case(expired=True),
            [ballot("A", **P)],
            "exclude",
            "",
            "",
        ),
    ],
)
def test_the_rule(name, the_case, ballots, action, outcome, source):
    verdict = decide(the_case, ballots)
    assert (verdict.action, verdict.outcome, verdict.source) == (action, outcome, source), name


def test_rule_6_early_needs_six_times_the_target_distinct_judges():
    refusals = [skip(judge=j) if j % 2 else fast(judge=j) for j in range(1, 6)]
    assert decide(case(), refusals).action == "wait"  # five judges: not yet
    assert decide(case(), [*refusals, skip(judge=6)]).action == "exclude"
    # one account cannot do it alone: the same judge six times is one judge
    assert decide(case(), [skip(judge=7) for _ in range(6)]).action == "wait"
    # submitter votes and untrusted judges' votes do not count towards it
    mixed = [*refusals, skip(judge=8, submitter=True),
             ballot(admissible=False, reason="untrusted_judge", judge=9)]  # fmt: skip
    assert decide(case(), mixed).action == "wait"
    # a target of 3 needs 18
    many = [skip(judge=100 + j) for j in range(17)]
    assert decide(case(3), many).action == "wait"
    assert decide(case(3), [*many, skip(judge=200)]).action == "exclude"
    # an admissible vote anywhere (a pending one too, or the submitter's) prevents it
    assert decide(case(), [*refusals, skip(judge=6), ballot(final=False)]).action == "wait"
    assert decide(case(), [*refusals, skip(judge=6), ballot(submitter=True)]).action == "wait"


def test_v_b_is_every_admissible_independent_vote_pending_ones_included():
    first, pending, submitter, skipped = (
        ballot("A"), ballot("B", final=False), ballot("A", submitter=True), skip(),
    )  # fmt: skip
    verdict = decide(case(), [first, pending, submitter, skipped])
    assert verdict.counted == (first.vote_id, pending.vote_id)
    assert verdict.outcome == "tie"  # 0.5 each
    assert verdict.cluster_judge == first.judge_id


@pytest.mark.parametrize(
    ("trusts", "gamma", "weight"),
    [([0.5], 1.0, 0.5), ([0.5, 1.0, 0.9], 1.0, 0.8), ([0.5], 0.25, 0.125)],
)
def test_evidence_weight_is_gamma_times_mean_trust(trusts, gamma, weight):
    ballots = [ballot("A", trust=t) for t in trusts]
    verdict = decide(case(len(trusts), gamma=gamma), ballots)
    assert verdict.weight == pytest.approx(weight)


@pytest.mark.parametrize(
    ("ballots", "outcome"),
    [
        ([("A", True), ("B", False), ("B", False)], "A"),  # established leader wins
        ([("A", True), ("B", True), ("B", False)], "B"),  # established tie: the rest breaks it
        ([("A", False), ("B", False)], "tie"),  # no established vote, equal weights
        ([("both_bad", True)], "both_bad"),
    ],
)
def test_outcome_of(ballots, outcome):
    made = [ballot(choice, established=est) for choice, est in ballots]
    assert outcome_of(made) == outcome


def test_consensus_of_a_tie_at_the_top_is_tie():
    assert consensus([("A", 0.5), ("B", 0.5)]) == "tie"
