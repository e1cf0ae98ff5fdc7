"""What a job's next `attach` costs (issue 53): a `BerthAgentLog` on an existing session
resumes it at once, with no refused create before; a new job creates its session once;
on a real `berth serve` and embedded. The run itself stays one per log object: the
session is `serial`, and `close()` must free it for the next holder at once."""

from __future__ import annotations

from typing import Any

from smol_fakes import ScriptedModel, make_agent

import berth
from dropin_count import count_calls
from berth.integrations.smolagents import BerthAgentLog

SCRIPT = ["Thought: one.\n<code>\nprint('v', 2)\n</code>", "Thought: done.\n<code>\nfinal_answer('ok')\n</code>"]


def request(client: berth.Client, job: str, n: int) -> None:
    agent = make_agent(ScriptedModel(SCRIPT))
    log = BerthAgentLog(client, job)
    log.attach(agent)
    assert agent.run(f"task {n}", reset=False) == "ok"
    log.close()


def test_a_jobs_next_attach_resumes_at_once(place: Any) -> None:
    client = place.client()
    counts = count_calls(client)
    request(client, "job", 0)
    # A new job: the resume finds no session, which is created, then resumed.
    assert counts["create"] == 1 and counts["resume"] == 2, counts
    counts.clear()
    request(client, "job", 1)
    # The next request: one resume (the run), the whole log read (the memory rebuilt),
    # the task's, the step's and the answer's appends, the detach. No create.
    assert counts == {"resume": 1, "read": 1, "append": 3, "detach": 1}, counts
    assert client.get_session("job").runs == []
    assert [e.data["turn"] for e in client.read("job").events if e.type == "turn/start"] == [0, 1]


def test_a_session_deleted_between_create_and_resume_is_not_found(place: Any) -> None:
    client = place.client()
    original = client.create_session

    def create_then_delete(session_id: str, **options: Any) -> Any:
        created = original(session_id, **options)
        client.delete_session(session_id)
        return created

    client.create_session = create_then_delete  # type: ignore[method-assign]
    log = BerthAgentLog(client, "vanishing")
    try:
        log.attach(make_agent(ScriptedModel(SCRIPT)))
    except berth.NotFound:
        pass
    else:
        raise AssertionError("attach went on without its session")
    finally:
        log.close()
