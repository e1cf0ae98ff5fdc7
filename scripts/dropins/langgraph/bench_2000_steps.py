"""2,000 one-message steps (a node appends one ~200-byte message per step) with
SqliteSaver and BerthSaver (embedded): steps/s, resume (get_tuple of the latest from a
fresh saver) and bytes on disk. Not part of the CI suite (one run, no assertions on
timing). Needs `pip install langgraph-checkpoint-sqlite==3.1.2` in the suite's venv:

    target/langgraph-venv/bin/python scripts/dropins/langgraph/bench_2000_steps.py [STEPS]
"""
import os
import sqlite3
import sys
import tempfile
import time
from typing import Annotated, TypedDict
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import START, END, StateGraph
from langgraph.graph.message import add_messages
import berth
from berth.integrations.langgraph import BerthSaver
from langgraph.checkpoint.sqlite import SqliteSaver

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000

class S(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    n: int

def step(state):
    return {"messages": [AIMessage(content=f"step {state['n']} " + "y" * 200)], "n": state["n"] + 1}

def build(cp):
    g = StateGraph(S); g.add_node("step", step); g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= STEPS else "step")
    return g.compile(checkpointer=cp)

def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files: total += os.path.getsize(os.path.join(root, f))
    return total

def run(name, make, where):
    saver, close = make()
    t = time.monotonic()
    build(saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}, "recursion_limit": STEPS + 10})
    elapsed = time.monotonic() - t
    close()
    saver2, close2 = make()
    t = time.monotonic(); tup = saver2.get_tuple({"configurable": {"thread_id": "t"}}); resume = time.monotonic() - t
    assert len(tup.checkpoint["channel_values"]["messages"]) == STEPS
    close2()
    print(f"{name}: {STEPS / elapsed:.0f} steps/s, resume {resume * 1000:.0f} ms, {du(where) / 1e6:.1f} MB on disk")

d = tempfile.mkdtemp()
def sqlite_make():
    conn = sqlite3.connect(os.path.join(d, "cp.sqlite"), check_same_thread=False)
    return SqliteSaver(conn), conn.close
run("SqliteSaver", sqlite_make, d)
b = tempfile.mkdtemp()
def berth_make():
    client = berth.open(b, tenant="t", user="a", role="service")
    saver = BerthSaver(client)
    return saver, saver.close
run("BerthSaver (embedded)", berth_make, b)
