"""Drop-ins that put framework state into berth: `berth.integrations.langgraph`
(LangGraph checkpointers, and `BerthStore` for LangGraph's long-term memory),
`berth.integrations.openai_agents` (Agents SDK sessions), `berth.integrations.adk`
(Google ADK session and memory services) and `berth.integrations.smolagents` (a
durable log of a smolagents agent's steps). Each module imports its framework, so
install the framework too: the extras of python/pyproject.toml pin the tested versions
(`pip install './python[langgraph]'`, `'./python[openai-agents]'`, `'./python[adk]'`,
`'./python[smolagents]'`, from a checkout of the repository; `berth` on PyPI is
another project)."""
