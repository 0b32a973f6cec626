"""The page as text reaches the agents that ask for it, and only them: built-ins that
read pages, any agent with params {"observe": "page_text"}; the scaffold puts it in the
model's prompt (the newest one only); the remote protocol carries it as an optional,
published field."""

import json

import jsonschema
import pytest

from agents.pageview import PAGE_TEXT_HEADER, page_as_text
from agents.policies import Observation, observes_page
from agents.protocol import observation_schema
from agents.providers.openai_client import OpenAICompatibleClient
from agents.remote import RemotePolicy
from agents.scaffold import ScaffoldPolicy
from sandboxes.pagetext import page_text_bounded
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_providers import FakeOpenAI
from tests.agents.fake_providers import tool_call as call

PAGE = page_text_bounded(
    {
        "url": "http://demo.arena.test/directory/",
        "title": "Directory - Demo Town Portal",
        "text": "Directory\nSearch\nName\tDistrict\tPhone\nRiverside Library\tRiverside\t555-0142",
        "elements": [
            {"role": "searchbox", "name": "Search", "field": "q", "value": "", "x": 300, "y": 250},
            {"role": "button", "name": "Search", "x": 520, "y": 250},
            {
                "role": "link",
                "name": "Contact",
                "href": "http://demo.arena.test/contact/",
                "offscreen": "below",
            },
        ],
        "elements_total": 3,
        "viewport": {"width": 1280, "height": 713, "left": 0, "top": 87},
    },
    width=1280,
    height=800,
)


def observe(step: int, page: dict | None) -> Observation:
    return Observation(
        step=step, instruction="Find the phone of Riverside Library", start_url="",
        last_result=None if step == 0 else {"ok": True, "tool": "click"},
        steps_left=10 - step, seconds_left=100.0, page=page,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "policy", "params", "expected"),
    [
        ("builtin", "rulebook", {}, True),
        ("builtin", "surveyor", {}, True),
        ("builtin", "idle", {}, False),  # it never reads the page: it pays nothing
        ("builtin", "no-such-policy", {}, False),
        ("scaffold", "", {"observe": "page_text"}, True),
        ("remote", "", {"observe": "page_text", "endpoint": "http://x.test/"}, True),
        ("scaffold", "", {}, False),
        ("scaffold", "", {"observe": "screenshot"}, False),
        ("remote", "", None, False),
    ],
)
def test_who_gets_the_page_as_text(kind, policy, params, expected):
    assert observes_page(kind=kind, builtin_policy=policy, params=params) is expected


def test_the_rendering_names_every_element_with_its_click_point():
    text = page_as_text(PAGE)

    assert text.startswith(PAGE_TEXT_HEADER)
    assert "URL: http://demo.arena.test/directory/" in text
    assert "Riverside Library\tRiverside\t555-0142" in text
    assert "[0] searchbox 'Search' field='q' at (300, 250)" in text
    assert "[1] button 'Search' at (520, 250)" in text
    assert "[2] link 'Contact' href='http://demo.arena.test/contact/' off screen (below" in text


def test_the_scaffold_shows_the_newest_page_text_only():
    with FakeOpenAI(policy=lambda request: call("click", {"x": 300, "y": 250})) as fake:
        client = OpenAICompatibleClient(
            "local-model", base_url=fake.base_url, max_retries=0, outbound=loopback_outbound()
        )
        policy = ScaffoldPolicy(client=client)
        for step in range(3):
            policy.next_action(observe(step, PAGE))
        without = ScaffoldPolicy(client=client)
        without.next_action(observe(0, None))
        sent = [json.dumps(r.json) for r in fake.requests]

    assert [body.count("The page as text") for body in sent] == [1, 1, 1, 0]
    assert [body.count("an older page text was omitted") for body in sent] == [0, 1, 2, 0]
    assert "at (300, 250)" in sent[2]


def test_the_remote_observation_carries_the_page_only_when_asked():
    policy = RemotePolicy(
        "http://127.0.0.1:9/", "secret", session="s" * 16, outbound=loopback_outbound()
    )
    validator = jsonschema.Draft202012Validator(observation_schema())

    asked = json.loads(policy.request_body(observe(1, PAGE)))
    plain = json.loads(policy.request_body(observe(1, None)))

    validator.validate(asked)
    validator.validate(plain)
    assert asked["page"] == PAGE and "page" not in plain
    broken = {**asked, "page": {**PAGE, "elements": [{"role": "link"}]}}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)
