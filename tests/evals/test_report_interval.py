"""The audit report says which method made the rating bounds (issue 38): the method's
name, its plain sentence and its settings, read from the record's ``run.interval`` — and
a record saved before the record named it (no ``run.interval``) is said to carry the
percentile bootstrap's bounds."""

import copy
import json

from evals.report import audit_report_from_file, audit_report_html
from ratings.task_bootstrap import METHOD, METHOD_NAME, METHOD_SENTENCE
from tests.evals.test_report import Page, rr_record


def section(html: str, name: str) -> str:
    start = html.index(f'<section id="{name}">')
    return html[start : html.index("</section>", start)]


def test_the_report_names_the_method_and_its_settings():
    record = rr_record()
    interval = record["run"]["interval"]
    assert (interval["method"], interval["name"]) == (METHOD, METHOD_NAME)
    # numbers the report must read, not recompute: altered here
    interval.update(effective_clusters=7.25, degrees_of_freedom=6.25, critical_value=9.876)
    html = audit_report_from_file(json.dumps(record).encode())  # the schema accepts it
    words = Page(section(html, "bootstrap")).words
    assert f"Bounds made by the {METHOD_NAME} ( {METHOD} )." in words  # code: its own text
    assert " ".join(METHOD_SENTENCE.split()) in words
    assert "effective tasks G* 7.25 degrees of freedom 6.25 critical value t 9.876" in words
    assert f"tasks (clusters) {interval['clusters']}" in words
    assert "bootstrap_seed 5" in words  # the resampling check's seed and replicates
    assert f"by the {METHOD_NAME}" in Page(section(html, "ratings")).words


def test_a_record_from_before_names_the_percentile_bootstrap():
    record = copy.deepcopy(rr_record())
    del record["run"]["interval"]
    words = Page(audit_report_html(record)).words
    assert "Bounds made by the task-clustered percentile bootstrap" in words
    assert METHOD_NAME not in words
