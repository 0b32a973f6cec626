"""The open-data export's tables: every column's name, type, nullability and meaning,
and the two versions a consumer checks (docs/open-data.md). Pure: no Django.

Types: ``string``, ``int64``, ``float64``, ``bool``, ``timestamp`` (UTC; ISO 8601 text
in JSON Lines, ``timestamp[us, UTC]`` in Parquet) and ``json`` (a JSON value in JSON
Lines, its JSON text in Parquet).

SCHEMA_VERSION changes when a column is added (minor) or renamed, removed or retyped
(major); DATA_CARD_VERSION when what is exported or how it is filtered changes."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

SCHEMA_VERSION = "1.3"
DATA_CARD_VERSION = "1.4"
TYPES = ("string", "int64", "float64", "bool", "timestamp", "json")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    description: str
    nullable: bool = False


@dataclass(frozen=True)
class Table:
    name: str
    description: str
    columns: tuple[Column, ...]
    optional: bool = False  # written only with --with-steps

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


C = Column
BATTLE_ID = C("battle_id", "int64", "The battle's id in the arena (stable across exports).")

BATTLES = Table(
    "battles",
    "Decided battles that enter the rating (decided, with an outcome, not excluded), "
    "one row each; the input of the published Bradley-Terry refit.",
    (
        BATTLE_ID,
        C("arena", "string", "The arena's slug (one leaderboard's scope)."),
        C("task_id", "int64", "The task's id; a task re-run after a failure has two battles."),
        C("agent_a", "string", "Side A's agent (its slug on the board)."),
        C("agent_b", "string", "Side B's agent (its slug on the board)."),
        C("winner", "string", "The outcome: A, B, tie or both_bad (both count ½ in ratings)."),
        C(
            "weight",
            "float64",
            "Evidence weight w_b = γ_b · mean ω of the deciding votes "
            "(1 when the arena recorded none), as the refit uses it.",
        ),
        C(
            "decision_source",
            "string",
            "crowd (independent judges), submitter "
            "(self-judged: the submitting team's own blind votes) or import.",
        ),
        C("calibration", "bool", "A calibration showcase (γ_cal applies to its weight)."),
        C("redundancy_target", "int64", "Independent votes the battle wanted (1 or 3)."),
        C(
            "category",
            "string",
            "The task's category (browsing, files_and_data, general, "
            "coding); empty when unclassified.",
        ),
        C("task_kind", "string", "desktop or repo (a coding task)."),
        C(
            "instruction",
            "string",
            "The task as submitted (published with the submitter's consent), personal "
            "data replaced by placeholders such as <PERSON_1> or <EMAIL_ADDRESS_1>.",
        ),
        C("start_url", "string", "The task's public start URL; empty for none."),
        C(
            "attachments",
            "int64",
            "How many files came with the task (their content is never exported).",
        ),
        C("submitted_at", "timestamp", "When the task was submitted."),
        C("ended_at", "timestamp", "When both sides had ended.", nullable=True),
        C("decided_at", "timestamp", "When the battle was decided (and published)."),
        C(
            "judge",
            "string",
            "Pseudonym of the judge whose vote decided it (the refit's "
            "cluster); null when that account is gone.",
            nullable=True,
        ),
        C(
            "cluster",
            "string",
            "The refit's cluster of the battle: judge, or b<battle_id> "
            "when there is none (a cluster of its own).",
        ),
        C(
            "cluster_index",
            "int64",
            "The cluster's number in the refit of these battles, from 0: clusters in "
            "the order the refit reads them (by their first pair of agents in fit_index "
            "order, then by the judge's account id, a judge-less battle first). What the "
            "judges' bootstrap draws and the clustered interval sums in; "
            "python -m ratings fit reads it to reproduce the board bit for bit.",
        ),
    ),
)

VOTES = Table(
    "votes",
    "Final, not retracted votes on the exported battles and exclusions, judges "
    "pseudonymised (a keyed hash, stable within one key).",
    (
        BATTLE_ID,
        C(
            "judge",
            "string",
            "The judge's pseudonym: the same judge has the same one across "
            "exports made with the same key (manifest pseudonym_key_id).",
        ),
        C("choice", "string", "A, B, tie, both_bad or abstain (a skip)."),
        C(
            "is_submitter",
            "bool",
            "Cast by a member of the submitting team: never an independent judgment.",
        ),
        C("admissible", "bool", "Could count towards a decision."),
        C(
            "inadmissible_reason",
            "string",
            "abstain, untrusted_judge, too_fast, identities_public, ...; empty when admissible.",
        ),
        C("counted", "bool", "One of the votes that produced the battle's outcome (V_b)."),
        C("served_at", "timestamp", "When the battle was served to the judge."),
        C(
            "voted_at",
            "timestamp",
            "When the vote was cast (voted_at − served_at is the reading time).",
        ),
        C("final_at", "timestamp", "When its undo window ended."),
    ),
)

VOTE_REASONS = Table(
    "vote_reasons",
    "What judges said about each side after voting: the tags of the exported votes "
    "(those of `votes`), one row per vote and side with at least one tag. The judges' "
    "free-text notes are never exported.",
    (
        BATTLE_ID,
        C("judge", "string", "The judge's pseudonym (as in `votes`)."),
        C("side", "string", "A or B."),
        C("agent", "string", "That side's agent (its slug on the board)."),
        C(
            "tags",
            "json",
            "The tag codes, distinct, in taxonomy order: perception, grounding, "
            "app_knowledge, planning, execution, repetition, instruction, false_success, "
            "unsafe, inefficient, gave_up (went wrong); completed, self_corrected, "
            "efficient, clear_answer, careful (went right). Definitions: docs/method.md.",
        ),
        C(
            "counted",
            "bool",
            "The set counts in the tallies the arena shows (agent page): an admissible, "
            "independent vote on a decided battle, from a judge past probation when the "
            "arena applies it.",
        ),
    ),
)

FOLLOW_UPS = Table(
    "follow_ups",
    "What the submitter said to both sides while a battle ran (docs/conversations.md): "
    "one row per follow-up of the battles of `battles` and `exclusions`, in the order "
    "sent. Judges saw them with the step at which each side received them.",
    (
        BATTLE_ID,
        C("seq", "int64", "The follow-up's number in its battle, from 1, in the order sent."),
        C(
            "text",
            "string",
            "The follow-up with personal data replaced by placeholders, as instructions "
            "are (never the text as sent).",
        ),
        C("sent_at", "timestamp", "When the submitter sent it."),
        C(
            "received_at_step_a",
            "int64",
            "The step of side A whose observation carried it; null when side A never "
            "received it (its lane ended first).",
            nullable=True,
        ),
        C(
            "received_at_step_b",
            "int64",
            "The same for side B.",
            nullable=True,
        ),
    ),
)

EXCLUSIONS = Table(
    "exclusions",
    "Excluded battles with the SPEC §5.3 rule that excluded them (the board's counts).",
    (
        BATTLE_ID,
        C("arena", "string", "The arena's slug."),
        C("agent_a", "string", "Side A's agent."),
        C("agent_b", "string", "Side B's agent."),
        C(
            "reason",
            "string",
            "named_model, no_run, arena_fault, forged_grade, ended_by_submitter, "
            "budget_mismatch or no_admissible_vote; no_trajectory for a battle excluded "
            "under that rule before it was retired.",
        ),
        C(
            "rule",
            "int64",
            "The rule's number, 1–7, in the order the rules apply (no_trajectory: 3).",
        ),
        C("by", "string", "rule (the arena's own rules) or operator (never who)."),
        C("excluded_at", "timestamp", "When it was excluded (its last exclusion)."),
    ),
)

RATINGS = Table(
    "ratings",
    "The published board: the newest refit snapshot of the arena, one row per agent, "
    "with the parameters `python -m ratings fit` needs to reproduce it.",
    (
        C("arena", "string", "The arena's slug."),
        C("snapshot_id", "int64", "The snapshot's id."),
        C("computed_at", "timestamp", "When the refit that produced it finished."),
        C("agent", "string", "The agent's slug."),
        C("agent_name", "string", "The agent's display name."),
        C(
            "rating",
            "float64",
            "Published rating (Elo scale); null while provisional or unavailable.",
            nullable=True,
        ),
        C("lower", "float64", "95% interval, lower end.", nullable=True),
        C("upper", "float64", "95% interval, upper end.", nullable=True),
        C("rank_lower", "int64", "95% bootstrap rank band, best rank.", nullable=True),
        C("rank_upper", "int64", "95% bootstrap rank band, worst rank.", nullable=True),
        C("provisional", "bool", "Fewer than min_battles rated battles in the fit."),
        C("unavailable", "string", "no_comparisons, disconnected or separated; empty when placed."),
        C("battles", "int64", "The agent's battles in the fit."),
        C("weight", "float64", "Σ w_b over the agent's battles in the fit."),
        C("snapshot_battles", "int64", "Rated battles in the whole fit."),
        C("ridge", "float64", "The fit's ridge r (python -m ratings fit --ridge)."),
        C("r0", "float64", "The scale's centre R0 (--r0)."),
        C("min_battles", "int64", "n0: fewer battles is provisional (--provisional)."),
        C("bootstrap_replicates", "int64", "Replicates behind the rank bands."),
        C("interval", "string", "battle or clustered (docs/intervals.md)."),
        C("converged", "bool", "The fit converged (false: flagged on the board)."),
        C(
            "fit_index",
            "int64",
            "The agent's index in the fit (agents in the order of their ids in the "
            "arena): the order python -m ratings fit gives the agents to reproduce the "
            "board bit for bit.",
        ),
        C("seed", "int64", "Seed of the bootstrap behind the rank bands (--seed)."),
        C(
            "bootstrap_unit",
            "string",
            "What a bootstrap replicate resampled: battles, judges (the clusters of the "
            "clustered interval) or tasks (the arena's choice; --bootstrap-unit tasks).",
        ),
        C("critical_value", "float64", "The published interval's multiplier (z, or t(G* − 1))."),
    ),
)

RUNS = Table(
    "runs",
    "Each side of each exported battle (with --with-steps).",
    (
        BATTLE_ID,
        C("side", "string", "A or B."),
        C("agent", "string", "The side's agent."),
        C(
            "end_reason",
            "string",
            "delivered, gave_up, step_budget, time_budget, error or "
            "ended_by_submitter; empty if unknown.",
        ),
        C("final_message", "string", "The agent's final message, as judges saw it."),
        C("steps", "int64", "Steps the side took."),
        C(
            "delivered_files",
            "json",
            "The files it delivered: [{name, size}] (names and sizes only).",
        ),
    ),
    optional=True,
)

STEPS = Table(
    "steps",
    "Every step of every exported side (with --with-steps): the tool, its arguments and "
    "its result; the screenshot after it with --with-screenshots, within the bounds.",
    (
        BATTLE_ID,
        C("side", "string", "A or B."),
        C("index", "int64", "The step's position in the side's trajectory, from 0."),
        C("tool", "string", "The tool called."),
        C("args", "json", "Its arguments."),
        C(
            "result",
            "json",
            "Its result; an ask_user step's answer (the submitter's words) redacted as the "
            "instructions are.",
        ),
        C("duration_ms", "int64", "How long the step took."),
        C(
            "screenshot",
            "string",
            "Path of its PNG inside the export (screenshots/...); null "
            "when not included (see screenshot_status).",
            nullable=True,
        ),
        C("screenshot_bytes", "int64", "The PNG's size when included.", nullable=True),
        C(
            "screenshot_status",
            "string",
            "none (the step has none), included, not_requested, "
            "over_battle_bound, over_total_bound, too_large (over the arena's bound of "
            "one screenshot), invalid (not a PNG) or missing.",
        ),
    ),
    optional=True,
)

TABLES: tuple[Table, ...] = (
    BATTLES,
    VOTES,
    VOTE_REASONS,
    FOLLOW_UPS,
    EXCLUSIONS,
    RATINGS,
    RUNS,
    STEPS,
)
BY_NAME = {t.name: t for t in TABLES}
CORE_TABLES = tuple(t.name for t in TABLES if not t.optional)


def schema_document() -> dict[str, Any]:
    """schema.json: every table's columns with type, nullability and description."""
    return {
        "schema_version": SCHEMA_VERSION,
        "data_card_version": DATA_CARD_VERSION,
        "types": {
            "string": "UTF-8 text",
            "int64": "64-bit integer",
            "float64": "64-bit float",
            "bool": "true or false",
            "timestamp": "UTC instant: ISO 8601 text in JSON Lines, timestamp[us, UTC] in Parquet",
            "json": "a JSON value in JSON Lines, its JSON text (a string) in Parquet",
        },
        "tables": {
            t.name: {
                "description": t.description,
                "optional": t.optional,
                "columns": [
                    {
                        "name": c.name,
                        "type": c.type,
                        "nullable": c.nullable,
                        "description": c.description,
                    }
                    for c in t.columns
                ],
            }
            for t in TABLES
        },
    }


_JSONL_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "int64": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float64": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "timestamp": lambda v: isinstance(v, str) and _is_instant(v),
    "json": lambda v: True,
}


def _is_instant(text: str) -> bool:
    try:
        return datetime.fromisoformat(text).utcoffset() is not None
    except ValueError:
        return False


def row_problems(table: Table, row: dict[str, Any]) -> list[str]:
    """What is wrong with a JSON Lines row of ``table`` (empty: it conforms): missing or
    unknown columns, nulls where none may be, values of the wrong type."""
    problems = []
    if list(row) != table.names:
        problems.append(f"columns {list(row)} are not {table.names}")
    for column in table.columns:
        if column.name not in row:
            continue
        value = row[column.name]
        if value is None:
            if not column.nullable and column.type != "json":
                problems.append(f"{column.name} is null")
        elif not _JSONL_CHECKS[column.type](value):
            problems.append(f"{column.name}={value!r} is not {column.type}")
    return problems
