"""What a saver per request costs (issue 53): a fresh saver's `get_tuple` of the latest
checkpoint reads the log's tail and the versions it names (no catalog read, no write);
its first write attaches with the catalog record the fold just before it read (no
refused create, no second read of the record); a new thread is still created. On a real
`berth serve` and embedded."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import berth
from dropin_count import count_calls
from berth.integrations.langgraph import BerthSaver


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chat(saver: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("answer", lambda state: {"messages": [AIMessage(content=f"a{len(state['messages'])}")]})
    graph.add_edge(START, "answer")
    graph.add_edge("answer", END)
    return graph.compile(checkpointer=saver)


def turn(client: berth.Client, thread: str, text: str) -> None:
    saver = BerthSaver(client)
    try:
        chat(saver).invoke({"messages": [HumanMessage(content=text)]}, {"configurable": {"thread_id": thread}})
    finally:
        saver.close()


def test_a_fresh_savers_turn_pays_no_refused_create(lg_place: Any) -> None:
    client = lg_place.client()
    counts = count_calls(client)
    turn(client, "chat", "q0")
    # A new thread: the record is missing (read once by the fold, once by the attach),
    # so the thread is created.
    assert counts["create"] == 1, counts
    for n in range(1, 4):
        counts.clear()
        turn(client, "chat", f"q{n}")
        # The latest checkpoint from the tail (no record read); the first write's fold
        # reads the record, which its attach uses; one attach, one detach.
        assert counts["create"] == 0 and counts["get_session"] == 1, counts
        assert counts["runs"] == 1 and counts["detach"] == 1, counts
    saver = BerthSaver(client)
    latest = saver.get_tuple({"configurable": {"thread_id": "chat"}})
    assert [m.content for m in latest.checkpoint["channel_values"]["messages"]] == [
        "q0", "a1", "q1", "a3", "q2", "a5", "q3", "a7"]
    saver.close()
    assert client.get_session("chat").runs == []


def test_a_fresh_get_tuple_reads_the_tail_only(lg_place: Any) -> None:
    client = lg_place.client()
    for n in range(30):
        turn(client, "long", f"q{n}")
    counts = count_calls(client)
    saver = BerthSaver(client)
    latest = saver.get_tuple({"configurable": {"thread_id": "long"}})
    assert len(latest.checkpoint["channel_values"]["messages"]) == 60
    # No catalog read, no write: the tail's pages back to the latest checkpoint and the
    # point reads of the versions it names.
    assert set(counts) <= {"read", "read_at"} and sum(counts.values()) <= 4, counts
    saver.close()
    assert set(counts) <= {"read", "read_at"}, counts  # closing a saver that wrote nothing detaches nothing
