/**
 * Crash repair for harness sessions runs client-side, with the harness's own closers:
 * resume opens the write handle, reads the log, appends `interruptedTurnClosers(events)`
 * through the same handle (`dsh.md` §5.5). Those closers are stored as berth's vocabulary
 * (an outcome-unknown `tool/result`, `step/end`, `turn/end` interrupted), so every reader
 * sees the turn closed. berth's own repair (`POST …/resume`) refuses these sessions — their
 * `dsh/header` is not ignorable — so it never adds a second repair (it tracks turns per
 * berth run, and a harness turn a crashed process left open is closed by the next
 * process's run).
 */
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it, inject } from 'vitest'
import { deriveEventMessage, interruptedTurnClosers, KNOWN_SESSION_EVENT_TYPES, type SessionEvent as HarnessEvent } from '@deepseek-ai/dsh-session'
import { FormatUnsupportedError } from '../src/index.js'
import { SessionAlreadyOwnedError, harnessText, type SessionEvent, type SessionHandle } from '../src/dsh/index.js'
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
  it("appends the harness's interruptedTurnClosers through the write handle, once, stored as berth's vocabulary", async () => {
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

    // berth's readers see the harness's closers as a repair: one tool call, closed with an outcome-unknown error.
    const stored = (await serverClient().readEvents(resumer.berthId('crash'), { from: 0 })).events
    expect(stored.map((e) => e.type)).toEqual(['dsh/header', 'turn/start', 'user/message', 'step/start', 'assistant/message', 'tool/call', 'tool/result', 'step/end', 'turn/end'])
    expect(stored[6]?.data).toMatchObject({ call_id: 'call-1', is_error: true, error: { code: 'TOOL_OUTCOME_UNKNOWN', name: 'ToolOutcomeUnknownError' }, dsh: JSON.stringify(closers[0]) })
    // Boundaries are their vocabulary fields alone: the harness's closer is exactly what they say.
    expect(stored[8]?.data).toEqual({ turn: 1, reason: 'interrupted' })
    expect(stored.slice(6).map((e) => harnessText(e))).toEqual(closers.map((e) => JSON.stringify(e)))
  })

  it("berth's own repair refuses a dsh session (409 format_unsupported), before and after the harness's: the closers stored are the harness's only", async () => {
    const namespace = freshNamespace()
    const persistence = makePersistence(namespace, { knownEventTypes: KNOWN_SESSION_EVENT_TYPES })
    opened.push(persistence)
    const writer = await persistence.create(meta('refused'))
    await writer.append(crashedTurn())
    await writer.close()
    const client = serverClient()
    const berthId = persistence.berthId('refused')
    await expect(client.resumeSession(berthId, { run_id: 'berth-resume' })).rejects.toBeInstanceOf(FormatUnsupportedError)
    expect(await client.nextSeq(berthId)).toBe(6) // nothing appended
    // The refused resume left no run holding the session: the harness opens it and repairs.
    const handle = await persistence.open('refused', 'write')
    const closers = interruptedTurnClosers((await handle.read(0)) as unknown as HarnessEvent[]) as unknown as SessionEvent[]
    await handle.append(closers)
    await handle.close()
    await expect(client.resumeSession(berthId, { run_id: 'berth-resume-2' })).rejects.toBeInstanceOf(FormatUnsupportedError)
    const stored = (await client.readEvents(berthId, { from: 0 })).events
    expect(stored.length).toBe(9)
    expect(stored.slice(6).map((e) => harnessText(e))).toEqual(closers.map((e) => JSON.stringify(e)))
  })
})

describe('a harness process SIGKILLed while its tool runs (issue 52, item 5)', () => {
  it("the next process's model input carries the harness's outcome-unknown result; berth sees one tool call, closed by it", async () => {
    const namespace = freshNamespace()
    const leaseMs = 1_500
    const script = resolve(dirname(fileURLToPath(import.meta.url)), 'fixtures/dsh-tool-process.mjs')
    const child = spawn(process.execPath, [script], {
      env: { ...process.env, BERTH_URL: inject('berthUrl'), BERTH_API_KEY: inject('berthServiceKey'), DSH_NAMESPACE: namespace, DSH_SESSION: 'charge', DSH_LEASE_MS: String(leaseMs) },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
    const first = await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next()
    if (first.done === true) throw new Error(`the harness process exited: ${stderr}`)
    expect(JSON.parse(first.value)).toEqual({ state: 'tool-running', events: 5 })
    child.kill('SIGKILL')
    const killedAt = Date.now()

    // The next process: open for write once the dead process's run lease lapsed, then the harness's repair.
    const next = makePersistence(namespace, { knownEventTypes: KNOWN_SESSION_EVENT_TYPES, runLeaseTtlMs: leaseMs })
    opened.push(next)
    let handle: SessionHandle | undefined
    while (handle === undefined) {
      try {
        handle = await next.open('charge', 'write')
      } catch (error) {
        if (!(error instanceof SessionAlreadyOwnedError) || Date.now() - killedAt > leaseMs + 5_000) throw error
        await new Promise((r) => setTimeout(r, 100))
      }
    }
    const events = (await handle.read(0)) as unknown as HarnessEvent[]
    expect(events.map((e) => e.type)).toEqual(['turn/start', 'user/message', 'step/start', 'assistant/message', 'tool/call'])
    const closers = interruptedTurnClosers(events)
    expect(closers[0]).toMatchObject({ type: 'tool/result', data: { error: { code: 'TOOL_OUTCOME_UNKNOWN' } }, sourceEventSeqs: [4] })
    await handle.append(closers as unknown as SessionEvent[])
    await handle.close()

    // What the harness sends the model next: the request, then the outcome-unknown result in its own format.
    const history = [...events, ...closers].map((event) => deriveEventMessage(event)).filter((message) => message !== null)
    const last = history.at(-1)
    expect(last?.content[0]).toMatchObject({ type: 'tool-result', toolCallId: 'call-charge', isError: true })
    expect(JSON.stringify(last?.content)).toContain('Its outcome is unknown')

    // berth: exactly one tool/call for the call (the harness's own durable pre-tool record), closed by the harness's result.
    const stored = (await serverClient().readEvents(next.berthId('charge'), { from: 0 })).events
    expect(stored.filter((e) => e.type === 'tool/call').map((e) => (e.data as { call_id: string }).call_id)).toEqual(['call-charge'])
    const results = stored.filter((e) => e.type === 'tool/result')
    expect(results.map((e) => e.data)).toEqual([expect.objectContaining({ call_id: 'call-charge', is_error: true, error: { code: 'TOOL_OUTCOME_UNKNOWN', name: 'ToolOutcomeUnknownError' } })])
    expect(stored.at(-1)).toMatchObject({ type: 'turn/end', data: { turn: 0, reason: 'interrupted' } })
  })
})
