"""Context assembly and the tool-pair rules as plain functions: no database."""

from __future__ import annotations

import pytest

from sessiondb import Compaction, Message, jsoncodec
from sessiondb.context import (
    SUMMARY_PREFIX,
    SUMMARY_SUFFIX,
    merge_split_responses,
    pair_members,
    payload_message,
    response_groups,
    split_rows,
    splits_tool_pair,
    summary_message,
    to_messages,
    tool_call_ids,
)


def user(text: str) -> Message:
    return Message.model_validate({"role": "user", "content": text})


def assistant(text: str, calls: tuple[str, ...] = ()) -> Message:
    blocks = [{"type": "text", "text": text}]
    blocks += [{"type": "toolCall", "id": c, "name": "read", "arguments": {}} for c in calls]
    return Message.model_validate({"role": "assistant", "content": blocks})


def result(call_id: str) -> Message:
    return Message.model_validate(
        {"role": "toolResult", "toolCallId": call_id, "content": f"result {call_id}"}
    )


# -- summary markers --------------------------------------------------------------------


def test_summary_markers_are_the_specs() -> None:
    assert SUMMARY_PREFIX == (
        "The conversation history before this point was compacted into the following "
        "summary:\n<summary>\n"
    )
    assert SUMMARY_SUFFIX == "\n</summary>"


def test_summary_message_wraps_the_summary_in_a_user_message() -> None:
    message = summary_message(Compaction(summary="## Goal\nship it", first_kept_seq=7))
    assert message.role == "user"
    assert message.to_wire() == {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": "The conversation history before this point was compacted into the "
                "following summary:\n<summary>\n## Goal\nship it\n</summary>",
            }
        ],
    }


# -- assemble ---------------------------------------------------------------------------


def assemble(rows: list[tuple[int, int, str | None]]) -> tuple[int | None, list[Message]]:
    """What the store does with the context statement's rows: the head and the messages."""
    split = split_rows(rows)
    return split.head, to_messages(split)


def _payload(value: Message | Compaction) -> str:
    return jsoncodec.dumps(value.to_wire())


def test_assemble_without_rows_means_not_found() -> None:
    assert assemble([]) == (None, [])


def test_assemble_an_empty_session() -> None:
    assert assemble([(0, 0, None)]) == (0, [])


def test_assemble_messages_in_the_given_order() -> None:
    rows = [(0, 3, None), (2, 1, _payload(user("q"))), (2, 3, _payload(assistant("a", ("A",))))]
    head, messages = assemble(rows)
    assert head == 3
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].tool_calls()[0].id == "A"


def test_assemble_puts_the_summary_first() -> None:
    compaction = Compaction(summary="earlier", first_kept_seq=5)
    rows = [
        (0, 9, None),
        (1, 8, _payload(compaction)),
        (2, 5, _payload(user("kept"))),
        (2, 9, _payload(assistant("new"))),
    ]
    head, messages = assemble(rows)
    assert head == 9
    assert [m.text() for m in messages] == [
        SUMMARY_PREFIX + "earlier" + SUMMARY_SUFFIX,
        "kept",
        "new",
    ]


def test_assemble_keeps_unknown_fields_and_blocks() -> None:
    raw = '{"role":"user","content":[{"type":"audio","data":"x"}],"extraField":{"n":1}}'
    _, (message,) = assemble([(0, 1, None), (2, 1, raw)])
    assert message.to_wire() == jsoncodec.loads(raw)


def test_payload_message() -> None:
    assert payload_message('{"role":"user","content":"hi"}').text() == "hi"


# -- tool_call_ids ----------------------------------------------------------------------


def test_tool_call_ids() -> None:
    assert tool_call_ids(assistant("x", ("A", "B"))) == ["A", "B"]
    assert tool_call_ids(assistant("x")) == []
    assert tool_call_ids(result("A")) == []
    # Only assistant messages make calls, whatever blocks another role carries.
    odd = Message.model_validate(
        {"role": "user", "content": [{"type": "toolCall", "id": "Z", "name": "n"}]}
    )
    assert tool_call_ids(odd) == []


# -- splits_tool_pair -------------------------------------------------------------------

# 1 user, 2 assistant(A, B), 3 result A, 4 result B, 5 assistant
WINDOW = [(2, assistant("call", ("A", "B"))), (3, result("A")), (4, result("B"))]


@pytest.mark.parametrize(("cut_after", "splits"), [(1, False), (2, True), (3, True), (4, False)])
def test_splits_tool_pair(cut_after: int, splits: bool) -> None:
    assert splits_tool_pair(WINDOW, cut_after) is splits


def test_a_call_without_results_yet_is_not_split() -> None:
    assert splits_tool_pair([(2, assistant("call", ("A",)))], 2) is False


def test_results_of_other_calls_do_not_count() -> None:
    window = [(2, assistant("call", ("A",))), (3, result("Z"))]
    assert splits_tool_pair(window, 2) is False


def test_an_empty_window_is_not_split() -> None:
    assert splits_tool_pair([], 10) is False


def test_gaps_in_seq_do_not_matter() -> None:
    # Overlay records (compactions, tombstones) take seqs between messages.
    window = [(2, assistant("call", ("A",))), (5, result("A"))]
    assert splits_tool_pair(window, 3) is True
    assert splits_tool_pair(window, 5) is False


# -- pair_members -----------------------------------------------------------------------

NEIGHBOURS = [
    (2, assistant("call", ("A", "B"))),
    (3, result("A")),
    (4, result("B")),
    (5, assistant("again", ("C",))),
    (6, result("C")),
]


def test_an_assistant_takes_its_results() -> None:
    assert pair_members(2, NEIGHBOURS[0][1], NEIGHBOURS) == [2, 3, 4]


@pytest.mark.parametrize("target", [3, 4])
def test_a_result_takes_its_call_and_siblings(target: int) -> None:
    message = dict(NEIGHBOURS)[target]
    assert pair_members(target, message, NEIGHBOURS) == [2, 3, 4]


def test_a_later_pair_is_separate() -> None:
    assert pair_members(6, result("C"), NEIGHBOURS) == [5, 6]
    assert pair_members(5, NEIGHBOURS[3][1], NEIGHBOURS) == [5, 6]


def test_plain_messages_take_only_themselves() -> None:
    assert pair_members(1, user("q"), NEIGHBOURS) == [1]
    assert pair_members(7, assistant("plain"), NEIGHBOURS) == [7]


def test_a_result_whose_call_is_unknown_takes_only_itself() -> None:
    assert pair_members(9, result("nobody"), NEIGHBOURS) == [9]
    no_id = Message.model_validate({"role": "toolResult", "content": "x"})
    assert pair_members(9, no_id, NEIGHBOURS) == [9]


def test_a_call_is_found_only_before_its_result() -> None:
    neighbours = [(3, result("A")), (4, assistant("call", ("A",)))]
    assert pair_members(3, result("A"), neighbours) == [3]


# -- split responses ----------------------------------------------------------------------


def test_response_groups_join_the_parts_of_one_response() -> None:
    messages = [
        ("user", None),
        ("assistant", "m1"),
        ("assistant", "m1"),
        ("toolResult", None),
        ("assistant", "m1"),
        ("toolResult", None),
        ("assistant", "m2"),  # another response: a new group
        ("assistant", "m2"),
        ("user", None),  # ends m2
        ("assistant", "m2"),  # the same id after a user message is not merged back
        ("assistant", None),
        ("assistant", None),  # no id: never merged
    ]
    assert response_groups(messages) == [
        [0], [1, 2, 4], [3], [5], [6, 7], [8], [9], [10], [11],
    ]  # fmt: skip


def test_merging_keeps_the_first_part_and_usage_once() -> None:
    def part(block: dict[str, object], usage: bool) -> dict[str, object]:
        message: dict[str, object] = {
            "role": "assistant", "content": [block], "responseId": "r", "uuid": str(block)
        }  # fmt: skip
        if usage:
            message["usage"] = {"input": 1, "output": 2}
        return message

    call = {"type": "toolCall", "id": "t1", "name": "read", "arguments": {}}
    first, second = part({"type": "text", "text": "a"}, True), part(call, False)
    answer = {"role": "toolResult", "toolCallId": "t1", "content": []}
    merged = merge_split_responses([first, answer, second])
    assert merged == [{**first, "content": [first["content"][0], call]}, answer]  # type: ignore[index]
    # With the first part gone, a later part's usage (if any) is the response's.
    alone = merge_split_responses([part(call, False), part(call, True)])
    assert alone[0]["usage"] == {"input": 1, "output": 2} and len(alone[0]["content"]) == 2


def test_to_messages_merges_split_responses_and_leaves_others() -> None:
    def stored(message: dict[str, object]) -> str:
        return jsoncodec.dumps(message)

    call = {"type": "toolCall", "id": "t1", "name": "read", "arguments": {}}
    rows = split_rows(
        [
            (0, 5, None),
            (2, 1, stored({"role": "user", "content": [{"type": "text", "text": "hi"}]})),
            (2, 2, stored({"role": "assistant", "content": [], "responseId": "r"})),
            (2, 3, stored({"role": "assistant", "content": [call], "responseId": "r"})),
            (2, 4, stored({"role": "toolResult", "toolCallId": "t1", "content": []})),
        ]
    )
    messages = to_messages(rows)
    assert [m.role for m in messages] == ["user", "assistant", "toolResult"]
    assert tool_call_ids(messages[1]) == ["t1"]
