"""Provider API formats: a context as each API's request, a response as messages.

The payloads below are written in each provider's documented shape (Anthropic Messages,
OpenAI Chat Completions, OpenAI Responses); nothing is fetched.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiondb import InvalidInputError, Message, SessionDBError, SessionStore
from sessiondb.formats import MISSING_RESULT
from sessiondb.formats.anthropic import AnthropicRequest, from_anthropic, to_anthropic
from sessiondb.formats.openai_chat import from_openai_chat, to_openai_chat
from sessiondb.formats.openai_responses import (
    ResponsesRequest,
    from_openai_responses,
    to_openai_responses,
)
from sessiondb.models import wire_message_error

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
    "AAAABJRU5ErkJggg=="
)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def result(call_id: str, text: str, *, error: bool = False) -> Message:
    data: dict[str, Any] = {"role": "toolResult", "toolCallId": call_id, "content": text}
    if error:
        data["isError"] = True
    return Message.model_validate(data)


def assistant(*blocks: dict[str, Any], **extra: Any) -> Message:
    return Message.model_validate({"role": "assistant", "content": list(blocks), **extra})


def call(call_id: str, name: str = "get_weather", **arguments: Any) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}


# -- Anthropic Messages API -------------------------------------------------------------

ANTHROPIC_TOOL_USE = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {
            "type": "thinking",
            "thinking": "The user wants the weather in Paris; I should call the tool.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
        },
        {
            "type": "redacted_thinking",
            "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE",
        },
        {"type": "text", "text": "I'll check the current weather in Paris."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "Paris, France", "unit": "celsius"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 472,
        "cache_creation_input_tokens": 1024,
        "cache_read_input_tokens": 2048,
        "output_tokens": 91,
        "service_tier": "standard",
    },
}

ANTHROPIC_TEXT = {
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "It is 15 °C and sunny in Paris."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 610, "output_tokens": 14},
}


def test_anthropic_response_becomes_one_assistant_message_with_usage() -> None:
    (message,) = from_anthropic(ANTHROPIC_TOOL_USE)
    wire = message.to_wire()
    assert wire["role"] == "assistant"
    assert [b["type"] for b in wire["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
        "toolCall",
    ]
    assert wire["content"][0]["signature"] == ANTHROPIC_TOOL_USE["content"][0]["signature"]
    assert wire["content"][3] == {
        "type": "toolCall",
        "id": "toolu_01A09q90qw90lq917835lq9",
        "name": "get_weather",
        "arguments": {"location": "Paris, France", "unit": "celsius"},
    }
    assert wire["usage"] == {
        "input": 472,
        "output": 91,
        "cacheRead": 2048,
        "cacheWrite": 1024,
        "totalTokens": 472 + 91 + 2048 + 1024,
    }
    assert wire["api"] == "anthropic-messages"
    assert wire["model"] == "claude-sonnet-4-5-20250929"
    assert wire["responseId"] == "msg_01Aq9w938a90dw8q"
    assert wire["stopReason"] == "tool_use"
    assert wire_message_error(wire) is None


def test_anthropic_round_trip_gives_the_request_back() -> None:
    context = [
        user("What's the weather in Paris?"),
        *from_anthropic(ANTHROPIC_TOOL_USE),
        result("toolu_01A09q90qw90lq917835lq9", "15 degrees, sunny"),
        *from_anthropic(ANTHROPIC_TEXT),
        user("Thanks!"),
    ]
    request = to_anthropic(context)
    assert request == AnthropicRequest(
        system=None,
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "What's the weather in Paris?"}]},
            {"role": "assistant", "content": ANTHROPIC_TOOL_USE["content"]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                        "content": [{"type": "text", "text": "15 degrees, sunny"}],
                    }
                ],
            },
            {"role": "assistant", "content": ANTHROPIC_TEXT["content"]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
        ],
    )
    assert request.kwargs() == {"messages": request.messages}


def test_anthropic_merges_parallel_results_and_the_next_user_turn_into_one_message() -> None:
    context = [
        user("Weather in Paris and Rome?"),
        assistant(call("a", location="Paris"), call("b", location="Rome")),
        result("a", "15"),
        result("b", "boom", error=True),
        user("and tomorrow?"),
    ]
    messages = to_anthropic(context).messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "15"}]},
        {
            "type": "tool_result",
            "tool_use_id": "b",
            "content": [{"type": "text", "text": "boom"}],
            "is_error": True,
        },
        {"type": "text", "text": "and tomorrow?"},
    ]


def test_pairing_moves_late_results_up_and_fills_missing_ones() -> None:
    context = [
        user("go"),
        assistant(call("a"), call("b")),
        user("(the user typed while the tools ran)"),
        result("b", "second"),
        result("a", "first"),
    ]
    chat = to_openai_chat(context)
    assert [(m["role"], m.get("tool_call_id")) for m in chat] == [
        ("user", None),
        ("assistant", None),
        ("tool", "a"),
        ("tool", "b"),
        ("user", None),
    ]
    # A call whose result was never stored gets an error result: every API needs one.
    dangling = to_anthropic([user("go"), assistant(call("a"))]).messages
    assert dangling[-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "a",
                "content": [{"type": "text", "text": MISSING_RESULT}],
                "is_error": True,
            }
        ],
    }
    items = to_openai_responses([user("go"), assistant(call("a"))]).input
    assert items[-1] == {"type": "function_call_output", "call_id": "a", "output": MISSING_RESULT}


@pytest.mark.parametrize("convert", [to_anthropic, to_openai_chat, to_openai_responses])
def test_a_result_without_its_call_is_refused(convert: Any) -> None:
    with pytest.raises(InvalidInputError, match="answers no tool call"):
        convert([user("hi"), result("nowhere", "x")])


def test_anthropic_keeps_only_thinking_it_signed() -> None:
    (responses,) = from_openai_responses(RESPONSES_TOOL_CALL)
    context = [
        user("q"),
        assistant(
            {"type": "thinking", "thinking": "unsigned"},
            {"type": "thinking", "thinking": "signed", "signature": "sig"},
            {"type": "text", "text": "a"},
        ),
        user("q2"),
        responses,
        result("call_12345xyz", "15"),
    ]
    messages = to_anthropic(context).messages
    assert messages[1]["content"] == [
        {"type": "thinking", "thinking": "signed", "signature": "sig"},
        {"type": "text", "text": "a"},
    ]
    # The Responses message's reasoning means nothing to Anthropic; its call stays.
    assert messages[3]["content"] == [
        {
            "type": "tool_use",
            "id": "call_12345xyz",
            "name": "get_weather",
            "input": {"location": "Paris, France"},
        }
    ]


def test_anthropic_images_in_user_messages_and_tool_results() -> None:
    image = {"type": "image", "data": PNG, "mimeType": "image/png"}
    source = {"type": "base64", "media_type": "image/png", "data": PNG}
    context = [
        Message.model_validate(
            {"role": "user", "content": [{"type": "text", "text": "what?"}, image]}
        ),
        assistant(call("s", "screenshot")),
        Message.model_validate({"role": "toolResult", "toolCallId": "s", "content": [image]}),
    ]
    messages = to_anthropic(context).messages
    assert messages[0]["content"][1] == {"type": "image", "source": source}
    assert messages[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "s",
            "content": [{"type": "image", "source": source}],
        }
    ]


# -- OpenAI Chat Completions ------------------------------------------------------------

CHAT_TOOL_CALLS = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_abc123",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"location":"Paris, France"}',
                        },
                    },
                    {
                        "id": "call_def456",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"location": "Rome"}'},
                    },
                ],
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 82,
        "completion_tokens": 17,
        "total_tokens": 99,
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    },
    "service_tier": "default",
    "system_fingerprint": "fp_fc9f1d7035",
}

CHAT_TEXT = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeH",
    "object": "chat.completion",
    "created": 1741570284,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Paris: 15 °C. Rome: 21 °C.",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 140, "completion_tokens": 12, "total_tokens": 152},
}


def test_chat_completion_becomes_messages_with_usage() -> None:
    (message,) = from_openai_chat(CHAT_TOOL_CALLS)
    wire = message.to_wire()
    assert wire["content"] == [
        call("call_abc123", location="Paris, France"),
        # Not compact JSON: the model's own text is kept, to go back byte for byte.
        {**call("call_def456", location="Rome"), "argumentsText": '{"location": "Rome"}'},
    ]
    assert wire["usage"] == {
        "input": 18,
        "output": 17,
        "cacheRead": 64,
        "cacheWrite": 0,
        "totalTokens": 99,
    }
    assert (wire["api"], wire["stopReason"], wire["responseId"]) == (
        "openai-completions",
        "tool_calls",
        "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    )
    assert wire_message_error(wire) is None


def test_chat_round_trip_gives_the_request_back() -> None:
    context = [
        user("Weather in Paris and Rome?"),
        *from_openai_chat(CHAT_TOOL_CALLS),
        result("call_abc123", "15"),
        result("call_def456", "21"),
        *from_openai_chat(CHAT_TEXT),
    ]
    sent = CHAT_TOOL_CALLS["choices"][0]["message"]  # type: ignore[index]
    assert to_openai_chat(context, "You are terse.") == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": sent["tool_calls"]},
        {"role": "tool", "tool_call_id": "call_abc123", "content": "15"},
        {"role": "tool", "tool_call_id": "call_def456", "content": "21"},
        {"role": "assistant", "content": "Paris: 15 °C. Rome: 21 °C."},
    ]
    assert to_openai_chat(context, "x", system_role="developer")[0] == {
        "role": "developer",
        "content": "x",
    }


def test_chat_drops_thinking_and_converts_images() -> None:
    image = {"type": "image", "data": PNG, "mimeType": "image/png"}
    url = {"url": f"data:image/png;base64,{PNG}"}
    (anthropic,) = from_anthropic(ANTHROPIC_TOOL_USE)
    context = [
        Message.model_validate(
            {"role": "user", "content": [{"type": "text", "text": "see"}, image]}
        ),
        anthropic,
        Message.model_validate(
            {
                "role": "toolResult",
                "toolCallId": "toolu_01A09q90qw90lq917835lq9",
                "content": [{"type": "text", "text": "chart:"}, image],
            }
        ),
    ]
    messages = to_openai_chat(context)
    assert messages[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": url}],
    }
    # Thinking and redacted thinking are gone; text and the call remain.
    assert messages[1] == {
        "role": "assistant",
        "content": "I'll check the current weather in Paris.",
        "tool_calls": [
            {
                "id": "toolu_01A09q90qw90lq917835lq9",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": '{"location":"Paris, France","unit":"celsius"}',
                },
            }
        ],
    }
    # A tool message holds text only: the image follows the results as a user message.
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "toolu_01A09q90qw90lq917835lq9",
        "content": "chart:",
    }
    assert messages[3]["role"] == "user"
    assert messages[3]["content"][1:] == [{"type": "image_url", "image_url": url}]


def test_chat_reasoning_content_and_refusal() -> None:
    response = copy.deepcopy(CHAT_TEXT)
    message = response["choices"][0]["message"]  # type: ignore[index]
    message.update(content=None, refusal="I can't help with that.", reasoning_content="hmm")
    (stored,) = from_openai_chat(response)
    assert stored.to_wire()["content"] == [
        {"type": "thinking", "thinking": "hmm"},
        {"type": "text", "text": "I can't help with that.", "refusal": True},
    ]
    assert to_openai_chat([user("x"), stored])[1] == {
        "role": "assistant",
        "content": None,
        "refusal": "I can't help with that.",
    }


def test_chat_arguments_that_are_not_json_go_back_as_written() -> None:
    response = copy.deepcopy(CHAT_TOOL_CALLS)
    calls = response["choices"][0]["message"]["tool_calls"]  # type: ignore[index]
    calls[0]["function"]["arguments"] = '{"location": "Par'
    (stored,) = from_openai_chat(response)
    assert stored.tool_calls()[0].arguments == {}
    sent = to_openai_chat(
        [user("x"), stored, result("call_abc123", "?"), result("call_def456", "?")]
    )
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == '{"location": "Par'


# -- OpenAI Responses -------------------------------------------------------------------

REASONING_ITEM = {
    "type": "reasoning",
    "id": "rs_6820f383d7c08191846711c5df8233bc0ac5ba57aafcbac7",
    "summary": [
        {"type": "summary_text", "text": "**Checking the weather**\n\nI need the forecast."},
        {"type": "summary_text", "text": "**Calling the tool**"},
    ],
    "encrypted_content": "gAAAAABoISQ24OyVRYbkYfukWjIrBJmtyl1Pnbd",
}

RESPONSES_TOOL_CALL = {
    "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
    "object": "response",
    "created_at": 1741476542,
    "status": "completed",
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "model": "o4-mini-2025-04-16",
    "output": [
        REASONING_ITEM,
        {
            "type": "function_call",
            "id": "fc_12345xyz",
            "call_id": "call_12345xyz",
            "name": "get_weather",
            "arguments": '{"location":"Paris, France"}',
            "status": "completed",
        },
    ],
    "parallel_tool_calls": True,
    "usage": {
        "input_tokens": 136,
        "input_tokens_details": {"cached_tokens": 100},
        "output_tokens": 87,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 223,
    },
}

RESPONSES_TEXT = {
    "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41",
    "object": "response",
    "created_at": 1741476777,
    "status": "completed",
    "error": None,
    "model": "o4-mini-2025-04-16",
    "output": [
        {
            "type": "web_search_call",
            "id": "ws_67ccf18f64008190a39b619f4c8455ef087f",
            "status": "completed",
        },
        {
            "type": "message",
            "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41",
            "status": "completed",
            "role": "assistant",
            "content": [
                {
                    "type": "output_text",
                    "text": "It is 15 °C in Paris [1].",
                    "annotations": [
                        {
                            "type": "url_citation",
                            "start_index": 21,
                            "end_index": 24,
                            "url": "https://weather.example/paris",
                            "title": "Paris weather",
                        }
                    ],
                }
            ],
        },
    ],
    "usage": {"input_tokens": 300, "output_tokens": 20, "total_tokens": 320},
}


def test_responses_output_becomes_one_message_with_usage() -> None:
    (message,) = from_openai_responses(RESPONSES_TOOL_CALL)
    wire = message.to_wire()
    thinking, tool_call = wire["content"]
    assert thinking["type"] == "thinking"
    assert (
        thinking["thinking"]
        == "**Checking the weather**\n\nI need the forecast.\n\n**Calling the tool**"
    )
    assert thinking["responsesItem"] == REASONING_ITEM
    assert tool_call == {**call("call_12345xyz", location="Paris, France"), "itemId": "fc_12345xyz"}
    assert wire["usage"] == {
        "input": 36,
        "output": 87,
        "cacheRead": 100,
        "cacheWrite": 0,
        "totalTokens": 223,
    }
    assert (wire["api"], wire["stopReason"]) == ("openai-responses", "completed")
    assert wire_message_error(wire) is None


def test_responses_round_trip_gives_the_items_back() -> None:
    context = [
        user("Weather in Paris?"),
        *from_openai_responses(RESPONSES_TOOL_CALL),
        result("call_12345xyz", "15 degrees"),
        *from_openai_responses(RESPONSES_TEXT),
    ]
    request = to_openai_responses(context, "Be brief.")
    assert request == ResponsesRequest(
        instructions="Be brief.",
        input=[
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Weather in Paris?"}],
            },
            *RESPONSES_TOOL_CALL["output"],  # type: ignore[misc]
            {"type": "function_call_output", "call_id": "call_12345xyz", "output": "15 degrees"},
            *RESPONSES_TEXT["output"],  # type: ignore[misc]
        ],
    )
    assert request.kwargs() == {"input": request.input, "instructions": "Be brief."}
    developer = to_openai_responses(context, "Be brief.", system_as="developer")
    assert developer.instructions is None
    assert developer.input[0] == {"type": "message", "role": "developer", "content": "Be brief."}


def test_responses_drops_other_providers_thinking_and_converts_images() -> None:
    image = {"type": "image", "data": PNG, "mimeType": "image/png"}
    part = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"}
    context = [
        Message.model_validate({"role": "user", "content": [image]}),
        *from_anthropic(ANTHROPIC_TOOL_USE),
        Message.model_validate(
            {
                "role": "toolResult",
                "toolCallId": "toolu_01A09q90qw90lq917835lq9",
                "content": [image],
            }
        ),
    ]
    items = to_openai_responses(context).input
    assert items == [
        {"type": "message", "role": "user", "content": [part]},
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {
                    "type": "output_text",
                    "text": "I'll check the current weather in Paris.",
                    "annotations": [],
                }
            ],
        },
        {
            "type": "function_call",
            "call_id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "arguments": '{"location":"Paris, France","unit":"celsius"}',
        },
        {
            "type": "function_call_output",
            "call_id": "toolu_01A09q90qw90lq917835lq9",
            "output": [part],
        },
    ]


# -- through a store: compaction summary, system prompt override ------------------------


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_context_with_a_compaction_summary_and_a_system_prompt_override(
    store: SessionStore,
) -> None:
    info = await store.create_session(system_prompt_override="You are a weather bot.")
    await store.append(info.id, [user("Hello"), *from_anthropic(ANTHROPIC_TEXT)])
    records = await store.append(
        info.id,
        [
            user("Weather in Paris?"),
            *from_anthropic(ANTHROPIC_TOOL_USE),
            result("toolu_01A09q90qw90lq917835lq9", "15 degrees"),
        ],
    )
    await store.append_compaction(
        info.id, summary="Greeted the user.", first_kept_seq=records[0].seq
    )
    context = await store.context(info.id)
    info = await store.get_session(info.id)
    summary = context[0].text()

    anthropic = to_anthropic(context, info.system_prompt_override)
    assert anthropic.system == "You are a weather bot."
    # The summary is a user message; the user turn after it joins it in one message.
    assert anthropic.messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": summary},
            {"type": "text", "text": "Weather in Paris?"},
        ],
    }
    assert anthropic.messages[1] == {"role": "assistant", "content": ANTHROPIC_TOOL_USE["content"]}
    assert anthropic.messages[2]["content"][0]["type"] == "tool_result"
    assert len(anthropic.messages) == 3

    chat = to_openai_chat(context, info.system_prompt_override)
    assert chat[:3] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": summary},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert "Greeted the user." in summary

    responses = to_openai_responses(context, info.system_prompt_override)
    assert responses.instructions == "You are a weather bot."
    assert responses.input[0]["content"] == [{"type": "input_text", "text": summary}]

    # What from_* gives is stored as it is: usage reaches the session's metrics.
    assert info.metrics.input_tokens == 610 + 472
    assert info.metrics.cache_read_tokens == 2048


# -- malformed payloads -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("convert", "payload", "match"),
    [
        (from_anthropic, [], "response must be an object"),
        (from_anthropic, {"content": "hi"}, "response.content must be an array"),
        (from_anthropic, {"content": [{"type": "tool_use", "id": 3}]}, r"content\[0\]\.id"),
        (
            from_anthropic,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "Overloaded",
        ),
        (from_anthropic, {"content": [], "usage": {"input_tokens": -1}}, "non-negative"),
        (from_openai_chat, {"choices": []}, "no choice 0"),
        (
            from_openai_chat,
            {"choices": [{"message": {"tool_calls": [{"function": {"name": "f"}}]}}]},
            "arguments must be a string",
        ),
        (from_openai_chat, {"error": {"message": "Rate limit"}}, "Rate limit"),
        (from_openai_responses, {"output": None}, "response.output must be an array"),
        (
            from_openai_responses,
            {"status": "failed", "error": {"message": "server_error"}, "output": []},
            "server_error",
        ),
        (
            from_openai_responses,
            {"output": [{"type": "function_call", "call_id": "c", "name": "f"}]},
            "arguments must be a string",
        ),
    ],
)
def test_malformed_responses_raise_invalid_input(convert: Any, payload: Any, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        convert(payload)


@pytest.mark.parametrize("convert", [to_anthropic, to_openai_chat, to_openai_responses])
def test_to_refuses_what_is_not_a_message_list(convert: Any) -> None:
    with pytest.raises(InvalidInputError):
        convert(user("a single message, not a list"))
    with pytest.raises(InvalidInputError, match=r"messages\[1\]"):
        convert([user("ok"), {"role": "system", "content": "x"}])
    with pytest.raises(InvalidInputError, match="system_prompt"):
        convert([user("ok")], 42)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(_paths(item, (*prefix, index)))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    value = copy.deepcopy(value)
    holder = value
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = new
    return value


def mutations(example: dict[str, Any]) -> st.SearchStrategy[Any]:
    """``example`` with one value anywhere in it replaced by arbitrary JSON."""
    return st.tuples(st.sampled_from(_paths(example)), json_values).map(
        lambda change: _replace(example, *change)
    )


CASES = [
    (from_anthropic, to_anthropic, [ANTHROPIC_TOOL_USE, ANTHROPIC_TEXT]),
    (from_openai_chat, to_openai_chat, [CHAT_TOOL_CALLS, CHAT_TEXT]),
    (from_openai_responses, to_openai_responses, [RESPONSES_TOOL_CALL, RESPONSES_TEXT]),
]


@pytest.mark.parametrize(
    ("read", "write", "examples"), CASES, ids=lambda c: getattr(c, "__name__", "")
)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fuzz_from_raises_only_invalid_input(
    read: Any, write: Any, examples: Any, data: Any
) -> None:
    payload = data.draw(st.one_of(json_values, *(mutations(e) for e in examples)), label="payload")
    try:
        messages = read(payload)
    except InvalidInputError:
        return
    except SessionDBError as exc:  # pragma: no cover - reported as a failure below
        pytest.fail(f"not an InvalidInputError: {exc!r}")
    for message in messages:
        assert isinstance(message, Message)
        assert wire_message_error(message.to_wire()) is None  # the store takes it as it is
    write([user("q"), *messages])  # and it converts back


# -- sessions imported from pi files ----------------------------------------------------


def test_pi_spellings_of_thinking_go_back_to_their_api() -> None:
    """pi keeps Anthropic's signature as ``thinkingSignature`` (a redacted block as a
    ``redacted`` thinking block) and a Responses reasoning item as JSON text there."""
    anthropic = assistant(
        {"type": "thinking", "thinking": "hm", "thinkingSignature": "sig-1"},
        {
            "type": "thinking",
            "thinking": "[redacted]",
            "thinkingSignature": "opaque",
            "redacted": True,
        },
        {"type": "text", "text": "done"},
        api="anthropic-messages",
        provider="anthropic",
    )
    assert to_anthropic([user("q"), anthropic]).messages[1]["content"] == [
        {"type": "thinking", "thinking": "hm", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "done"},
    ]
    responses = assistant(
        {"type": "thinking", "thinking": "s", "thinkingSignature": json.dumps(REASONING_ITEM)},
        {"type": "text", "text": "done"},
        api="openai-responses",
    )
    assert to_openai_responses([user("q"), responses]).input[1] == REASONING_ITEM
    # Each API's signature means nothing to the other.
    assert to_anthropic([user("q"), responses]).messages[1]["content"] == [
        {"type": "text", "text": "done"}
    ]
    assert [i["type"] for i in to_openai_responses([user("q"), anthropic]).input] == [
        "message",
        "message",
    ]


# -- pairing, for any conversation ------------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """User turns, assistant turns with parallel calls, their results in any order (some
    missing, some after a user message), thinking with and without signatures, images."""
    out: list[Message] = [user("start")]
    calls = 0
    for _ in range(draw(st.integers(0, 5))):
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            thinking = {"type": "thinking", "thinking": "t"}
            if draw(st.booleans()):
                thinking["signature"] = "sig"
            blocks.append(thinking)
        if draw(st.booleans()):
            blocks.append({"type": "text", "text": draw(st.sampled_from(["", "ok", "a b"]))})
        ids = [f"c{calls + i}" for i in range(draw(st.integers(0, 3)))]
        calls += len(ids)
        blocks.extend(call(i) for i in ids)
        out.append(assistant(*blocks))
        answered = draw(st.permutations(ids))[: draw(st.integers(0, len(ids)))]
        late = draw(st.booleans())
        if late:
            out.append(user("while the tools ran"))
        for call_id in answered:
            content: list[dict[str, Any]] = [{"type": "text", "text": "r"}]
            if draw(st.booleans()):
                content.append({"type": "image", "data": PNG, "mimeType": "image/png"})
            out.append(
                Message.model_validate(
                    {"role": "toolResult", "toolCallId": call_id, "content": content}
                )
            )
        if not late and draw(st.booleans()):
            out.append(user("next"))
    return out


def _call_ids(message: Message) -> list[str]:
    return [c.id for c in message.tool_calls()]


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_every_call_is_answered_right_after_it(context: list[Message]) -> None:
    expected = [i for m in context for i in _call_ids(m)]

    chat = to_openai_chat(context)
    seen: list[str] = []
    for index, message in enumerate(chat):
        ids = [c["id"] for c in message.get("tool_calls", [])]
        if ids:
            following = chat[index + 1 : index + 1 + len(ids)]
            assert [(m["role"], m.get("tool_call_id")) for m in following] == [
                ("tool", i) for i in ids
            ]
            seen.extend(ids)
    assert seen == expected
    assert sum(m["role"] == "tool" for m in chat) == len(expected)

    messages = to_anthropic(context).messages
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2)
    assert all(m["content"] for m in messages)
    seen = []
    for index, message in enumerate(messages):
        ids = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"]
        if message["role"] == "user":
            # Results open the user message they are in, and answer the turn before.
            assert [b["type"] for b in message["content"][: len(results)]] == ["tool_result"] * len(
                results
            )
            previous = messages[index - 1]["content"] if index else []
            assert results == [b["id"] for b in previous if b["type"] == "tool_use"]
        assert all(b["type"] != "thinking" or b.get("signature") for b in message["content"])
        seen.extend(ids)
    assert seen == expected

    items = to_openai_responses(context).input
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert outputs == expected
    for index, item in enumerate(items):
        if item.get("type") == "function_call":
            rest = items[index + 1 :]
            answer = next(j for j, i in enumerate(rest) if i.get("call_id") == item["call_id"])
            assert all(i.get("role") != "user" for i in rest[:answer])


def test_provider_formats_are_not_file_formats() -> None:
    from sessiondb.formats import FORMATS

    assert not {"anthropic", "openai_chat", "openai_responses"} & set(FORMATS)
    assert all("openai" not in name and "anthropic" not in name for name in FORMATS)


def test_items_the_openai_agents_adapter_stored_whole_go_back_as_stored() -> None:
    """sessiondb.integrations.openai_agents keeps each item under the message's
    ``responsesItem``: whole for reasoning and calls, with its text taken out (and
    ``responsesItemText`` saying where) for messages."""
    call_item = RESPONSES_TOOL_CALL["output"][1]  # type: ignore[index]
    web_search = RESPONSES_TEXT["output"][0]  # type: ignore[index]
    context = [
        Message.model_validate(
            {
                "role": "user",
                "content": [{"type": "text", "text": "Weather?"}],
                "responsesItem": {"role": "user", "content": None},
                "responsesItemText": "content",
            }
        ),
        assistant({"type": "thinking", "thinking": "s"}, responsesItem=REASONING_ITEM),
        assistant(call("call_12345xyz", location="Paris, France"), responsesItem=call_item),
        result("call_12345xyz", "15"),
        assistant(responsesItem=web_search),
        assistant(
            {"type": "text", "text": "15 °C"},
            responsesItem={"type": "message", "role": "assistant", "content": None},
            responsesItemText="content",
        ),
    ]
    assert to_openai_responses(context).input == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Weather?"}],
        },
        REASONING_ITEM,
        call_item,
        {"type": "function_call_output", "call_id": "call_12345xyz", "output": "15"},
        web_search,
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "15 °C", "annotations": []}],
        },
    ]


def test_a_session_the_openai_agents_adapter_wrote_gives_its_items_back() -> None:
    pytest.importorskip("agents", reason="openai-agents is not installed")
    from sessiondb.integrations.openai_agents import item_message

    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris?"},
        *RESPONSES_TOOL_CALL["output"],  # type: ignore[list-item]
        {"type": "function_call_output", "call_id": "call_12345xyz", "output": "15"},
        *RESPONSES_TEXT["output"],  # type: ignore[list-item]
    ]
    context = [Message.model_validate(item_message(item)) for item in items]
    sent = to_openai_responses(context).input
    assert sent[1:5] == items[1:5]  # reasoning, call, its output, the web search: as added
    assert sent[0] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Weather in Paris?"}],
    }
    assert sent[5]["content"][0]["text"] == "It is 15 °C in Paris [1]."
