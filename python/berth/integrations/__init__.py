"""Drop-ins that put framework state into berth: `berth.integrations.langgraph`
(LangGraph checkpointers) and `berth.integrations.openai_agents` (Agents SDK sessions).
Each module imports its framework, so install the matching extra
(`pip install 'berth[langgraph]'`, `'berth[openai-agents]'`)."""
