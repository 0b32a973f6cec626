"""Writes for judging, by concern:

- ``serving``: which battle a judge gets next, request limits, approval;
- ``voting``: casting a vote, undoing it within its window, what a judge is told;
- ``resolution``: votes → the decision rule (``judging.decision``) → a verdict;
- ``decisions``: ``battle_decide``, the one door through which every battle is decided
  (crowd, submitting team, import, later test-graded battles), and taking a decision
  back (a machine judge's verdict on a live battle is no decision: ``machine``);
- ``screening``: exclusion rules 1–6 before a battle is served (the identity-leak scan);
- ``exclusions``: excluding and re-admitting battles;
- ``trust``: agreement on redundancy battles, ω and probation;
- ``operator_actions``: what operators change (exclusions, judge standing), audited.
"""

from judging.services.decisions import battle_decide, battle_undecide, judge_group
from judging.services.operator_actions import (
    battle_exclude,
    battle_readmit,
    judge_standing_set,
    judge_trust_set,
)
from judging.services.resolution import battle_resolve, battles_resolve_pending
from judging.services.screening import battle_screen, exclusion_at_lanes_end
from judging.services.serving import judge_next, judge_profile, judge_rate_check
from judging.services.voting import (
    describe,
    reading_time_s,
    vote_cast,
    vote_status,
    vote_undo,
)

__all__ = [
    "battle_decide",
    "battle_exclude",
    "battle_readmit",
    "battle_resolve",
    "battle_screen",
    "battle_undecide",
    "battles_resolve_pending",
    "describe",
    "exclusion_at_lanes_end",
    "judge_group",
    "judge_next",
    "judge_profile",
    "judge_rate_check",
    "judge_standing_set",
    "judge_trust_set",
    "reading_time_s",
    "vote_cast",
    "vote_status",
    "vote_undo",
]
