/**
 * Crash repair for harness sessions runs client-side, with the harness's own closers:
 * resume opens the write handle, reads the log, appends `interruptedTurnClosers(events)`
 * through the same handle (`dsh.md` §5.5). berth's own repair (`POST …/resume`) does not
 * apply to these sessions: it sees only opaque `dsh/event` envelopes.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { interruptedTurnClosers, KNOWN_SESSION_EVENT_TYPES, type SessionEvent as HarnessEvent } from '@deepseek-ai/dsh-session'
import type { SessionEvent } from '../src/dsh/index.js'
import { freshNamespace, makePersistence, meta, serverClient } from './support/dsh-fixtures.js'
import type { BerthHandlePersistence } from '../src/dsh/index.js'

const opened: BerthHandlePersistence[] = []
afterEach(async () => {
  await Promise.allSettled(opened.splice(0).map((p) => p.close()))
})

/** A turn the process died in: an assistant message asked for a tool, the call started, no result. */
function crashedTurn(): SessionEvent[] {
  return [
    { type: 'turn/start', seq: 0, time: 100, data: { turn: 1 } },
    { type: 'user/message', seq: 1, time: 101, surfaceOp: 'append', data: { id: 'u1', role: 'user', source: { kind: 'human' }, content: [{ type: 'text', text: 'list files' }] } },
    { type: 'step/start', seq: 2, time: 102, data: { turn: 1, step: 1 } },
    { type: 'assistant/message', seq: 3, time: 103, surfaceOp: 'append', data: { turn: 1, step: 1, message: { id: 'a1', role: 'assistant', content: [{ type: 'tool-call', id: 'call-1', name: 'ls', arguments: '{}' }] } } },
    { type: 'tool/call', seq: 4, time: 104, data: { turn: 1, step: 1, callId: 'call-1', name: 'ls', arguments: '{}' } },
  ]
}

describe('resume of an interrupted harness session', () => {
  it("appends the harness's interruptedTurnClosers through the write handle, once", async () => {
    const namespace = freshNamespace()
    const options = { knownEventTypes: KNOWN_SESSION_EVENT_TYPES }
    const crashed = makePersistence(namespace, options)
    opened.push(crashed)
    const writer = await crashed.create(meta('crash'))
    await writer.append(crashedTurn())
    // The process dies without closing (its run lease would lapse); here the handle is just dropped.
    await writer.close()

    const resumer = makePersistence(namespace, options)
    opened.push(resumer)
    const handle = await resumer.open('crash', 'write')
    const events = await handle.read(0)
    const closers = interruptedTurnClosers(events as unknown as HarnessEvent[]) as unknown as SessionEvent[]
    expect(closers.map((e) => e.type)).toEqual(['tool/result', 'step/end', 'turn/end'])
    expect((closers[0]?.data as { error?: { code: string } }).error?.code).toBe('TOOL_OUTCOME_UNKNOWN')
    expect((closers[2]?.data as { reason: { kind: string } }).reason.kind).toBe('interrupted')
    await handle.append(closers)
    await handle.close()

    const again = await makePersistence(namespace, options).open('crash', 'write')
    const repaired = await again.read(0)
    expect(repaired.map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
    // The exact text of the closers came back: the harness compares by text.
    expect(repaired.slice(5).map((e) => JSON.stringify(e))).toEqual(closers.map((e) => JSON.stringify(e)))
    expect(interruptedTurnClosers(repaired as unknown as HarnessEvent[])).toEqual([])
    await again.close()
  })

  it("berth's own repair does not apply: POST …/resume repairs nothing in a dsh session", async () => {
    const namespace = freshNamespace()
    const persistence = makePersistence(namespace, { knownEventTypes: KNOWN_SESSION_EVENT_TYPES })
    opened.push(persistence)
    const writer = await persistence.create(meta('opaque'))
    await writer.append(crashedTurn())
    await writer.close()
    const client = serverClient()
    const outcome = await client.resumeSession(persistence.berthId('opaque'), { run_id: 'berth-resume' })
    expect(outcome.repaired).toEqual([])
    await client.detachRun(persistence.berthId('opaque'), 'berth-resume')
    expect((await (await persistence.open('opaque', 'read')).read()).length).toBe(5)
  })
})
