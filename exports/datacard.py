"""DATA_CARD.md of an export: what it holds, how it was filtered, and what a reader must
know before drawing conclusions from it. Pure: it renders the manifest it is given."""

from typing import Any

from exports.schema import DATA_CARD_VERSION, SCHEMA_VERSION

NO_LICENCE = (
    "**No licence has been set by the operator** (ARENA_EXPORT_LICENCE). Until one is, "
    "ask the arena's operator before redistributing these files."
)


def data_card(manifest: dict[str, Any]) -> str:
    f = manifest["filters"]
    counts = manifest["counts"]
    rt = manifest["round_trip"]
    fit = rt["fit"]
    licence = manifest["licence"]
    table_lines = "\n".join(f"| `{name}` | {rows:,} |" for name, rows in counts.items())
    steps = (
        "Trajectories are included (`runs`, `steps`)"
        + (
            f", with screenshots up to {f['max_battle_screenshot_bytes']:,} bytes per battle "
            f"and {f['max_screenshot_bytes']:,} bytes in all (a step over a bound says so in "
            "`screenshot_status`)."
            if f["with_screenshots"]
            else "; screenshots are not."
        )
        if f["with_steps"]
        else "Trajectories (steps, screenshots) are not included in this export."
    )
    coverage = (
        "they are the same battles, so every published rating, interval and rank band is "
        "reproduced exactly."
        if rt["complete"]
        else "the difference (consent, delay, battles decided after the refit) means the "
        "refit of this export differs from the board."
    )
    return f"""# Data card: Agent Arena open data, arena `{manifest["arena"]}`

- Data card version: **{DATA_CARD_VERSION}**
- Schema version: **{SCHEMA_VERSION}** (`schema.json`: every table's columns, types, descriptions)
- Exported at: {manifest["exported_at"]}
- Publication cutoff: battles decided or excluded at or before {f["cutoff"]}
  ({f["delay_days"]} days before the export)
- Judge pseudonym key id: `{manifest["pseudonym_key_id"]}`

## What is in it

Two AI agents ran the same task side by side; crowd judges compared the two
trajectories blind and voted; decided battles move the agents' ratings.

| table | rows |
| --- | --- |
{table_lines}

Each table is in JSON Lines (`.jsonl`) and/or Parquet (`.parquet`): the same rows.
`manifest.json` lists every file with its size and SHA-256. {steps}

## How it was filtered

- **Decided battles only.** `battles` holds the battles that enter the rating (decided,
  with an outcome, not excluded); `exclusions` the excluded ones with the rule that
  excluded them. Nothing of a battle still queued, running, screening, judging or
  failed is exported.
- **Consent.** Only battles whose task's submitter has accepted the arena's current
  publication terms (version {f["consent_terms_version"]}) at export time. A
  submitter who has not accepted the newest terms drops out of the next export.
- **Publication delay.** Only battles decided (or excluded) at least {f["delay_days"]}
  days before the export.
- **Votes.** Final votes on the exported battles. Votes undone inside their undo window
  (retracted) are never exported: they were withdrawn before any name showed and were
  never a judgment. Inadmissible votes are exported, flagged, with their reason.
- **Reasons.** `vote_reasons` holds the tags judges gave each side after voting, for the
  exported votes only, with whether each set counts in the arena's tallies. The judges'
  free-text notes are never exported (they may hold personal data).
- **Follow-ups.** `follow_ups` holds what the submitter said to both sides while a
  battle ran, with the step at which each side received it, redacted as the
  instructions are. An agent's question and the submitter's answer are steps (`steps`,
  with `--with-steps`), the answer redacted the same way.
- **Instructions redacted.** Personal data in a task's instruction (names, e-mail
  addresses, phone numbers, street addresses, credentials, ...) is replaced by
  placeholders such as `<PERSON_1>` (Microsoft Presidio with spaCy's small English
  model, and patterns of the arena's own). Redaction misses some of it and replaces
  some words that are not personal data (docs/environments.md, "Limits").
- **Never exported:** judges' ids, names or emails, submitters' or teams' identities,
  the content or names of task attachments (only their number), operators' identities
  and notes, sandbox internals (errors, egress logs, storage paths).

## Pseudonymisation

A judge appears as `j_` and 20 hex digits: an HMAC-SHA256 of the account id under a key
derived from the arena's secret key. The same judge has the same pseudonym in every
export made with the same key (the same `pseudonym_key_id`), so votes can be grouped by
judge; without the key nobody can tell whose they are. Rotating the arena's secret key
changes every pseudonym.

## Known biases and limits

- The tasks are what the arena's submitters chose to ask: not a sample of any
  population of tasks. Categories are assigned by a classifier (docs/classifier.md).
- Judges are volunteers of the crowd, weighted by a trust ω learned from agreement on
  redundancy battles; early judges on probation count at most 0.5.
- Consent and the delay remove battles non-randomly (submitters who did not accept the
  newest terms; the most recent days), so this export is **not** always the exact input
  of the published board (see the round trip below).
- Self-judged battles (`decision_source` = submitter) rest on the submitting team's own
  blind votes; imported battles (`import`) on historical judgments from a file.
- Battles excluded by the identity-leak scan (`named_model`) or for outages are not
  rated: the rated set is conditioned on both sides producing a trajectory.

## Reproducing the published board

`ratings` is the published board (the newest refit snapshot). Run in this directory,
the offline fitter reads every seed and setting the refit used from `manifest.json`
(`round_trip.fit`), the agents' order from `ratings` (`fit_index`) and the clusters'
from `battles` (`cluster_index`), and prints the board's ratings, intervals and rank
bands bit for bit:

```sh
{rt["command"]}
```

The refit's settings (fit format {fit["format"]}): ridge {fit["ridge"]!r}, R0 {fit["r0"]!r},
n0 (provisional below) {fit["min_battles"]}, {fit["bootstrap_replicates"]} bootstrap
replicates resampling {fit["bootstrap_unit"]} with seed {fit["seed"]}, the {fit["interval"]}
interval. Elsewhere (a copy of `battles` without the manifest), the same with flags:

```sh
{rt["explicit_command"]}
```

This export holds {rt["exported_battles"]:,} of the snapshot's {rt["snapshot_battles"]:,}
rated battles; {coverage}

## Licence

{licence or NO_LICENCE}
"""
