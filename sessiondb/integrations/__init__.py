"""Drop-in session stores for agent frameworks, each behind an optional extra:
``sessiondb.integrations.openai_agents`` (``pip install 'sessiondb[openai-agents]'``)."""
