"""Drop-in session stores for agent frameworks, each behind an optional extra (importing
one without its framework raises :class:`sessiondb.MissingDependencyError` naming it):
``sessiondb.integrations.openai_agents`` (``pip install 'sessiondb[openai-agents]'``),
``sessiondb.integrations.langchain`` (``pip install 'sessiondb[langchain]'``) and
``sessiondb.integrations.claude_agent_sdk`` (``pip install 'sessiondb[claude-agent-sdk]'``)."""
