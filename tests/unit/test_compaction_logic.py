"""Compaction's pure logic: settings, token estimates, cut points, file lists, prompts,
serialisation and the offline summarizer. No database."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from helpers.compaction import (
    PI_SESSION,
    SECTIONS,
    assistant,
    msg,
    pi_messages,
    result,
    tool_pairs_intact,
    tool_turn,
    user,
)
from helpers.corpus import corpus_file
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiondb import (
    CompactionError,
    CompactionSettings,
    InvalidInputError,
    Message,
    SessionDBError,
    offline_summarizer,
)
from sessiondb.compaction import (
    SYSTEM_PROMPT,
    CutPoint,
    build_prompt,
    context_tokens_of,
    estimate_message_tokens,
    estimate_tokens,
    extract_file_ops,
    find_cut_point,
    format_file_ops,
    merge_file_ops,
    plan_compaction,
    serialize_messages,
    should_compact,
    valid_cut_indexes,
)
from sessiondb.compaction.files import FileOps, strip_file_ops
from sessiondb.compaction.prompts import SPLIT_TURN_HEADING, TURN_PREFIX_PROMPT


def msgs(*data: dict[str, Any]) -> list[Message]:
    return [msg(d) for d in data]


# -- settings and trigger ---------------------------------------------------------------


def test_settings_defaults_are_the_specs() -> None:
    s = CompactionSettings()
    assert (s.enabled, s.reserve_tokens, s.keep_recent_tokens) == (True, 16384, 20000)
    assert s.threshold == s.context_window - 16384


@pytest.mark.parametrize(
    "kwargs",
    [
        {"reserve_tokens": -1},
        {"keep_recent_tokens": "20000"},
        {"context_window": 0},
        {"reserve_tokens": 1000, "context_window": 1000},
        {"max_failures": 0},
        {"enabled": 1},
        {"reserve_tokens": True},
    ],
)
def test_settings_refuse_bad_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        CompactionSettings(**kwargs)


def test_trigger_is_strictly_above_window_minus_reserve() -> None:
    s = CompactionSettings(context_window=100_000, reserve_tokens=10_000)
    assert not should_compact(90_000, s)
    assert should_compact(90_001, s)
    off = CompactionSettings(context_window=100_000, reserve_tokens=10_000, enabled=False)
    assert not should_compact(99_999, off)


# -- token estimates --------------------------------------------------------------------


def test_estimate_counts_text_thinking_tool_names_and_argument_json() -> None:
    m = msg(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "abcde"},
                {"type": "thinking", "thinking": "xyz"},
                {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"cmd": "ls"}},
            ],
        }
    )
    chars = len("abcde") + len("xyz") + len("bash") + len('{"cmd": "ls"}')
    assert estimate_message_tokens(m) == math.ceil(chars / 4) == 7


def test_a_tokenizer_replaces_the_estimate() -> None:
    m = msg(user("one two three four"))
    assert estimate_message_tokens(m, lambda text: len(text.split())) == 4


def test_a_failing_tokenizer_raises_compaction_error() -> None:
    def broken(text: str) -> int:
        raise RuntimeError("no vocabulary")

    with pytest.raises(CompactionError, match="tokenizer failed"):
        estimate_tokens(msgs(user("hi")), broken)
    with pytest.raises(CompactionError, match="not a count"):
        estimate_tokens(msgs(user("hi")), lambda text: -1)


def test_context_tokens_prefer_the_last_reported_usage() -> None:
    history = msgs(
        user("a" * 400),
        assistant("b" * 40, usage={"input": 1000, "output": 50, "cacheRead": 200}),
        user("c" * 80),
    )
    assert context_tokens_of(history) == 1250 + 20
    total = msgs(user("a"), assistant("b", usage={"input": 5, "totalTokens": 777}))
    assert context_tokens_of(total) == 777


def test_context_tokens_skip_zero_usage_and_fall_back_to_the_estimate() -> None:
    aborted = msgs(user("a" * 40), assistant("", usage={"input": 0, "output": 0}))
    assert context_tokens_of(aborted) == 10
    assert context_tokens_of(msgs(user("a" * 41))) == 11


# -- cut point ----------------------------------------------------------------------------


def test_nothing_to_cut_when_everything_fits() -> None:
    history = msgs(*tool_turn(1), *tool_turn(2))
    assert find_cut_point(history, 10_000) == CutPoint(0)


def test_s7_13_cut_never_lands_between_a_call_and_its_result() -> None:
    # The budget is reached inside the big tool result of turn 2: the cut moves on to
    # the assistant message after it, never to the result itself.
    history = msgs(*tool_turn(1), *tool_turn(2, size=4000), *tool_turn(3, size=40))
    results = [i for i, m in enumerate(history) if m.role == "toolResult"]
    for keep in range(1, 1400, 7):
        cut = find_cut_point(history, keep)
        assert cut.first_kept_index not in results
        assert tool_pairs_intact(history[cut.first_kept_index :])


def test_valid_cuts_exclude_results_and_open_calls() -> None:
    history = msgs(
        user("go"),
        assistant("", [("a", "read", {"path": "x"}), ("b", "read", {"path": "y"})]),
        result("a", "1"),
        # an assistant message between a call and its late result: not a valid cut
        assistant("thinking aloud"),
        result("b", "2"),
        assistant("done"),
    )
    assert valid_cut_indexes(history) == [0, 1, 5]


def test_a_cut_at_an_assistant_message_splits_the_turn() -> None:
    history = msgs(
        *tool_turn(1, size=40),
        user("big task"),
        assistant("step 1", [("s1", "read", {"path": "a.py"})]),
        result("s1", "y" * 4000),
        assistant("step 2", [("s2", "read", {"path": "b.py"})]),
        result("s2", "z" * 400),
        assistant("finished"),
    )
    cut = find_cut_point(history, 150)
    assert cut == CutPoint(first_kept_index=7, turn_start_index=4)
    assert cut.split_turn and cut.history_end == 4
    assert history[cut.turn_start_index or 0].text() == "big task"


def test_a_cut_at_a_user_message_is_not_a_split_turn() -> None:
    history = msgs(*tool_turn(1, size=4000), *tool_turn(2, size=40))
    cut = find_cut_point(history, 30)
    assert cut == CutPoint(4)


def test_only_results_after_the_target_cut_at_their_call() -> None:
    calls = [(f"c{i}", "read", {"path": f"p{i}"}) for i in range(3)]
    history = msgs(user("q"), assistant("a"), assistant("", calls))
    history += msgs(*(result(f"c{i}", "r" * 4000) for i in range(3)))
    cut = find_cut_point(history, 100)
    assert cut == CutPoint(2, turn_start_index=0)


def test_pi_transcript_cuts_never_split_a_tool_pair() -> None:
    history = [msg(m) for m in pi_messages(corpus_file(PI_SESSION))]
    assert tool_pairs_intact(history)
    for end in range(50, len(history) + 1, 37):
        prefix = history[:end]
        for keep in (500, 2_000, 20_000):
            cut = find_cut_point(prefix, keep)
            kept = prefix[cut.first_kept_index :]
            assert tool_pairs_intact(kept), (end, keep, cut)
            if cut.first_kept_index:
                assert kept[0].role in ("user", "assistant")


# -- file operations ------------------------------------------------------------------------


def test_file_ops_from_read_write_edit_and_aliases() -> None:
    history = msgs(
        assistant(
            "",
            [
                ("1", "read", {"path": "src/a.py"}),
                ("2", "read_file", {"path": "src/b.py"}),
                ("3", "write_file", {"path": "src/c.py", "content": "x"}),
                ("4", "Edit", {"file_path": "src/d.py"}),
                ("5", "bash", {"command": "cat src/e.py"}),
                ("6", "read", {}),
            ],
        )
    )
    assert extract_file_ops(history) == ({"src/a.py", "src/b.py"}, {"src/c.py", "src/d.py"})


def test_s7_16_a_file_read_and_modified_is_listed_as_modified_only() -> None:
    ops = merge_file_ops({"b.py", "a.py", "c.py"}, {"c.py"}, ["z.py"], ["a.py"])
    assert ops == FileOps(read_files=("b.py", "z.py"), modified_files=("a.py", "c.py"))


def test_s7_15_file_lists_are_cumulative() -> None:
    ops = merge_file_ops({"new.py"}, set(), ["old_read.py"], ["old_written.py"])
    assert ops.read_files == ("new.py", "old_read.py")
    assert ops.modified_files == ("old_written.py",)


def test_file_blocks_format_and_strip() -> None:
    blocks = format_file_ops(FileOps(("a.py", "b.py"), ("c.py",)))
    assert blocks == (
        "<read-files>\na.py\nb.py\n</read-files>\n\n<modified-files>\nc.py\n</modified-files>"
    )
    assert format_file_ops(FileOps()) == ""
    assert strip_file_ops("## Goal\nx\n\n" + blocks) == "## Goal\nx"


# -- serialisation and prompts ----------------------------------------------------------


def test_s7_18_serialisation_is_the_specs_flat_text() -> None:
    history = msgs(
        user("What pods are running?"),
        assistant("Let me check.", [("tc_1", "bash", {"command": "kubectl get pods"})]),
        result("tc_1", "NAME   READY   STATUS\nnginx  1/1     Running"),
        assistant("There is one pod running: nginx, with status Running."),
    )
    assert serialize_messages(history) == (
        "[User]: What pods are running?\n"
        "[Assistant]: Let me check.\n"
        '[Assistant tool calls]: bash(command="kubectl get pods")\n'
        "[Tool result]: NAME   READY   STATUS\nnginx  1/1     Running\n"
        "[Assistant]: There is one pod running: nginx, with status Running."
    )


def test_serialisation_cuts_long_results_and_shows_thinking() -> None:
    history = msgs(
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "toolCall", "id": "c", "name": "read", "arguments": {"path": "a", "n": 3}},
            ],
        },
        result("c", "r" * 5000, error=True),
    )
    text = serialize_messages(history, tool_result_max_chars=100)
    lines = text.split("\n")
    assert lines[0] == "[Assistant thinking]: hmm"
    assert lines[1] == '[Assistant tool calls]: read(path="a", n=3)'
    assert lines[2] == "[Tool result]: (error) " + "r" * 100
    assert lines[3] == "[… 4900 more characters cut]"
    assert '"role"' not in text and '"content"' not in text


def test_the_system_prompt_forbids_continuing() -> None:
    assert "do not continue it" in SYSTEM_PROMPT
    assert "do not answer questions" in SYSTEM_PROMPT


def test_initial_update_and_turn_prompts() -> None:
    initial = build_prompt("[User]: hi", instructions="focus on the schema")
    assert initial.startswith("<conversation>\n[User]: hi\n</conversation>")
    assert all(s in initial for s in SECTIONS)
    assert "<previous-summary>" not in initial
    assert initial.endswith("Additional focus for this summary: focus on the schema")
    update = build_prompt("[User]: more", previous_summary="## Goal\nold goal")
    assert "<previous-summary>\n## Goal\nold goal\n</previous-summary>" in update
    assert 'Move items from "In Progress" to "Done"' in update
    assert all(s in update for s in SECTIONS)
    turn = build_prompt("[User]: x", turn_prefix=True, previous_summary="ignored")
    assert TURN_PREFIX_PROMPT in turn and "<previous-summary>" not in turn


# -- the offline summarizer -------------------------------------------------------------------


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_s7_14_offline_summary_has_the_structured_sections() -> None:
    text = serialize_messages(msgs(*tool_turn(1), user("now add tests")))
    summary = run(offline_summarizer(SYSTEM_PROMPT, build_prompt(text), 2000))
    positions = [summary.index(s + "\n") for s in SECTIONS]
    assert positions == sorted(positions)
    assert "## Goal\nrequest 1\n" in summary
    assert "- [ ] now add tests" in summary
    assert "Files touched: src/f1.py" in summary


def test_offline_update_keeps_the_previous_items_and_moves_in_progress_to_done() -> None:
    first = run(
        offline_summarizer(
            SYSTEM_PROMPT, build_prompt(serialize_messages(msgs(user("build the parser")))), 2000
        )
    )
    second = run(
        offline_summarizer(
            SYSTEM_PROMPT,
            build_prompt(serialize_messages(msgs(user("now the printer"))), previous_summary=first),
            2000,
        )
    )
    assert "## Goal\nbuild the parser\nnow the printer\n" in second
    assert "- [x] build the parser" in second
    assert "- [ ] now the printer" in second


def test_plan_merges_previous_files_and_reports_tokens() -> None:
    from sessiondb import Compaction

    entries = list(enumerate(msgs(*tool_turn(1, 4000, "new.py"), *tool_turn(2, 40)), start=10))
    previous = Compaction(
        summary="## Goal\nold\n\n<read-files>\nold.py\n</read-files>",
        first_kept_seq=10,
        read_files=["old.py", "new.py"],
        modified_files=["new.py"],
    )
    plan = plan_compaction(entries, previous, CompactionSettings(keep_recent_tokens=50))
    assert plan is not None
    # Turn 2 holds ~35 tokens, so the cut lands in turn 1, at its last assistant message.
    assert plan.first_kept_seq == 13
    assert plan.history == () and len(plan.turn_prefix) == 3 and plan.split_turn
    assert plan.previous_summary == "## Goal\nold"
    assert plan.file_ops == FileOps(("old.py",), ("new.py",))
    assert plan.summarized_tokens == estimate_tokens([m for _, m in entries[:3]])
    assert plan.tokens_before > plan.summarized_tokens + plan.kept_tokens
    assert SPLIT_TURN_HEADING.startswith("## ")


# -- fuzzing --------------------------------------------------------------------------------

_text = st.text(max_size=300)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Random conversations whose tool results follow their calls, possibly late."""
    out: list[dict[str, Any]] = []
    open_calls: list[str] = []
    n = 0
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["user", "assistant", "call", "result"]))
        if kind == "user":
            out.append(user(draw(_text)))
        elif kind == "assistant":
            out.append(assistant(draw(_text)))
        elif kind == "call":
            ids = [f"c{n + i}" for i in range(draw(st.integers(1, 3)))]
            n += len(ids)
            out.append(assistant(draw(_text), [(i, "read", {"path": draw(_text)}) for i in ids]))
            open_calls += ids
        elif open_calls:
            call = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            out.append(result(call, draw(_text)))
    return msgs(*out)


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(0, 400))
def test_fuzz_cut_points_never_split_pairs(history: list[Message], keep: int) -> None:
    cut = find_cut_point(history, keep)
    assert 0 <= cut.first_kept_index <= max(len(history) - 1, 0)
    assert cut.first_kept_index in valid_cut_indexes(history)
    kept = history[cut.first_kept_index :]
    calls_before = {c.id for m in history[: cut.first_kept_index] for c in m.tool_calls()}
    assert not any(m.tool_call_id in calls_before for m in kept if m.role == "toolResult")
    if cut.turn_start_index is not None:
        assert history[cut.turn_start_index].role == "user"
        assert cut.turn_start_index < cut.first_kept_index


@settings(max_examples=200, deadline=None)
@given(conversations(), st.integers(1, 5000), st.one_of(st.none(), _text))
def test_fuzz_serialise_and_offline_summarise(
    history: list[Message], limit: int, instructions: str | None
) -> None:
    text = serialize_messages(history, limit)
    summary = run(offline_summarizer(SYSTEM_PROMPT, build_prompt(text, instructions), 500))
    assert isinstance(summary, str) and len(summary) <= 2000


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["enabled", "reserve_tokens", "keep_recent_tokens", "context_window", "max_failures"]
        ),
        st.one_of(st.integers(-5, 300_000), st.booleans(), st.none(), st.text(max_size=3)),
    )
)
def test_fuzz_settings_raise_only_invalid_input(kwargs: dict[str, Any]) -> None:
    try:
        s = CompactionSettings(**kwargs)
    except SessionDBError as exc:
        assert isinstance(exc, InvalidInputError)
        return
    assert s.threshold > 0


# -- pruning (planning only) -------------------------------------------------------------


def test_pruning_spares_the_protected_tail_and_small_results() -> None:
    from sessiondb.compaction import PRUNED_MARKER, plan_pruning

    history = msgs(*tool_turn(1, 4000), *tool_turn(2, 4000), *tool_turn(3, 4000))
    history[2 + 4] = msg(result("call_2", "ok"))  # turn 2's result is tiny
    entries = list(enumerate(history, start=1))
    big = estimate_message_tokens(history[2])
    plan = plan_pruning(entries, protect_tokens=big + 30)
    # turn 3's result is protected, turn 2's is smaller than the marker: only turn 1's.
    assert plan.seqs == (3,)
    assert plan.tokens_freed == big - math.ceil(len(PRUNED_MARKER) / 4)
    assert plan_pruning(entries, protect_tokens=10**6).seqs == ()
    assert plan_pruning(entries, protect_tokens=0).seqs == (3, 11)
