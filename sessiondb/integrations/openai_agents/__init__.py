"""The OpenAI Agents SDK's ``Session`` protocols on sessiondb: :class:`SessionDBSession`.

.. code-block:: python

    from agents import Agent, Runner
    from sessiondb import offline_summarizer
    from sessiondb.integrations.openai_agents import SessionDBSession

    session = SessionDBSession.from_url(
        "user:42/thread:7", url="postgresql://…", summarizer=offline_summarizer
    )
    result = await Runner.run(agent, "hello", session=session)
    await session.store_run_usage(result)

The SDK's session id is the caller's key of a sessiondb session
(:meth:`SessionStore.session_for_key`), created on the first ``add_items``. Each
Responses-API item is one sessiondb message, so the context, compaction, forks, export
and the CLI see an SDK conversation like any other:

- a user, system or developer message is a ``user`` message, an assistant message an
  ``assistant`` message, with their text (and other parts) as content blocks;
- a ``function_call`` (and every other ``*_call`` item with a ``call_id``) is an
  ``assistant`` message with one ``toolCall`` block, its ``*_call_output`` a
  ``toolResult`` with that ``toolCallId``;
- ``reasoning`` is an ``assistant`` message with a ``thinking`` block of its summary;
  any other item type an ``assistant`` message with no content.

Every message also keeps the item exactly as it was added, under the wire field
``responsesItem``, and ``get_items`` gives that back: items round-trip value for value
whatever their type. Two things change what comes back, both on purpose: a compaction
shows as one user message item holding the summary (or, when the Responses compaction
endpoint made it, as that endpoint's output items), in front of the items it kept; and
a tool result pruned by compaction's first phase comes back with the prune marker as
its ``output``.

Nothing is ever deleted by the protocol: ``pop_item`` appends a tombstone for the last
item (only that item: popping a tool result leaves its call), ``clear_session`` a
compaction without a summary (:meth:`SessionStore.clear`), ``run_compaction`` a
compaction overlay; ``records()`` keeps the whole history. Only ``delete_branch``
deletes: the branch's own records.

The modules: :mod:`.items` (items <-> messages), :mod:`.history` (turns and usage from
records), :mod:`.branches` (branches as forks), :mod:`.session` (the class).
"""

from .items import (
    ITEM_FIELD,
    POP_REASON,
    RESPONSES_SUMMARY_PREFIX,
    TEXT_FIELD,
    USAGE_FIELD,
    item_message,
    message_items,
    record_item,
    wire_items,
)
from .session import ResponsesCompactor, SessionDBSession, responses_compactor

__all__ = [
    "ITEM_FIELD",
    "POP_REASON",
    "RESPONSES_SUMMARY_PREFIX",
    "TEXT_FIELD",
    "USAGE_FIELD",
    "ResponsesCompactor",
    "SessionDBSession",
    "item_message",
    "message_items",
    "record_item",
    "responses_compactor",
    "wire_items",
]
