/**
 * The storage contract of the handle seam (`dsh.md` §3.1, 20 clauses), written here as
 * berth's own contract bodies and run against `BerthHandlePersistence` over a real
 * `berth serve`. "A fresh instance" (the seam's `reopen`) is a second persistence over
 * the same server: what another process would see.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { readdirSync, statSync, appendFileSync } from 'node:fs'
import { join } from 'node:path'
import {
  BerthHandlePersistence,
  SessionAlreadyExistsError,
  SessionAlreadyOwnedError,
  SessionFormatUnsupportedError,
  SessionHandleClosedError,
  SessionPersistenceNotFoundError,
  SessionReadOnlyError,
  type SessionEvent,
} from '../src/dsh/index.js'
import { startBerthServer } from './support/berth-server.js'
import { freshNamespace, makePersistence, meta, oneTurnLog, secondTurn, seqs, event, serverClient } from './support/dsh-fixtures.js'
import { BerthClient } from '../src/index.js'

let namespace: string
let persistence: BerthHandlePersistence
const opened: BerthHandlePersistence[] = []

function reopen(): BerthHandlePersistence {
  const fresh = makePersistence(namespace)
  opened.push(fresh)
  return fresh
}

beforeEach(() => {
  namespace = freshNamespace()
  persistence = makePersistence(namespace)
  opened.push(persistence)
})

afterEach(async () => {
  await Promise.allSettled(opened.splice(0).map((p) => p.close()))
})

describe('handle seam contract (dsh.md §3.1) on berth', () => {
  it('1 round-trips through one write handle: append, self-read, offset/length defaults', async () => {
    const handle = await persistence.create(meta('s1'))
    expect(handle.access).toBe('write')
    expect(handle.id).toBe('s1')
    expect(handle.header).toEqual(meta('s1'))
    await handle.append([])
    await handle.append(oneTurnLog())
    expect(await handle.read()).toEqual(oneTurnLog())
    expect(seqs(await handle.read(3))).toEqual([3, 4, 5])
    expect(seqs(await handle.read(0, 2))).toEqual([0, 1])
    expect(seqs(await handle.read(1, 3))).toEqual([1, 2, 3])
    expect(await handle.read(6)).toEqual([])
    expect(await handle.read(106)).toEqual([])
    const result = await handle.read()
    expect(Object.isFrozen(result)).toBe(true)
    expect(Object.isFrozen(result[3]?.data)).toBe(true)
    await handle.flush()
    await handle.close()
    // The same through a read handle of a fresh instance: the exact events, from berth.
    const reader = await reopen().open('s1', 'read')
    expect(await reader.read()).toEqual(oneTurnLog())
    expect(seqs(await reader.read(1, 3))).toEqual([1, 2, 3])
    expect(await reader.read(6)).toEqual([])
  })

  it('2 read rejects negative or fractional offsets and lengths', async () => {
    const handle = await persistence.create(meta('s2'))
    await handle.append(oneTurnLog())
    await expect(handle.read(-1)).rejects.toThrow(/non-negative safe integer/)
    await expect(handle.read(1.5)).rejects.toThrow(/non-negative safe integer/)
    await expect(handle.read(0, -1)).rejects.toThrow(/non-negative safe integer/)
    const reader = await persistence.open('s2', 'read')
    await expect(reader.read(-1)).rejects.toThrow(/non-negative safe integer/)
    await expect(reader.read(0, 0.5)).rejects.toThrow(/non-negative safe integer/)
  })

  it('3 duplicate create rejects against a live pending session and allows the id after an erasing close', async () => {
    const first = await persistence.create(meta('s3'))
    await expect(persistence.create(meta('s3'))).rejects.toBeInstanceOf(SessionAlreadyExistsError)
    await first.close()
    const second = await persistence.create(meta('s3'))
    await second.append(oneTurnLog())
    expect(await second.read()).toEqual(oneTurnLog())
  })

  it('4 concurrent duplicate creates: one wins, the loser rejects SessionAlreadyExistsError', async () => {
    const results = await Promise.allSettled([persistence.create(meta('s4')), persistence.create(meta('s4'))])
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1)
    const rejected = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
    expect(rejected).toHaveLength(1)
    expect(rejected[0]?.reason).toBeInstanceOf(SessionAlreadyExistsError)
  })

  it('5 duplicate create rejects against a materialized artifact seen by a fresh instance', async () => {
    const handle = await persistence.create(meta('s5'))
    await handle.append(oneTurnLog())
    await handle.close()
    await expect(reopen().create(meta('s5'))).rejects.toBeInstanceOf(SessionAlreadyExistsError)
  })

  it('6 open of an absent session rejects with SessionPersistenceNotFoundError for both accesses', async () => {
    await expect(persistence.open('absent', 'read')).rejects.toBeInstanceOf(SessionPersistenceNotFoundError)
    await expect(persistence.open('absent', 'write')).rejects.toBeInstanceOf(SessionPersistenceNotFoundError)
    // The failed write open left no claim behind.
    await expect(persistence.open('absent', 'write')).rejects.toBeInstanceOf(SessionPersistenceNotFoundError)
  })

  it('7 write ownership is single-holder per instance and released by close', async () => {
    const creator = await persistence.create(meta('s7'))
    await expect(persistence.open('s7', 'write')).rejects.toBeInstanceOf(SessionAlreadyOwnedError)
    await creator.append(oneTurnLog())
    await expect(persistence.open('s7', 'write')).rejects.toBeInstanceOf(SessionAlreadyOwnedError)
    await creator.close()
    const writer = await persistence.open('s7', 'write')
    await writer.append(secondTurn())
    expect(seqs(await writer.read())).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
  })

  it('8 a read handle refuses append and flush with SessionReadOnlyError', async () => {
    const writer = await persistence.create(meta('s8'))
    await writer.append(oneTurnLog())
    const reader = await persistence.open('s8', 'read')
    expect(reader.access).toBe('read')
    await expect(reader.append(secondTurn())).rejects.toBeInstanceOf(SessionReadOnlyError)
    await expect(reader.flush()).rejects.toBeInstanceOf(SessionReadOnlyError)
    expect(() => reader.publish(event(6))).toThrow(SessionReadOnlyError)
    expect(await reader.read()).toEqual(oneTurnLog())
  })

  it('9 operations on a closed handle reject; close is idempotent; asyncDispose releases ownership', async () => {
    const handle = await persistence.create(meta('s9'))
    await handle.append(oneTurnLog())
    await handle.close()
    await handle.close()
    await expect(handle.read()).rejects.toBeInstanceOf(SessionHandleClosedError)
    await expect(handle.append(secondTurn())).rejects.toBeInstanceOf(SessionHandleClosedError)
    await expect(handle.flush()).rejects.toBeInstanceOf(SessionHandleClosedError)
    {
      const writer = await persistence.open('s9', 'write')
      await writer[Symbol.asyncDispose]()
    }
    const again = await persistence.open('s9', 'write')
    expect(seqs(await again.read())).toEqual([0, 1, 2, 3, 4, 5])
  })

  it('10 service-level flush materializes every active write handle and counts a closing one as flushed', async () => {
    const kept = await persistence.create(meta('s10a'))
    const closing = await persistence.create(meta('s10b'))
    const closed = closing.close()
    await persistence.flush()
    await closed
    const fresh = reopen()
    expect((await fresh.stat('s10a'))?.header).toEqual(meta('s10a'))
    expect(await fresh.stat('s10b')).toBeUndefined()
    expect(await (await fresh.open('s10a', 'read')).read()).toEqual([])
    await kept.close()
  })

  it('11 a created-but-unappended session is visible to this instance and invisible to a fresh one', async () => {
    const handle = await persistence.create(meta('s11'))
    expect(await handle.read()).toEqual([])
    expect((await persistence.stat('s11'))?.header).toEqual(meta('s11'))
    expect((await persistence.list()).map((s) => s.header.id)).toContain('s11')
    expect(await (await persistence.open('s11', 'read')).read()).toEqual([])
    const fresh = reopen()
    expect(await fresh.stat('s11')).toBeUndefined()
    expect((await fresh.list()).map((s) => s.header.id)).not.toContain('s11')
    await expect(fresh.open('s11', 'read')).rejects.toBeInstanceOf(SessionPersistenceNotFoundError)
  })

  it('12 close without an append erases the created session from this instance', async () => {
    const handle = await persistence.create(meta('s12'))
    await handle.close()
    expect(await persistence.stat('s12')).toBeUndefined()
    expect((await persistence.list()).map((s) => s.header.id)).not.toContain('s12')
    await expect(persistence.open('s12', 'read')).rejects.toBeInstanceOf(SessionPersistenceNotFoundError)
  })

  it('13 flush materializes an empty session durably for a fresh instance', async () => {
    const handle = await persistence.create(meta('s13', '/work/project'))
    await handle.flush()
    await handle.close()
    const fresh = reopen()
    const listed = (await fresh.list()).find((s) => s.header.id === 's13')
    expect(listed?.header).toEqual(meta('s13', '/work/project'))
    expect(await fresh.stat('s13')).toEqual(listed)
    expect(await (await fresh.open('s13', 'read')).read()).toEqual([])
  })

  it('14 freshness: reads started after an append resolves observe that prefix on any handle', async () => {
    const writer = await persistence.create(meta('s14'))
    await writer.append(oneTurnLog())
    const earlyReader = await persistence.open('s14', 'read')
    expect(await earlyReader.read()).toEqual(oneTurnLog())
    await writer.append(secondTurn())
    expect(seqs(await earlyReader.read())).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
    const lateReader = await reopen().open('s14', 'read')
    expect(seqs(await lateReader.read())).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
  })

  it('15 a fresh instance continues the stored log at the committed next-seq', async () => {
    const writer = await persistence.create(meta('s15'))
    await writer.append(oneTurnLog())
    await writer.close()
    const resumed = await reopen().open('s15', 'write')
    expect(await resumed.read()).toEqual(oneTurnLog())
    await resumed.append(secondTurn())
    expect(seqs(await (await reopen().open('s15', 'read')).read())).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
  })

  it('16 append rejects a batch that does not contiguously continue the log, naming the expected seq', async () => {
    const writer = await persistence.create(meta('s16'))
    await writer.append(oneTurnLog())
    await expect(writer.append(oneTurnLog())).rejects.toThrow(/expected 6/)
    await expect(writer.append([event(6), event(8)])).rejects.toThrow(/expected 7/)
    expect(await writer.read()).toEqual(oneTurnLog())
    expect(await (await reopen().open('s16', 'read')).read()).toEqual(oneTurnLog())
  })

  it('17 append rejects non-JSON-serializable event data without storing anything', async () => {
    const writer = await persistence.create(meta('s17'))
    await expect(writer.append([{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1n } }])).rejects.toThrow(TypeError)
    await expect(writer.append([{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1n } }])).rejects.toThrow(/losslessly JSON-serializable/)
    await expect(writer.append([{ type: 'turn/start', seq: 0, time: 1, data: undefined }])).rejects.toThrow(/losslessly JSON-serializable/)
    for (const data of [Infinity, () => 1, Symbol('s'), new Map(), new Date(0)]) {
      await expect(writer.append([{ type: 'turn/start', seq: 0, time: 1, data }])).rejects.toThrow(/losslessly JSON-serializable/)
    }
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    await expect(writer.append([{ type: 'turn/start', seq: 0, time: 1, data: cyclic }])).rejects.toThrow(/losslessly JSON-serializable/)
    // seq 0 is still free.
    await writer.append(oneTurnLog())
    expect(await writer.read()).toEqual(oneTurnLog())
  })

  it('18 vocabulary fail-closed: an unknown stored event type refuses reads and write opens', async () => {
    const writer = await persistence.create(meta('s18'))
    const mystery: SessionEvent = { type: 'mystery/event', seq: 6, time: 3000, data: { what: 'newer harness' } }
    await writer.append([...oneTurnLog(), mystery])
    await writer.close()
    const fresh = reopen()
    await expect(fresh.open('s18', 'write')).rejects.toBeInstanceOf(SessionFormatUnsupportedError)
    // Twice: the failed open released its claim (and its berth run).
    await expect(fresh.open('s18', 'write')).rejects.toBeInstanceOf(SessionFormatUnsupportedError)
    const reader = await fresh.open('s18', 'read')
    await expect(reader.read()).rejects.toBeInstanceOf(SessionFormatUnsupportedError)
    await expect(reader.read()).rejects.toThrow(/mystery\/event/)
    // An unknown type its writer marked ignorable is kept.
    const tolerant = await fresh.create(meta('s18b'))
    const optional: SessionEvent = { type: 'plugin/note', seq: 0, time: 1, data: {}, ignorable: true }
    await tolerant.append([optional])
    await tolerant.close()
    expect(await (await reopen().open('s18b', 'write')).read()).toEqual([optional])
  })

  it('20 stat and list agree on stable revisions that change after an append', async () => {
    const writer = await persistence.create(meta('s20'))
    await writer.append(oneTurnLog())
    const first = await persistence.stat('s20')
    const second = await persistence.stat('s20')
    expect(first?.revision).toBe(second?.revision)
    expect((await persistence.list()).find((s) => s.header.id === 's20')?.revision).toBe(first?.revision)
    await writer.append(secondTurn())
    const third = await persistence.stat('s20')
    expect(third?.revision).not.toBe(first?.revision)
    expect((await persistence.list()).find((s) => s.header.id === 's20')?.revision).toBe(third?.revision)
    expect(third?.header).toEqual(writer.header)
    expect(third?.eventCount).toBe(8)
    expect(await persistence.stat('absent')).toBeUndefined()
    // Ownership churn leaves the revision alone.
    await writer.close()
    const reowned = await persistence.open('s20', 'write')
    expect((await persistence.stat('s20'))?.revision).toBe(third?.revision)
    await reowned.close()
    expect((await persistence.stat('s20'))?.revision).toBe(third?.revision)
  })
})

describe('handle seam on berth: beyond the clauses', () => {
  it('ids of any characters and any length map injectively onto berth ids and read back as themselves', async () => {
    const ids = ['plain', 'with/slash and space', 'ünïcödé 🚀', '..', '~tilde', `long-${'x'.repeat(300)}`, `long-${'x'.repeat(301)}`]
    for (const id of ids) {
      const handle = await persistence.create(meta(id))
      await handle.append([event(0)])
      await handle.close()
    }
    const berthIds = new Set(ids.map((id) => persistence.berthId(id)))
    expect(berthIds.size).toBe(ids.length)
    for (const berthId of berthIds) expect(berthId).toMatch(/^[A-Za-z0-9._~-]{1,128}$/)
    const fresh = reopen()
    expect((await fresh.list()).map((s) => s.header.id).sort()).toEqual([...ids].sort())
    for (const id of ids) {
      expect((await fresh.stat(id))?.header.id).toBe(id)
      expect(seqs(await (await fresh.open(id, 'read')).read())).toEqual([0])
    }
  })

  it('a title changed through berth does not change the header stat and list report', async () => {
    const handle = await persistence.create(meta('retitled'))
    await handle.append([event(0)])
    await handle.close()
    const client = serverClient()
    await client.updateSession(persistence.berthId('retitled'), { title: '{"version":0,"id":"someone-else","createdAt":1}' })
    const fresh = reopen()
    expect((await fresh.stat('retitled'))?.header).toEqual(meta('retitled'))
    expect((await fresh.list()).find((s) => s.header.id === 'retitled')?.header).toEqual(meta('retitled'))
    await client.updateSession(persistence.berthId('retitled'), { title: 'just a title' })
    expect((await fresh.stat('retitled'))?.header).toEqual(meta('retitled'))
  })

  it('an aborted signal refuses an operation before it starts, storing nothing', async () => {
    const aborted = AbortSignal.abort()
    await expect(persistence.create(meta('sig'), { signal: aborted })).rejects.toThrow(/abort/i)
    const handle = await persistence.create(meta('sig'))
    await expect(handle.append([event(0)], { signal: aborted })).rejects.toThrow(/abort/i)
    await expect(handle.flush({ signal: aborted })).rejects.toThrow(/abort/i)
    await expect(handle.read(0, undefined, { signal: aborted })).rejects.toThrow(/abort/i)
    await expect(persistence.stat('sig', { signal: aborted })).rejects.toThrow(/abort/i)
    await expect(persistence.list({ signal: aborted })).rejects.toThrow(/abort/i)
    await expect(persistence.open('sig', 'read', { signal: aborted })).rejects.toThrow(/abort/i)
    await handle.close()
    expect(await reopen().stat('sig')).toBeUndefined()
  })

  it('a header over 512 bytes (no title cache) still lists and stats', async () => {
    const cwd = `/${'deep/'.repeat(150)}`
    const handle = await persistence.create(meta('wide', cwd))
    await handle.flush()
    await handle.close()
    const fresh = reopen()
    expect((await fresh.stat('wide'))?.header.cwd).toBe(cwd)
    expect((await fresh.list()).find((s) => s.header.id === 'wide')?.header.cwd).toBe(cwd)
  })
})

describe('handle seam contract (dsh.md §3.1): the torn tail, on a restarted server', () => {
  it('19 a torn physical tail is never served and is durably truncated by the write path', async () => {
    const server = await startBerthServer(['--rate-per-tenant', '0'])
    let restarted: Awaited<ReturnType<typeof startBerthServer>> | undefined
    try {
      const key = server.createKey('torn', 'agent', 'service')
      const local = (url: string): BerthHandlePersistence => new BerthHandlePersistence({ client: new BerthClient({ baseUrl: url, apiKey: key }), namespace: 'torn.' })
      const first = local(server.url)
      const writer = await first.create(meta('s19'))
      await writer.append(oneTurnLog())
      await writer.close()
      // Stop the server (its write handles close), tear the log's tail on disk, start again.
      const dataDir = server.dataDir
      await server.stopProcess()
      const logs = findFiles(dataDir, 'session.jsonl')
      expect(logs.length).toBe(1)
      appendFileSync(logs[0] as string, '{"seq":7,"type":"dsh/event","da')
      restarted = await startBerthServer(['--rate-per-tenant', '0'], { dataDir })
      const reader = await local(restarted.url).open('s19', 'read')
      expect(await reader.read()).toEqual(oneTurnLog())
      const resumed = await local(restarted.url).open('s19', 'write')
      await resumed.append(secondTurn())
      await resumed.close()
      expect(seqs(await (await local(restarted.url).open('s19', 'read')).read())).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
    } finally {
      await restarted?.stop()
      await server.stop()
    }
  })
})

function findFiles(directory: string, name: string): string[] {
  const found: string[] = []
  for (const entry of readdirSync(directory)) {
    const path = join(directory, entry)
    if (statSync(path).isDirectory()) found.push(...findFiles(path, name))
    else if (entry === name) found.push(path)
  }
  return found
}
