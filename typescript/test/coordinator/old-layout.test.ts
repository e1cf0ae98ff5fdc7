/**
 * Old layouts keep reading, on the rc.8 seam (Node 22): a session `BerthCoordinatorBackend`
 * wrote before the vocabulary mapping (live writes, the coordinator's own crash-repair
 * closers, a resume's seed boundary: `fixtures/capture-dsh-fixtures.mjs`), exported with
 * `exportSession(id, 'jsonl')` into `fixtures/dsh-coordinator.jsonl` and imported here into
 * a fresh berth (with the handle seam's two, written in the same tenant), reads exactly as
 * it read then, and continues in the new layout.
 */
import { readFileSync } from 'node:fs'
import { resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import { SessionStore, SessionId, type SessionHeader } from '@deepseek-ai/dsh-session'
import { BerthClient } from '../../src/index.js'
import { BerthCoordinatorBackend } from '../../src/dsh-coordinator/index.js'
import { startBerthServer, type BerthServer } from '../support/berth-server.js'

const fixtures = resolve(dirname(fileURLToPath(import.meta.url)), '../fixtures')
interface Expected { id: string; berthId: string; header: SessionHeader; events: string[]; listed: SessionHeader[] }
const expected = (JSON.parse(readFileSync(resolve(fixtures, 'dsh-fixtures.expected.json'), 'utf8')) as Record<string, Expected>)['dsh-coordinator.jsonl'] as Expected
const id = SessionId(expected.id)

let server: BerthServer
let config: { baseUrl: string; apiKey: string }
const contexts: Context[] = []

async function backend(): Promise<{ ctx: Context; persistence: BerthCoordinatorBackend }> {
  const ctx = new Context()
  contexts.push(ctx)
  ctx.plugin(SessionStore)
  await ctx.plugin(BerthCoordinatorBackend, config)
  await new Promise((r) => setTimeout(r, 0))
  return { ctx, persistence: ctx.get('sessionPersistence') as BerthCoordinatorBackend }
}

beforeAll(async () => {
  server = await startBerthServer(['--rate-per-tenant', '0'])
  config = { baseUrl: server.url, apiKey: server.createKey('dsh', 'agent', 'service') }
  // All three fixtures were in one tenant when captured (the listing there listed them all).
  for (const file of ['dsh-coordinator.jsonl', 'dsh-handle.jsonl', 'dsh-handle-encoded-id.jsonl']) {
    await new BerthClient(config).importSessions(readFileSync(resolve(fixtures, file), 'utf8'))
  }
})

afterAll(async () => {
  for (const ctx of contexts) await (ctx as unknown as { fiber: { dispose(): Promise<void> } }).fiber.dispose()
  await server?.stop()
})

it('the old layout reads exactly as before: readFrom, load (nothing to repair), inspect, listSnapshots', async () => {
  const { persistence } = await backend()
  const read = await persistence.readFrom(id, 0)
  expect(read.meta).toEqual(expected.header)
  expect(read.events.map((e) => JSON.stringify(e))).toEqual(expected.events)
  expect((await persistence.readFrom(id, 19)).events.map((e) => JSON.stringify(e))).toEqual(expected.events.slice(19))
  const loaded = await persistence.load(id)
  expect(loaded.events.map((e) => JSON.stringify(e))).toEqual(expected.events)
  expect((await persistence.inspect(id)).events.map((e) => JSON.stringify(e))).toEqual(expected.events)
  const byId = (headers: SessionHeader[]): SessionHeader[] => [...headers].sort((a, b) => a.id.localeCompare(b.id))
  expect(byId((await persistence.listSnapshots()).map((s) => s.header))).toEqual(byId(expected.listed))
})

it('a resume continues it in the new layout: old and new read back as one log', async () => {
  const { ctx, persistence } = await backend()
  const preparation = await persistence.prepare(id)
  const session = preparation.session
  const detach = ctx.sessions.enter(session)
  ctx.sessions.announce(session)
  preparation[Symbol.dispose]()
  session.append('turn/start', { turn: 4 })
  await ctx.sessions.flush(session)
  detach()
  const fresh = await backend()
  const read = await fresh.persistence.readFrom(id, 0)
  const added = read.events.slice(expected.events.length)
  expect(read.events.slice(0, expected.events.length).map((e) => JSON.stringify(e))).toEqual(expected.events)
  expect(added.map((e) => e.type)).toEqual(['session/end-seed', 'turn/start'])
  const stored = (await fresh.persistence.client.readEvents(expected.berthId, { from: expected.events.length + 1 })).events
  expect(stored.map((e) => [e.type, e.ignorable ?? false])).toEqual([['dsh/event', true], ['turn/start', false]])
  expect(stored[1]?.data).toEqual({ turn: 4 }) // a boundary: its fields are the whole harness event
})
