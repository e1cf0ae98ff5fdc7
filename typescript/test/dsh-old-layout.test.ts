/**
 * Old layouts keep reading (issue 52, item 7): sessions written by the adapters before
 * the vocabulary mapping — every harness event a `dsh/event` envelope with its exact text,
 * the header `ignorable` — exported then with `exportSession(id, 'jsonl')` into
 * `fixtures/dsh-*.jsonl` (`fixtures/capture-dsh-fixtures.mjs`, the adapters of ca6ed18),
 * imported here into a fresh berth. `BerthHandlePersistence` must read them exactly as it
 * read them then (`fixtures/dsh-fixtures.expected.json`), and continue them: new events in
 * the new layout, old and new read back as one log.
 */
import { readFileSync } from 'node:fs'
import { resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { KNOWN_SESSION_EVENT_TYPES, interruptedTurnClosers, type SessionEvent as HarnessEvent } from '@deepseek-ai/dsh-session'
import { BerthClient } from '../src/index.js'
import { BerthHandlePersistence, type SessionEvent } from '../src/dsh/index.js'
import { startBerthServer, type BerthServer } from './support/berth-server.js'

const fixtures = resolve(dirname(fileURLToPath(import.meta.url)), 'fixtures')
interface Expected { id: string; berthId: string; header: unknown; events: string[]; eventCount: number }
const expected = JSON.parse(readFileSync(resolve(fixtures, 'dsh-fixtures.expected.json'), 'utf8')) as Record<string, Expected>
const files = ['dsh-handle.jsonl', 'dsh-handle-encoded-id.jsonl']

let server: BerthServer
let client: BerthClient
const persistences: BerthHandlePersistence[] = []

function persistence(): BerthHandlePersistence {
  const made = new BerthHandlePersistence({ client, knownEventTypes: KNOWN_SESSION_EVENT_TYPES, runLeaseTtlMs: 2_000 })
  persistences.push(made)
  return made
}

beforeAll(async () => {
  // A fresh berth, with a key of the tenant and user the fixtures were written by.
  server = await startBerthServer(['--rate-per-tenant', '0'])
  client = new BerthClient({ baseUrl: server.url, apiKey: server.createKey('dsh', 'agent', 'service') })
  for (const file of files) {
    const imported = await client.importSessions(readFileSync(resolve(fixtures, file), 'utf8'))
    expect(imported.sessions.map((s) => s.header.id)).toEqual([expected[file]?.berthId])
  }
})

afterAll(async () => {
  await Promise.allSettled(persistences.map((p) => p.close()))
  await server?.stop()
})

describe('sessions in the old layout (all dsh/event), imported from fixtures', () => {
  it.each(files)('%s: a read handle, stat and list read exactly what the adapter read before', async (file) => {
    const want = expected[file] as Expected
    const p = persistence()
    const reader = await p.open(want.id, 'read')
    expect(reader.header).toEqual(want.header)
    const events = await reader.read(0)
    expect(events.map((e) => JSON.stringify(e))).toEqual(want.events)
    expect((await reader.read(3, 2)).map((e) => JSON.stringify(e))).toEqual(want.events.slice(3, 5))
    await reader.close()
    const stat = await p.stat(want.id)
    expect(stat?.header).toEqual(want.header)
    expect(stat?.eventCount).toBe(want.eventCount)
    const listed = await p.list()
    expect(listed.find((s) => s.header.id === want.id)?.header).toEqual(want.header)
  })

  it('a write handle reads it exactly, and continues it in the new layout: one log, read back exactly', async () => {
    const want = expected['dsh-handle.jsonl'] as Expected
    const writer = await persistence().open(want.id, 'write')
    const old = await writer.read(0)
    expect(old.map((e) => JSON.stringify(e))).toEqual(want.events)
    // The old log is balanced: the harness's repair has nothing to add.
    expect(interruptedTurnClosers(old as unknown as HarnessEvent[])).toEqual([])
    const next = old.length
    const added: SessionEvent[] = [
      { type: 'turn/start', seq: next, time: 1_790_000_000_000, data: { turn: 3 } },
      { type: 'user/message', seq: next + 1, time: 1_790_000_000_001, surfaceOp: 'append', data: { id: 'u3', role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text: 'Thanks!' }] } },
      { type: 'turn/end', seq: next + 2, time: 1_790_000_000_002, data: { turn: 3, reason: { kind: 'completed' } } },
    ]
    await writer.append(added)
    await writer.close()

    const again = await persistence().open(want.id, 'read')
    const all = await again.read(0)
    expect(all.map((e) => JSON.stringify(e))).toEqual([...want.events, ...added.map((e) => JSON.stringify(e))])
    await again.close()

    // On berth: the old events as they were, the new ones as berth's vocabulary.
    const stored = (await client.readEvents(want.berthId, { from: 0 })).events
    expect(stored[0]).toMatchObject({ type: 'dsh/header', ignorable: true })
    expect(new Set(stored.slice(1, next + 1).map((e) => e.type))).toEqual(new Set(['dsh/event']))
    expect(stored.slice(next + 1).map((e) => [e.type, e.ignorable ?? false])).toEqual([['turn/start', false], ['user/message', false], ['turn/end', false]])
    expect(stored[next + 2]?.data).toEqual({ content: [{ type: 'text', text: 'Thanks!' }], dsh: JSON.stringify(added[1]) })
  })
})
