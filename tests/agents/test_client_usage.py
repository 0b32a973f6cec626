"""Usage accounting of every provider client, through the one adapter base
(agents/providers/adapter.py): the token counts, cache tokens included, as each wire
reports them, read with the gateway's own reading (agents/gateway_usage.py) and priced
with its cache prices; against the fake servers on 127.0.0.1.

Every client means the same by its counts: ``input_tokens`` is every prompt token,
cached or not; ``cache_read_tokens`` / ``cache_write_tokens`` are those read from and
written to the provider's prompt cache."""

from typing import Any

import pytest

from agents.gateway_usage import CACHE_PRICE_FACTORS, CHAT, MESSAGES, body_usage
from agents.providers.anthropic_client import AnthropicClient
from agents.providers.anthropic_computer import AnthropicComputerUseClient
from agents.providers.base import ProviderError, Text, Turn, Usage
from agents.providers.gemini_client import GeminiClient
from agents.providers.openai_client import OpenAIClient, OpenRouterClient
from agents.providers.openai_computer import OpenAIComputerUseClient
from agents.providers.retry import Backoff
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_computer_use import FakeAnthropicComputer, FakeOpenAIResponses, Output
from tests.agents.fake_computer_use import message as output_message
from tests.agents.fake_providers import FakeAnthropic, FakeGemini, FakeOpenAI, RawJSON, Reply

KEY = "sk-test-usage-5c1e2f3a4b6d7e80"
MODEL = "usage-model"
ASK = [Turn("user", [Text("What is 17 * 23 + 4?")])]
PRICE = (3.0, 15.0)  # USD per million input / output tokens
NO_WAIT = Backoff(base_s=0.0, factor=1.0, cap_s=0.0, jitter=0.0)

# provider → (fake server, client class, CACHE_PRICE_FACTORS row the cost must use)
CHAT_CLIENTS: dict[str, tuple[type, type, str]] = {
    "anthropic": (FakeAnthropic, AnthropicClient, "anthropic"),
    "openai": (FakeOpenAI, OpenAIClient, "openai"),
    "openrouter": (FakeOpenAI, OpenRouterClient, "openai"),
    "gemini": (FakeGemini, GeminiClient, "openai"),
}


def serve(fake_class: type, script: list[Any]) -> Any:
    """A running fake of ``fake_class`` playing ``script``, knowing the test's model."""
    more = {"models": (MODEL,)} if fake_class is FakeGemini else {}
    return fake_class(script, api_key=KEY, **more)


def client_of(cls: type, fake: Any, **kwargs: Any) -> Any:
    options = {"outbound": loopback_outbound(), "backoff": NO_WAIT, "sleep": lambda s: None}
    return cls(MODEL, KEY, fake.base_url, **{**options, **kwargs})


def ask(client: Any) -> Any:
    try:
        return client.complete(system="", turns=ASK, tools=[], max_tokens=64)
    finally:
        client.close()


def priced(usage: Usage, factors: tuple[float, float]) -> float:
    """The cost worked out by hand: uncached input, writes, reads, output."""
    write, read = factors
    uncached = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
    per_in, per_out = PRICE
    return (
        uncached * per_in
        + usage.cache_write_tokens * per_in * write
        + usage.cache_read_tokens * per_in * read
        + usage.output_tokens * per_out
    ) / 1e6


@pytest.mark.parametrize("provider", list(CHAT_CLIENTS))
def test_cache_tokens_are_counted_and_priced_as_each_wire_reports_them(provider):
    fake_class, client_class, pricing = CHAT_CLIENTS[provider]
    # given a reply whose 1000 prompt tokens were 600 read from the cache and 300
    # written to it (only Anthropic reports writes)
    with serve(fake_class, [Reply(text="395", usage=(1000, 50), cache=(600, 300))]) as fake:
        reply = ask(client_of(client_class, fake, price=PRICE))

    writes = 300 if provider == "anthropic" else 0
    # then every client counts the whole prompt as input, and the cache apart
    assert reply.usage == Usage(
        input_tokens=1000,
        output_tokens=50,
        cache_read_tokens=600,
        cache_write_tokens=writes,
    )
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (600, writes)
    # and prices the cached tokens at the provider's cache price, not the input price
    assert reply.cost_usd == pytest.approx(priced(reply.usage, CACHE_PRICE_FACTORS[pricing]))
    assert reply.cost_usd < (1000 * PRICE[0] + 50 * PRICE[1]) / 1e6


def test_anthropic_cache_writes_cost_more_than_plain_input():
    # given a prompt written to the cache whole
    with serve(FakeAnthropic, [Reply(usage=(1000, 0), cache=(0, 1000), text="ok")]) as fake:
        reply = ask(client_of(AnthropicClient, fake, price=PRICE))
    # then it costs 1.25 times the input price
    assert reply.usage == Usage(1000, 0, 0, 1000)
    assert reply.cost_usd == pytest.approx(1000 * 3.0 * 1.25 / 1e6)


@pytest.mark.parametrize("provider", list(CHAT_CLIENTS))
def test_a_reply_without_cache_tokens_reports_zero_and_the_plain_price(provider):
    fake_class, client_class, _ = CHAT_CLIENTS[provider]
    with serve(fake_class, [Reply(text="395", usage=(1234, 56))]) as fake:
        reply = ask(client_of(client_class, fake, price=PRICE))
    assert reply.usage == Usage(input_tokens=1234, output_tokens=56)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (0, 0)
    assert reply.cost_usd == pytest.approx((1234 * 3.0 + 56 * 15.0) / 1e6)


def test_the_clients_read_usage_exactly_as_the_gateway_does():
    # given the same bodies the gateway relays
    anthropic_body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "usage-model",
        "content": [{"type": "text", "text": "395"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 7,
            "output_tokens": 3,
            "cache_read_input_tokens": 11,
            "cache_creation_input_tokens": 13,
        },
    }
    openai_body = {
        "id": "chatcmpl-1",
        "model": "usage-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "395"}}],
        "usage": {
            "prompt_tokens": 40,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    }
    with serve(FakeAnthropic, [RawJSON(anthropic_body)]) as fake:
        anthropic_reply = ask(client_of(AnthropicClient, fake))
    with serve(FakeOpenAI, [RawJSON(openai_body)]) as fake:
        openai_reply = ask(client_of(OpenAIClient, fake))
    # then the client's usage is the gateway's, field for field
    assert anthropic_reply.usage == body_usage(MESSAGES, anthropic_body) == Usage(31, 3, 11, 13)
    assert openai_reply.usage == body_usage(CHAT, openai_body) == Usage(40, 2, 32, 0)


@pytest.mark.parametrize(
    "bad",
    [-5, "600", True, None, 1.5, {"n": 1}],
    ids=["negative", "string", "bool", "null", "float", "object"],
)
def test_a_cache_count_that_is_not_a_count_is_zero_not_an_error(bad):
    # given servers that send nonsense where the cache counts go
    anthropic_body = {
        "id": "msg_1",
        "content": [{"type": "text", "text": "ok"}],
        "usage": {
            "input_tokens": 10,
            "output_tokens": 1,
            "cache_read_input_tokens": bad,
            "cache_creation_input_tokens": bad,
        },
    }
    openai_body = {
        "id": "c1",
        "choices": [{"message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": bad},
    }
    gemini_body = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}}],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 1,
            "cachedContentTokenCount": bad,
        },
    }
    replies = []
    for fake_class, client_class, body in (
        (FakeAnthropic, AnthropicClient, anthropic_body),
        (FakeOpenAI, OpenAIClient, openai_body),
        (FakeGemini, GeminiClient, gemini_body),
    ):
        with serve(fake_class, [RawJSON(body)]) as fake:
            replies.append(ask(client_of(client_class, fake, price=PRICE)))
    # then the reply is used, its cache counts are 0 and the cost is the plain one
    for reply in replies:
        assert reply.usage == Usage(input_tokens=10, output_tokens=1)
        assert reply.cost_usd == pytest.approx((10 * 3.0 + 1 * 15.0) / 1e6)


def test_computer_use_clients_count_cache_tokens_too():
    # given each computer-use wire reporting cache reads (and Anthropic a write)
    script = [Reply(text="Done.", usage=(900, 40), cache=(500, 100))]
    with serve(FakeAnthropicComputer, script) as fake:
        anthropic = ask(client_of(AnthropicComputerUseClient, fake, price=PRICE))
    outputs = [Output((output_message("Done."),), usage=(900, 40), cached=700)]
    with serve(FakeOpenAIResponses, outputs) as fake:
        openai = ask(client_of(OpenAIComputerUseClient, fake, price=PRICE))
    # then both count them as the chat clients do
    assert anthropic.usage == Usage(900, 40, 500, 100)
    assert anthropic.cost_usd == pytest.approx(
        priced(anthropic.usage, CACHE_PRICE_FACTORS["anthropic"])
    )
    assert openai.usage == Usage(900, 40, 700, 0)
    assert openai.cache_read_tokens == 700
    assert openai.cost_usd == pytest.approx(priced(openai.usage, CACHE_PRICE_FACTORS["openai"]))


@pytest.mark.parametrize("provider", list(CHAT_CLIENTS))
def test_a_closed_client_refuses_to_call(provider):
    fake_class, client_class, _ = CHAT_CLIENTS[provider]
    with serve(fake_class, [Reply(text="never sent")]) as fake:
        client = client_of(client_class, fake)
        client.close()
        client.close()  # twice is harmless
        # when it is asked after close
        with pytest.raises(ProviderError, match="the client is closed"):
            client.complete(system="", turns=ASK, tools=[], max_tokens=64)
        # then nothing reached the server
        assert fake.requests == []
