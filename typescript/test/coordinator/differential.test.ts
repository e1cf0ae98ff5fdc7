/**
 * Differential suite for the published seam (`@deepseek-ai/dsh-session-persistence`
 * 0.1.0-rc.8, Node ≥ 22): every scenario runs against the npm JSONL backend rc.8 and
 * against `BerthCoordinatorBackend` over a real `berth serve`, asserts the same
 * expectations on each, and then asserts that both produced the same transcript (every
 * observable answer, revision tokens replaced by which earlier token they equal).
 * Written for berth; no upstream test is copied.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import { afterAll, describe, expect, it } from 'vitest'
import { inject } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import { SessionStore, type SessionEvent, type SessionHeader, type SessionId } from '@deepseek-ai/dsh-session'
import type { SessionPersistence } from '@deepseek-ai/dsh-session-persistence'
import { JsonlSessionPersistence } from '@deepseek-ai/dsh-session-persistence-jsonl'
import { BerthCoordinatorBackend } from '../../src/dsh-coordinator/index.js'

/** The service with plain-string ids (the seam brands `SessionId`; the fixtures use literals). */
type LoosePersistence = {
  [K in keyof SessionPersistence]: SessionPersistence[K] extends (id: SessionId, ...rest: infer R) => infer T ? (id: string, ...rest: R) => T : SessionPersistence[K]
}

interface Instance {
  readonly ctx: Context
  readonly persistence: LoosePersistence
  dispose(): Promise<void>
}

/** One storage (a JSONL root, or a berth namespace) that instances ("processes") open. */
interface Storage {
  readonly name: string
  open(): Promise<Instance>
}

const scratchDirs: string[] = []
afterAll(() => {
  for (const dir of scratchDirs) rmSync(dir, { recursive: true, force: true })
})

async function mount(plugin: (ctx: Context) => unknown): Promise<Instance> {
  const ctx = new Context()
  ctx.plugin(SessionStore)
  await (plugin(ctx) as Promise<unknown>)
  await new Promise((r) => setTimeout(r, 0))
  const persistence = ctx.get('sessionPersistence') as SessionPersistence | undefined
  if (persistence === undefined) throw new Error('the backend did not register ctx.sessionPersistence')
  return {
    ctx,
    persistence: persistence as unknown as LoosePersistence,
    async dispose() {
      await (ctx as unknown as { fiber: { dispose(): Promise<void> } }).fiber.dispose()
    },
  }
}

const storages: Record<string, () => Storage> = {
  'jsonl rc.8': () => {
    const root = mkdtempSync(join(tmpdir(), 'dsh-jsonl-'))
    scratchDirs.push(root)
    return { name: 'jsonl rc.8', open: () => mount((ctx) => ctx.plugin(JsonlSessionPersistence, { root, compression: 'none' })) }
  },
  berth: () => {
    const namespace = `d${randomUUID().slice(0, 8)}.`
    const config = { baseUrl: inject('berthUrl'), apiKey: inject('berthServiceKey'), namespace }
    return { name: 'berth', open: () => mount((ctx) => ctx.plugin(BerthCoordinatorBackend, config)) }
  },
}

/** Records every answer; revisions become `rev#N` by first appearance, so equal tokens stay equal. */
class Transcript {
  readonly entries: unknown[] = []
  private readonly revisions = new Map<string, string>()

  revision(value: string): string {
    if (!this.revisions.has(value)) this.revisions.set(value, `rev#${this.revisions.size}`)
    return this.revisions.get(value) as string
  }

  record(label: string, value: unknown): void {
    this.entries.push([label, JSON.parse(JSON.stringify(value ?? null)) as unknown])
  }

  async outcome<T>(label: string, action: () => Promise<T>, shape: (value: T) => unknown = (v) => v): Promise<T | undefined> {
    try {
      const value = await action()
      this.record(label, { ok: shape(value) })
      return value
    } catch (error) {
      this.record(label, { error: describeError(error) })
      return undefined
    }
  }
}

function describeError(error: unknown): { name: string; message: string } {
  const name = error instanceof Error ? error.constructor.name : typeof error
  const message = error instanceof Error ? error.message : String(error)
  // Backend-specific locations are not part of the contract (JSONL names its file; berth has none on the caller's disk).
  return { name, message: message.replace(/ \(raw log: [^)]*\)/g, '').replace(/ at \/\S+/g, '') }
}

function header(id: string, cwd = '/work/project'): SessionHeader {
  return { version: 0, id, createdAt: 1000, cwd } as SessionHeader
}

function completedTurn(from: number, turn: number): SessionEvent[] {
  return [
    { type: 'turn/start', seq: from, time: 10 + from, data: { turn } },
    { type: 'user/message', seq: from + 1, time: 10 + from, data: { id: `u${turn}`, role: 'user', source: { kind: 'human' }, content: [{ type: 'text', text: `question ${turn}` }] }, surfaceOp: 'append' },
    { type: 'turn/end', seq: from + 2, time: 10 + from, data: { turn, reason: { kind: 'completed' } } },
  ] as SessionEvent[]
}

function interruptedTurn(from: number, turn: number): SessionEvent[] {
  return [
    { type: 'turn/start', seq: from, time: 50, data: { turn } },
    { type: 'user/message', seq: from + 1, time: 51, data: { id: `u${turn}`, role: 'user', source: { kind: 'human' }, content: [{ type: 'text', text: 'run ls' }] }, surfaceOp: 'append' },
    { type: 'step/start', seq: from + 2, time: 52, data: { turn, step: 1 } },
  ] as SessionEvent[]
}

const summary = (inspection: { meta: SessionHeader; events: readonly SessionEvent[] }): unknown => ({ meta: inspection.meta, events: inspection.events })

type Scenario = (storage: Storage, transcript: Transcript) => Promise<void>

/** Runs one scenario on both storages, then compares their transcripts. */
function differential(name: string, scenario: Scenario): void {
  describe(name, () => {
    const transcripts: Record<string, Transcript> = {}
    for (const backend of Object.keys(storages)) {
      it(`on ${backend}`, async () => {
        const transcript = new Transcript()
        await scenario((storages[backend] as () => Storage)(), transcript)
        transcripts[backend] = transcript
      })
    }
    it('both backends answered the same', () => {
      const [jsonl, berth] = [transcripts['jsonl rc.8'], transcripts.berth]
      expect(jsonl, 'the jsonl run failed').toBeDefined()
      expect(berth, 'the berth run failed').toBeDefined()
      expect(berth?.entries).toEqual(jsonl?.entries)
    })
  })
}

describe('differential: rc.8 coordinator seam, npm JSONL backend vs BerthCoordinatorBackend', () => {
  differential('create is lazy: nothing is listed or loadable until the first append', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('lazy'))
    const listed = await t.outcome('list after create', () => a.persistence.list())
    expect(listed).toEqual([])
    const other = await storage.open()
    await t.outcome('load from another instance', () => other.persistence.load('lazy'), summary)
    await a.persistence.append('lazy', completedTurn(0, 1))
    const afterAppend = await t.outcome('list after append', () => other.persistence.list())
    expect(afterAppend?.map((h) => h.id)).toEqual(['lazy'])
    await a.dispose()
    await other.dispose()
  })

  differential('append then load round-trips the exact events and header', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('rt'))
    const events = [...completedTurn(0, 1), ...completedTurn(3, 2)]
    await a.persistence.append('rt', events.slice(0, 3))
    await a.persistence.append('rt', events.slice(3))
    await a.dispose()
    const b = await storage.open()
    const loaded = await t.outcome('load', () => b.persistence.load('rt'), summary)
    expect(loaded?.events).toEqual(events)
    expect(loaded?.events.map((e) => JSON.stringify(e))).toEqual(events.map((e) => JSON.stringify(e)))
    await t.outcome('readFrom 4', () => b.persistence.readFrom('rt', 4))
    await t.outcome('readFrom past the end', () => b.persistence.readFrom('rt', 60))
    await t.outcome('inspect', () => b.persistence.inspect('rt'), summary)
    await b.dispose()
  })

  differential('exact text: key order, number lexemes and unicode survive', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('exact'))
    const odd = { type: 'user/message', seq: 1, time: 11, surfaceOp: 'append', data: { role: 'user', id: 'u1', source: { kind: 'human' }, content: [{ type: 'text', text: 'é 🚀 "quoted" \\ back' }], z: 1.5, a: 0.1, big: 12345678901234 } } as unknown as SessionEvent
    const batch = [{ type: 'turn/start', seq: 0, time: 10, data: { turn: 1 } } as SessionEvent, odd]
    await a.persistence.append('exact', batch)
    await a.dispose()
    const b = await storage.open()
    const loaded = await t.outcome('readFrom 0', () => b.persistence.readFrom('exact', 0))
    expect(loaded?.events.map((e) => JSON.stringify(e))).toEqual(batch.map((e) => JSON.stringify(e)))
    await b.dispose()
  })

  differential('append refuses a non-contiguous batch and non-JSON data, storing nothing', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('refuse'))
    await a.persistence.append('refuse', completedTurn(0, 1))
    await t.outcome('gap', () => a.persistence.append('refuse', completedTurn(4, 2)))
    await t.outcome('stale', () => a.persistence.append('refuse', completedTurn(0, 2)))
    await t.outcome('bigint', () => a.persistence.append('refuse', [{ type: 'turn/start', seq: 3, time: 1, data: { turn: 2n } } as unknown as SessionEvent]))
    await a.dispose()
    const b = await storage.open()
    const loaded = await t.outcome('load', () => b.persistence.load('refuse'), summary)
    expect(loaded?.events).toEqual(completedTurn(0, 1))
    await b.dispose()
  })

  differential('duplicate create rejects, in one instance and against a stored session', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('dup'))
    await t.outcome('second create, same instance', () => a.persistence.create(header('dup')))
    await a.persistence.append('dup', completedTurn(0, 1))
    await a.dispose()
    const b = await storage.open()
    await t.outcome('create over a stored session', () => b.persistence.create(header('dup')))
    await b.dispose()
  })

  differential('a fresh instance continues the stored log', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('cont'))
    await a.persistence.append('cont', completedTurn(0, 1))
    await a.dispose()
    const b = await storage.open()
    await t.outcome('load', () => b.persistence.load('cont'), summary)
    await t.outcome('append at 3', () => b.persistence.append('cont', completedTurn(3, 2)))
    await t.outcome('append at 3 again', () => b.persistence.append('cont', completedTurn(3, 3)))
    await b.dispose()
    const c = await storage.open()
    const loaded = await t.outcome('load again', () => c.persistence.load('cont'), summary)
    expect(loaded?.events.map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5])
    await c.dispose()
  })

  differential('load durably closes an interrupted turn; inspect balances in memory only', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('crash'))
    await a.persistence.append('crash', [...completedTurn(0, 1), ...interruptedTurn(3, 2)])
    await a.dispose()
    const b = await storage.open()
    const inspected = await t.outcome('inspect (cold)', () => b.persistence.inspect('crash'), summary)
    expect(inspected?.events.at(-1)?.type).toBe('turn/end')
    await b.dispose()
    const c = await storage.open()
    const raw = await t.outcome('readFrom after inspect', () => c.persistence.readFrom('crash', 0))
    expect(raw?.events.length).toBe(6)
    const loaded = await t.outcome('load', () => c.persistence.load('crash'), summary)
    expect(loaded?.events.slice(6).map((e) => e.type)).toEqual(['step/end', 'turn/end'])
    await c.dispose()
    const d = await storage.open()
    const durable = await t.outcome('readFrom after load', () => d.persistence.readFrom('crash', 0))
    expect(durable?.events.length).toBe(8)
    await t.outcome('load repairs nothing twice', () => d.persistence.load('crash'), (v) => v.events.length)
    await d.dispose()
  })

  differential('listSnapshots: stable revisions that change with an append, not with a read', async (storage, t) => {
    const a = await storage.open()
    for (const id of ['l1', 'l2']) {
      await a.persistence.create(header(id))
      await a.persistence.append(id, completedTurn(0, 1))
    }
    const shape = (snapshots: { header: SessionHeader; revision: string }[]): unknown =>
      [...snapshots].sort((x, y) => x.header.id.localeCompare(y.header.id)).map((s) => ({ header: s.header, revision: t.revision(s.revision) }))
    const first = await t.outcome('snapshots', () => a.persistence.listSnapshots(), shape)
    await a.persistence.load('l1')
    const second = await t.outcome('snapshots after a load', () => a.persistence.listSnapshots(), shape)
    expect(shape(second ?? [])).toEqual(shape(first ?? []))
    await a.persistence.append('l1', completedTurn(3, 2))
    const third = await t.outcome('snapshots after an append', () => a.persistence.listSnapshots(), shape)
    const revisionOf = (list: typeof first, id: string): string | undefined => list?.find((s) => s.header.id === id)?.revision
    expect(revisionOf(third, 'l1')).not.toBe(revisionOf(first, 'l1'))
    expect(revisionOf(third, 'l2')).toBe(revisionOf(first, 'l2'))
    await t.outcome('list', () => a.persistence.list(), (headers) => [...headers].sort((x, y) => x.id.localeCompare(y.id)))
    await a.dispose()
  })

  differential('fail-closed vocabulary: an unknown required type refuses, an ignorable one is kept', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('vocab'))
    await a.persistence.append('vocab', [...completedTurn(0, 1), { type: 'mystery/event', seq: 3, time: 1, data: {} } as unknown as SessionEvent])
    await a.persistence.create(header('vocab-ok'))
    await a.persistence.append('vocab-ok', [...completedTurn(0, 1), { type: 'plugin/note', seq: 3, time: 1, data: {}, ignorable: true } as unknown as SessionEvent])
    await a.dispose()
    const b = await storage.open()
    await t.outcome('load unknown', () => b.persistence.load('vocab'), summary)
    await t.outcome('inspect unknown', () => b.persistence.inspect('vocab'), summary)
    const kept = await t.outcome('load ignorable', () => b.persistence.load('vocab-ok'), summary)
    expect(kept?.events.at(-1)?.type).toBe('plugin/note')
    await b.dispose()
  })

  differential('absent sessions: load, inspect and readFrom refuse alike', async (storage, t) => {
    const a = await storage.open()
    await t.outcome('load', () => a.persistence.load('nobody'), summary)
    await t.outcome('inspect', () => a.persistence.inspect('nobody'), summary)
    await t.outcome('readFrom', () => a.persistence.readFrom('nobody', 0))
    await t.outcome('snapshots', () => a.persistence.listSnapshots())
    await a.dispose()
  })

  differential('live sessions: write-behind until the window or a flush, then durable for a fresh instance', async (storage, t) => {
    const a = await storage.open()
    const session = a.ctx.sessions.create('live' as SessionId, { meta: { cwd: '/work/project' } })
    session.append('turn/start', { turn: 1 })
    const observer = await storage.open()
    await t.outcome('before the window', () => observer.persistence.list())
    const flushed = await t.outcome('flush', () => a.ctx.sessions.flush(session))
    expect(flushed).toBe(true)
    const stored = await t.outcome('after flush', () => observer.persistence.readFrom('live', 0), (v) => v.events.map((e) => [e.seq, e.type]))
    expect(stored?.events.map((e) => e.type)).toEqual(['turn/start'])
    session.append('turn/end', { turn: 1, reason: { kind: 'completed' } })
    await new Promise((r) => setTimeout(r, 600))
    await t.outcome('after the window', () => observer.persistence.readFrom('live', 0), (v) => v.events.map((e) => [e.seq, e.type]))
    await a.dispose()
    await t.outcome('after dispose', () => observer.persistence.readFrom('live', 0), (v) => v.events.map((e) => [e.seq, e.type]))
    await observer.dispose()
  })

  differential('resume: prepare a stored session, continue it live, and persist only the new suffix', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('resume'))
    await a.persistence.append('resume', completedTurn(0, 1))
    await a.dispose()
    const b = await storage.open()
    const preparation = await b.persistence.prepare('resume')
    const session = preparation.session
    t.record('prepared events', session.events.map((e) => [e.seq, e.type]))
    const detach = b.ctx.sessions.enter(session)
    b.ctx.sessions.announce(session)
    preparation[Symbol.dispose]()
    session.append('turn/start', { turn: 2 })
    await t.outcome('flush the resumed session', () => b.ctx.sessions.flush(session))
    detach()
    const c = await storage.open()
    const stored = await t.outcome('stored after resume', () => c.persistence.readFrom('resume', 0), (v) => v.events.map((e) => [e.seq, e.type]))
    // The stored turn, the constructor's seed boundary, then the new live event only.
    expect(stored?.events.map((e) => e.type)).toEqual(['turn/start', 'user/message', 'turn/end', 'session/end-seed', 'turn/start'])
    await c.dispose()
    await b.dispose()
  })

  differential('ids of any characters and any length round-trip and list as themselves', async (storage, t) => {
    const a = await storage.open()
    const ids = ['plain-id', 'with/slash and space', 'ünïcödé 🚀', '..', `long-${'x'.repeat(200)}`]
    for (const id of ids) {
      await a.persistence.create(header(id))
      await a.persistence.append(id, completedTurn(0, 1))
    }
    await a.dispose()
    const b = await storage.open()
    const listed = await t.outcome('list', () => b.persistence.list(), (headers) => headers.map((h) => h.id).sort())
    expect(listed?.map((h) => h.id).sort()).toEqual([...ids].sort())
    for (const id of ids) await t.outcome(`load ${id.slice(0, 20)}`, () => b.persistence.load(id), (v) => ({ id: v.meta.id, events: v.events.length }))
    await b.dispose()
  })

  differential('one append of 2,500 events (more than a berth batch holds) stays whole and ordered', async (storage, t) => {
    const a = await storage.open()
    await a.persistence.create(header('big'))
    const events: SessionEvent[] = []
    for (let turn = 1; events.length < 2_499; turn++) events.push(...completedTurn(events.length, turn))
    await t.outcome('append', () => a.persistence.append('big', events))
    await a.dispose()
    const b = await storage.open()
    const loaded = await t.outcome('readFrom 0', () => b.persistence.readFrom('big', 0), (v) => v.events.length)
    expect(loaded?.events).toEqual(events)
    await t.outcome('readFrom 1234', () => b.persistence.readFrom('big', 1234), (v) => v.events.map((e) => e.seq).slice(0, 3))
    await b.dispose()
  })
})
