"""Durable tools: a tool call recorded in berth before the tool runs.

```python
log = BerthAgentLog(client, "job-42")
agent = ToolCallingAgent(tools=durable_tools([charge_card, lookup], log), model=model)
log.attach(agent)
```

`durable_tools(tools, log)` wraps each `Tool` in a `DurableTool`: the same name,
description, inputs and output type (the agent's prompt is unchanged), whose call first
appends the call's `tool/call` to the log's session — with the step's `step/start` and
model message if they are not stored yet — and returns only once berth stored it; then
it runs the tool. A process killed while the tool runs leaves that record; the next
`attach` (berth's repair) closes the call as outcome-unknown, and the restored memory's
last step carries that error in smolagents' own format (`_repair`), so the model is told
the call may have happened. Without the wrapper, a step is stored only when it ends.

The record costs one durable append per call of a wrapped tool: wrap the tools whose
effects matter (payments, messages, writes), not every lookup. A `ToolCallingAgent`'s
call is the model's call (its id); a tool a `CodeAgent`'s code calls is recorded as a
call inside the step's `python_interpreter` call (`call_3.1`, `call_3.2`, …). Tools run
in the agent's process only: a remote executor (`executor_type="e2b"`, …) runs the
code elsewhere, where nothing is recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smolagents.tools import Tool

if TYPE_CHECKING:
    from ._log import BerthAgentLog


class DurableTool(Tool):
    """`tool`, whose every call is recorded durably in `log`'s session before it runs."""

    skip_forward_signature_validation = True

    def __init__(self, tool: Tool, log: BerthAgentLog) -> None:
        if not isinstance(tool, Tool):
            raise TypeError(f"durable_tools: {tool!r} is not a smolagents Tool")
        self.tool = tool
        self.log = log
        self.name = tool.name
        self.description = tool.description
        self.inputs = tool.inputs
        self.output_type = tool.output_type
        self.output_schema = getattr(tool, "output_schema", None)
        super().__init__()
        self.is_initialized = True  # the wrapped tool sets itself up on its first call

    def __getattr__(self, name: str) -> Any:
        # Anything else a caller asks of the tool is the wrapped tool's.
        if name == "tool":
            raise AttributeError(name)
        return getattr(self.tool, name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.tool.forward(*args, **kwargs)

    def __call__(self, *args: Any, sanitize_inputs_outputs: bool = False, **kwargs: Any) -> Any:
        arguments = self._arguments(args, kwargs)
        call = self.log._before_tool(self.name, arguments)
        try:
            output = self.tool(*args, sanitize_inputs_outputs=sanitize_inputs_outputs, **kwargs)
        except BaseException as error:
            self.log._after_tool(call, f"{type(error).__name__}: {error}", True)
            raise
        self.log._after_tool(call, str(output).strip(), False)
        return output

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call's arguments by name, as the model gives them (positional ones named
        after the tool's inputs)."""
        if len(args) == 1 and not kwargs and isinstance(args[0], dict) and all(key in self.inputs for key in args[0]):
            return dict(args[0])
        if len(args) == 1 and not kwargs and not isinstance(args[0], dict) and not self.inputs:
            return args[0]
        named = dict(zip(self.inputs, args))
        named.update(kwargs)
        return named


def durable_tools(tools: list[Tool], log: BerthAgentLog) -> list[Tool]:
    """`tools`, each wrapped in a `DurableTool` recording to `log` (one already wrapped
    for `log` is kept as it is)."""
    return [tool if isinstance(tool, DurableTool) and tool.log is log else DurableTool(tool, log) for tool in tools]
