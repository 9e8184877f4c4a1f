"""The README's first command: a tool-using conversation stored and read back.

Run it with ``python -m sessiondb.quickstart``; it uses ``SESSIONDB_URL`` or the
SQLite file ``./sessiondb.sqlite3``.
"""

from __future__ import annotations

import asyncio

from . import Message, SessionStore, TextContent, ToolCallContent


async def main() -> None:
    async with SessionStore.open() as store:
        await store.migrate()
        session = await store.create_session(model="example-model")
        await store.append(
            session.id,
            [
                {"role": "user", "content": "What is in notes.txt? Summarise it in one line."},
                Message(
                    role="assistant",
                    content=[
                        TextContent(text="Let me read the file."),
                        ToolCallContent(id="call_1", name="read", arguments={"path": "notes.txt"}),
                    ],
                    usage={"input": 42, "output": 17},
                ),
                {
                    "role": "toolResult",
                    "toolCallId": "call_1",
                    "toolName": "read",
                    "content": [{"type": "text", "text": "Buy milk.\nCall Ada about the demo."}],
                },
                {
                    "role": "assistant",
                    "content": "Two to-dos: buy milk and call Ada about the demo.",
                },
            ],
        )
        print(f"session {session.id} in {store.settings.url.render_as_string(True)}\n")
        print("context the model sees:")
        for message in await store.context(session.id):
            calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls())
            text = message.text().replace("\n", " / ")
            print(f"  {message.role:>10}: {text}{'  → ' + calls if calls else ''}")
        print("\nsessions, newest first:")
        for info in (await store.list_sessions(limit=5)).items:
            print(f"  {info.id}  {info.message_count:>3} messages  {info.name}")


if __name__ == "__main__":
    asyncio.run(main())
