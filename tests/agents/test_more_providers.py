"""OpenRouter and Gemini through the registry (their own key and base-URL variables, the
arena's key never to an agent's URL), and model listing for 003's random selection —
on the real SDKs against the fake servers on 127.0.0.1."""

import pytest

from agents.providers.base import ProviderError, Text, Turn
from agents.providers.gemini_client import GeminiClient
from agents.providers.openai_client import OPENROUTER_URL, OpenAIClient, OpenRouterClient
from agents.providers.registry import ProviderDefaults, client_for
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_providers import FakeGemini, FakeOpenAI, text

KEY = "sk-or-test-0a1b2c3d4e5f6789"
ARENA = ProviderDefaults(outbound=loopback_outbound(), max_retries=0)
ASK = [Turn("user", [Text("hi")])]


def test_openrouter_reads_its_own_key_and_base_url_variables_and_sends_max_tokens():
    with FakeOpenAI([text("hello")], api_key=KEY) as fake:
        environ = {"OPENROUTER_API_KEY": KEY, "OPENROUTER_BASE_URL": fake.base_url}
        client = client_for(
            "openrouter", "vendor/model", params={}, defaults=ARENA, environ=environ
        )
        reply = client.complete(system="", turns=ASK, tools=[], max_tokens=77)
    assert isinstance(client, OpenRouterClient) and reply.text == "hello"
    body = fake.requests[0].json
    assert body["max_tokens"] == 77 and body["model"] == "vendor/model"
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_openrouter_defaults_to_its_public_url():
    client = OpenRouterClient("vendor/model", KEY, outbound=loopback_outbound())
    assert client.base_url == OPENROUTER_URL
    client.close()


def test_gemini_reads_its_own_key_and_base_url_variables():
    with FakeGemini([text("ciao")], api_key="gm-key-0123456789", models=("gemini-x",)) as fake:
        environ = {"GEMINI_API_KEY": "gm-key-0123456789", "GEMINI_BASE_URL": fake.base_url}
        client = client_for("gemini", "gemini-x", params={}, defaults=ARENA, environ=environ)
        reply = client.complete(system="", turns=ASK, tools=[], max_tokens=64)
    assert isinstance(client, GeminiClient) and reply.text == "ciao"


@pytest.mark.parametrize(
    ("provider", "params", "message"),
    [
        ("gemini", {}, "set GEMINI_API_KEY"),
        ("openrouter", {}, "set OPENROUTER_API_KEY"),
        ("gemini", {"base_url": "http://evil.test"}, "must name its own key variable"),
        (
            "openai_compatible",
            {"base_url": "http://evil.test", "api_key_env": "OPENROUTER_API_KEY"},
            "cannot use the arena's OPENROUTER_API_KEY",
        ),
        (
            "openai_compatible",
            {"base_url": "http://evil.test", "api_key_env": "GEMINI_API_KEY"},
            "cannot use the arena's GEMINI_API_KEY",
        ),
    ],
)
def test_the_new_keys_are_refused_where_the_old_ones_are(provider, params, message):
    with pytest.raises(ProviderError, match=message):
        client_for(provider, "m", params=params, defaults=ARENA, environ={})


def test_openai_and_openrouter_list_their_models_sorted_and_unique():
    sleeps: list[float] = []
    with FakeOpenAI(api_key=KEY, models=("b-model", "a-model", "a-model")) as fake:
        for cls in (OpenAIClient, OpenRouterClient):
            client = cls("x", KEY, fake.base_url, outbound=loopback_outbound(), sleep=sleeps.append)
            assert client.list_models() == ["a-model", "b-model"]
    assert [r.path for r in fake.requests] == ["/v1/models", "/v1/models"]


def test_a_model_list_with_a_bad_key_is_refused_without_the_key_in_the_message():
    with FakeOpenAI(api_key=KEY) as fake:
        client = OpenAIClient(
            "x", "sk-wrong-key-abcdef012345", fake.base_url, outbound=loopback_outbound()
        )
        with pytest.raises(ProviderError) as error:
            client.list_models()
    assert error.value.status == 401 and "sk-wrong-key-abcdef012345" not in str(error.value)
