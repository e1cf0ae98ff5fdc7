/**
 * `berth-store migrate dsh-jsonl:DIR` SIGKILLed mid-import (issue 56: "resumable after
 * kill -9"; Node >= 22). The real `dist/bin` process imports a harness-built root into a
 * real `berth serve`; it is killed at a point a seeded RNG picks (berth holding that many
 * of the events), its rerun is killed again further on, and a last rerun runs to the
 * end: it waits out the killed runs' leases, counts what the killed runs stored as
 * unchanged, and leaves every session on berth equal to the source through both
 * drop-ins — each event exactly once — and the source's bytes as they were.
 */
import type { ChildProcess } from 'node:child_process'
import { afterAll, expect, inject, it } from 'vitest'
import { BerthClient, NotFoundError } from '../../src/index.js'
import type { SessionEvent, SessionHeader } from '../../src/dsh/index.js'
import { materializeCreateHeader } from '../../src/dsh/storage-contract.js'
import {
  berthStore,
  bulkRoot,
  byId,
  freshNamespace,
  handlePersistence,
  harnessRoot,
  readBerthCoordinator,
  readBerthHandle,
  readJsonl,
  removeScratch,
  treeHash,
} from '../support/dsh-jsonl-roots.js'

afterAll(removeScratch)

/** The RNG's seed: the kill points are the same on every run (say it in a failure). */
const SEED = 0x0056_cafe

/** mulberry32: a small seeded RNG, uniform on [0, 1). */
function seeded(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Events (not the header) berth holds of each source session, by its seq: 0 for none, or an empty leftover record. */
async function held(namespace: string, ids: readonly string[]): Promise<Map<string, number>> {
  const persistence = handlePersistence(namespace)
  const out = new Map<string, number>()
  for (const id of ids) {
    try {
      out.set(id, Math.max(0, (await persistence.client.nextSeq(persistence.berthId(id))) - 1))
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error
      out.set(id, 0)
    }
  }
  return out
}

/** The source sessions whose berth session a run still holds (attached: a killed run's until its lease lapses). */
async function owned(namespace: string, ids: readonly string[]): Promise<string[]> {
  const persistence = handlePersistence(namespace)
  const out: string[] = []
  for (const id of ids) {
    try {
      const record = await persistence.client.getSession(persistence.berthId(id))
      if (record.runs.some((run) => run.status === 'attached')) out.push(id)
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error
    }
  }
  return out
}

const sum = (counts: Iterable<number>): number => [...counts].reduce((total, count) => total + count, 0)

/** Records berth holds in the namespace's sessions, headers included (the catalog's count: it may lag a moment). */
async function recordsOnBerth(client: BerthClient, namespace: string): Promise<number> {
  let total = 0
  for await (const session of client.listAllSessions({ label: 'dsh', include_blank: true, limit: 200 })) {
    if (session.header.id.startsWith(namespace)) total += session.event_count
  }
  return total
}

/**
 * Runs the import and SIGKILLs it once berth holds at least `records` records of the
 * namespace (looking every few milliseconds). Resolves with how the process ended.
 */
async function importKilledAt(args: readonly string[], namespace: string, records: number): Promise<{ signal: NodeJS.Signals | null; code: number | null; stderr: string }> {
  const client = new BerthClient({ baseUrl: inject('berthUrl'), apiKey: inject('berthServiceKey') })
  let child: ChildProcess | undefined
  let exited = false
  const run = berthStore(args, { BERTH_API_KEY: inject('berthServiceKey') }, (started) => { child = started })
  void run.then(() => { exited = true })
  while (!exited && (await recordsOnBerth(client, namespace)) < records) await new Promise((resolve) => setTimeout(resolve, 5))
  child?.kill('SIGKILL')
  return run
}

it(`a kill -9 at two seeded points (seed ${SEED}), then a rerun: every session on berth exactly once, equal to the source`, async () => {
  // 1520 events a session: two appends each (berth takes at most 1000 events an append),
  // so a kill lands between a session's appends as well as between sessions.
  const { root, sessions } = await bulkRoot(24, 80)
  const ids = sessions.map(([id]) => id)
  const total = sum(sessions.map(([, count]) => count))
  const before = treeHash(root)
  const namespace = freshNamespace()
  const args = ['migrate', `dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--namespace', namespace, '--json', '--no-progress']
  const random = seeded(SEED)

  // 1. The first run, killed with 10-70 % of the events stored.
  const first = await importKilledAt(args, namespace, Math.floor(total * (0.1 + 0.6 * random())))
  expect(first.signal, `seed ${SEED}: the first run ended before its kill: ${first.stderr}`).toBe('SIGKILL')
  const afterFirst = await held(namespace, ids)
  expect(sum(afterFirst.values())).toBeGreaterThan(0)
  expect(sum(afterFirst.values()), `seed ${SEED}`).toBeLessThan(total)
  // The dead run still holds the sessions it was writing: the rerun must wait those out.
  expect((await owned(namespace, ids)).length, `seed ${SEED}`).toBeGreaterThan(0)

  // 2. Its rerun, killed again further on (it first waits out the killed run's leases).
  const stored = sum(afterFirst.values())
  const second = await importKilledAt(args, namespace, stored + ids.length + Math.floor((total - stored) * (0.2 + 0.5 * random())))
  expect(second.signal, `seed ${SEED}: the second run ended before its kill: ${second.stderr}`).toBe('SIGKILL')
  const afterSecond = await held(namespace, ids)
  expect(sum(afterSecond.values())).toBeGreaterThan(stored)
  expect(sum(afterSecond.values()), `seed ${SEED}`).toBeLessThan(total)
  // What a killed run stored is a prefix of the source, never more than it.
  for (const [id, count] of sessions) expect(afterSecond.get(id)).toBeLessThanOrEqual(count)

  // 3. The rerun to the end: what the killed runs stored is counted unchanged, the rest written once.
  const last = await berthStore(args, { BERTH_API_KEY: inject('berthServiceKey') })
  expect(last.code, last.stderr).toBe(0)
  const complete = sessions.filter(([id, count]) => afterSecond.get(id) === count).length
  expect(JSON.parse(last.stdout)).toMatchObject({
    sessions: ids.length,
    sessions_unchanged: complete,
    sessions_imported: ids.length - complete,
    events: total - sum(afterSecond.values()),
    events_unchanged: sum(afterSecond.values()),
    skipped: [],
    changed: [],
  })

  // Every session reads back equal through both drop-ins, stored and balanced; berth holds
  // each event once (its seqs: the header and the source's events, nothing more).
  const source = await readJsonl(root)
  expect(byId(await readBerthHandle(namespace))).toEqual(byId(source.stored))
  const coordinator = await readBerthCoordinator(namespace)
  expect(byId(coordinator.stored)).toEqual(byId(source.stored))
  expect(byId(coordinator.inspected)).toEqual(byId(source.inspected))
  expect(Object.fromEntries(await held(namespace, ids))).toEqual(Object.fromEntries(sessions))
  expect(treeHash(root)).toEqual(before)

  // And once more: nothing to write.
  const again = await berthStore(args, { BERTH_API_KEY: inject('berthServiceKey') })
  expect(again.code, again.stderr).toBe(0)
  expect(JSON.parse(again.stdout)).toMatchObject({ sessions_unchanged: ids.length, events: 0, events_unchanged: total })
}, 240_000)

it('what a kill leaves, made by hand: an empty record and a session cut between appends, each held by a run nobody heartbeats', async () => {
  const { root, sessions } = await harnessRoot('zstd')
  const namespace = freshNamespace()
  const source = await readJsonl(root)
  // A 1.5 s run lease (the drop-in's is 30 s), so that the dead runs lapse soon.
  const persistence = handlePersistence(namespace, 1_500)
  const client = persistence.client
  const header = (id: string): SessionHeader => source.stored.get(id)?.header as SessionHeader
  // `weather`: its header and first 7 events stored (an append done), then its writer killed.
  const weather = await persistence.create(header('weather'))
  await weather.append((source.stored.get('weather')?.events ?? []).slice(0, 7).map((text) => JSON.parse(text) as SessionEvent))
  await weather.close()
  await client.attachRun(persistence.berthId('weather'), { run_id: 'killed-import-1', on_busy: 'reject' })
  // `bare`: its record made and its run attached, then killed before the first append.
  await client.createSession(persistence.createBody(header('bare'), materializeCreateHeader(header('bare')).text))
  await client.attachRun(persistence.berthId('bare'), { run_id: 'killed-import-2', on_busy: 'reject' })
  expect((await owned(namespace, ['weather', 'bare'])).sort()).toEqual(['bare', 'weather'])

  const run = await berthStore(['migrate', `dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--namespace', namespace, '--json'], { BERTH_API_KEY: inject('berthServiceKey') })
  expect(run.code, run.stderr).toBe(0)
  const total = sum(sessions.map(([, count]) => count))
  expect(JSON.parse(run.stdout)).toMatchObject({ sessions: 6, sessions_imported: 6, events: total - 7, events_unchanged: 7, skipped: [], changed: [] })
  expect(byId(await readBerthHandle(namespace))).toEqual(byId(source.stored))
  expect(Object.fromEntries(await held(namespace, sessions.map(([id]) => id)))).toEqual(Object.fromEntries(sessions))
})
