"""The plain Python client: a conversation kept in a berth session.

Creates the session (or reopens it if it exists), appends a user message and the
assistant's answer as one durable batch, and prints the whole history. Run it again with
the same id and the history grows: every earlier exchange is read back from berth.

    BERTH_DATA=./berth-data python chat.py [SESSION_ID]                  # embedded store
    BERTH_URL=http://127.0.0.1:7420 BERTH_API_KEY=… python chat.py [SESSION_ID]
"""

from __future__ import annotations

import os
import sys

import berth

MESSAGES = {"user/message", "assistant/message"}


def connect() -> berth.Client:
    """HTTP when BERTH_URL is set (the key from BERTH_API_KEY), else the embedded store."""
    if os.environ.get("BERTH_URL"):
        return berth.Client()
    # Embedded: the store runs in this process; you name the principal yourself.
    return berth.open(os.environ.get("BERTH_DATA", "./berth-data"), tenant="acme", user="alice", role="service")


def main(session_id: str) -> None:
    with connect() as client:
        try:
            client.create_session(session_id, title="chat example")
            print(f"created session {session_id!r}")
        except berth.AlreadyExists:
            print(f"reopened session {session_id!r}")

        # The conversation so far (iter_events follows the pages of a long log).
        history = [event for event in client.iter_events(session_id) if event.type in MESSAGES]
        exchange = len(history) // 2 + 1

        # One atomic, durable append: both messages are stored, or neither is. (A real app
        # would ask its model here, with `history` as the context.)
        outcome = client.append(session_id, [
            ("user/message", {"content": f"question {exchange}: what do you remember?"}),
            ("assistant/message", {"content": f"answer {exchange}: the {len(history)} messages before this one."}),
        ])
        print(f"stored at seqs {outcome.first_seq}..{outcome.next_seq - 1}")
        messages = [event for event in client.iter_events(session_id) if event.type in MESSAGES]
    print(f"conversation {session_id!r}, {len(messages)} messages:")
    for event in messages:
        role = event.type.split("/")[0]
        print(f"  {role}: {event.data['content']}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "chat-demo")
