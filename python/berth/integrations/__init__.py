"""Drop-ins that put framework state into berth: `berth.integrations.langgraph`
(LangGraph checkpointers, and `BerthStore` for LangGraph's long-term memory),
`berth.integrations.openai_agents` (Agents SDK sessions), `berth.integrations.adk`
(Google ADK session and memory services) and `berth.integrations.smolagents` (a
durable log of a smolagents agent's steps). Each module imports its framework, so
install the matching extra (`pip install 'berth[langgraph]'`, `'berth[openai-agents]'`,
`'berth[adk]'`, `'berth[smolagents]'`)."""
