/**
 * `berth-store migrate dsh-jsonl:DIR` on a source that lives on (issue 56; Node >= 22):
 * sessions written through the harness's own JSONL backend grow, change and tear
 * between runs. New events at a session's end are imported; a session whose source
 * changed is reported under `changed` and left as berth holds it; a session that went
 * on on berth is no change; an import cut short is finished by the next run; a session a
 * live writer owns is reported, then imported once released; a torn tail is left out
 * (as the harness leaves it out) and reported.
 */
import { appendFileSync, rmSync } from 'node:fs'
import { dirname, join } from 'node:path'
import * as zlib from 'node:zlib'
import { afterAll, expect, it } from 'vitest'
import { Session, SessionId, type SessionEvent, type SessionHeader } from '@deepseek-ai/dsh-session'
import { createAssistantMessage, createUserMessage } from '@deepseek-ai/dsh-llm'
import { loadHarness, mountRoot, type JsonlCompression } from '../../src/migrate/harness.js'
import {
  byId,
  freshNamespace,
  handlePersistence,
  migrate,
  readBerthHandle,
  readJsonl,
  removeScratch,
  scratchDir,
  treeHash,
} from '../support/dsh-jsonl-roots.js'

afterAll(removeScratch)

/** Node 22's Zstandard (the package's `@types/node` is Node 20's, which has no such API). */
const zstd = zlib as unknown as {
  zstdCompressSync(input: Buffer, options: { params: Record<number, number> }): Buffer
  constants: { ZSTD_c_checksumFlag: number }
}

const model = { provider: 'scripted', model: 'scripted-1' }

/** `turns` completed turns of a detached harness Session (the harness makes seq, time, ids). */
function log(id: string, turns: number): SessionEvent[] {
  const session = Session.create(SessionId(id))
  for (let turn = 1; turn <= turns; turn++) {
    session.append('turn/start', { turn })
    session.append('user/message', createUserMessage({ content: [{ type: 'text', text: `hello ${turn}` }], source: { kind: 'user' } }), { surfaceOp: 'append' })
    session.append('step/start', { turn, step: 0 })
    session.append('assistant/message', { turn, step: 0, message: createAssistantMessage({ content: [{ type: 'text', text: `answer ${turn}` }], source: model }) }, { surfaceOp: 'append' })
    session.append('step/end', { turn, step: 0 })
    session.append('turn/end', { turn, reason: { kind: 'completed' } })
  }
  return [...session.events]
}

function header(id: string): SessionHeader {
  return { version: 0, id: SessionId(id), createdAt: 1_790_000_000_000, cwd: '/work/project', delegationDepth: 0 } as SessionHeader
}

/** Writes through the harness's JSONL backend: `create` + `append` for a new session, `append` to continue one. */
async function write(root: string, compression: JsonlCompression, id: string, events: readonly SessionEvent[], create: boolean): Promise<string> {
  const mounted = await mountRoot(await loadHarness(), root, compression, false)
  try {
    if (create) await mounted.backend.create(header(id))
    await mounted.backend.append(SessionId(id), events)
    return mounted.backend.locate(header(id)).path
  } finally {
    await mounted.dispose()
  }
}

it('grown, changed, continued on berth, cut short, owned: each run takes what it can and reports the rest', async () => {
  const root = join(scratchDir('dsh-live-'), 'root')
  const namespace = freshNamespace()
  const a = log('a', 3)
  const b = log('b', 2)
  await write(root, 'zstd', 'a', a.slice(0, 6), true)
  const bPath = await write(root, 'zstd', 'b', b, true)
  expect((await migrate([`dsh-jsonl:${root}`, '--json'], namespace)).report).toMatchObject({ sessions: 2, events: 18, changed: [], skipped: [] })

  // `a` grows at the source: the next run takes its new events only.
  await write(root, 'zstd', 'a', a.slice(6), false)
  const grown = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(grown.code, grown.stderr).toBe(0)
  expect(grown.report).toMatchObject({ sessions: 2, sessions_imported: 1, sessions_unchanged: 1, events: 12, events_unchanged: 18, changed: [], skipped: [] })
  expect(byId(await readBerthHandle(namespace))).toEqual(byId((await readJsonl(root)).stored))

  // `b` is rewritten at the source (another user message at seq 1): reported, never overwritten.
  rmSync(dirname(bPath), { recursive: true })
  const edited = b.map((event, index) => (index === 1 ? { ...event, data: { ...(event.data as object), content: [{ type: 'text', text: 'edited' }] } } as SessionEvent : event))
  await write(root, 'zstd', 'b', edited, true)
  const berthBefore = await readBerthHandle(namespace)
  const changed = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(changed.code).toBe(1)
  expect(changed.report?.changed).toEqual([{ session: 'b', record: 'event 1', reason: expect.stringMatching(/changed at the source since the last import/) }])
  expect(changed.report).toMatchObject({ sessions: 2, sessions_unchanged: 1, events: 0, skipped: [] })
  expect(await readBerthHandle(namespace)).toEqual(berthBefore)

  // `a` goes on on berth (a harness resumed it there): the source being behind is no change.
  const persistence = handlePersistence(namespace)
  const writer = await persistence.open('a', 'write')
  await writer.append(log('a', 4).slice(18))
  await writer.close()
  const behind = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(behind.report?.changed).toEqual([expect.objectContaining({ session: 'b' })])
  expect(behind.report).toMatchObject({ events: 0, skipped: [] })
  expect((await readBerthHandle(namespace)).get('a')?.events).toHaveLength(24)

  // `c` was cut short (an import killed after its first append): the next run appends the rest.
  const c = log('c', 2)
  await write(root, 'zstd', 'c', c, true)
  const cut = await persistence.create(header('c'))
  await cut.append(c.slice(0, 4))
  await cut.close()
  const finished = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(finished.report).toMatchObject({ sessions: 3, sessions_imported: 1, events: 8, events_unchanged: 4 + 18 + 0 })
  expect((await readBerthHandle(namespace)).get('c')).toEqual((await readJsonl(root)).stored.get('c'))

  // `d` is owned by a live writer on berth (its heartbeats move its lease on, which the
  // import watches for before it gives up): reported under `skipped`; imported once
  // released. A 2 s run lease, so that the import sees a heartbeat soon.
  const d = log('d', 1)
  await write(root, 'zstd', 'd', d, true)
  const live = await handlePersistence(namespace, 2_000).create(header('d'))
  await live.append(d.slice(0, 2))
  const owned = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(owned.code).toBe(1)
  expect(owned.report?.skipped).toEqual([{ session: 'd', record: 'events 2..5', reason: expect.stringMatching(/owned by a live writer/) }])
  await live.close()
  const released = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(released.report).toMatchObject({ sessions_imported: 1, events: 4, skipped: [] })
  expect((await readBerthHandle(namespace)).get('d')).toEqual((await readJsonl(root)).stored.get('d'))
})

it.each([
  ['none', 'half a record', 0],
  ['zstd', 'half a frame', 0],
  ['zstd', 'a frame without its checksum, holding two complete records', 2],
] as const)('a torn tail (%s, %s) is left out as the harness leaves it out, and reported', async (compression, _what, recovered) => {
  const root = join(scratchDir('dsh-torn-'), 'root')
  const namespace = freshNamespace()
  const events = log('torn', 2)
  const path = await write(root, compression, 'torn', events, true)
  // The last write of a process that died mid-write.
  const time = events.at(-1)?.time ?? 0
  const records = `${JSON.stringify({ type: 'turn/start', seq: 12, time, data: { turn: 3 } })}\n${JSON.stringify({ type: 'turn/end', seq: 13, time, data: { turn: 3, reason: { kind: 'completed' } } })}\n`
  const frame = compression === 'zstd' ? zstd.zstdCompressSync(Buffer.from(records), { params: { [zstd.constants.ZSTD_c_checksumFlag]: 1 } }) : undefined
  const torn = frame === undefined ? Buffer.from(records.slice(0, 25)) : recovered > 0 ? frame.subarray(0, frame.length - 4) : frame.subarray(0, 20)
  appendFileSync(path, torn)
  const before = treeHash(root)
  const source = (await readJsonl(root)).stored
  expect(source.get('torn')?.events).toHaveLength(12 + recovered) // what the harness reads
  const run = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(run.code).toBe(1)
  expect(run.report).toMatchObject({ sessions: 1, sessions_imported: 1, events: 12 + recovered, changed: [] })
  expect(run.report?.skipped).toEqual([{
    session: 'torn', record: 'torn tail',
    reason: `${torn.length} bytes after the last complete write (a write the harness never finished)` +
      (recovered > 0 ? `; the ${recovered} complete records the harness recovers from it are imported` : '') +
      ': the harness discards the incomplete rest, and so does the import',
  }])
  expect(byId(await readBerthHandle(namespace))).toEqual(byId(source))
  expect(treeHash(root)).toEqual(before) // the import never repairs the source
})

it('an event berth cannot hold is reported, and the events after it are not imported (a log has no gaps)', async () => {
  const root = join(scratchDir('dsh-big-'), 'root')
  const namespace = freshNamespace()
  const session = Session.create(SessionId('big'))
  session.append('turn/start', { turn: 1 })
  session.append('user/message', createUserMessage({ content: [{ type: 'text', text: 'x'.repeat(1_200_000) }], source: { kind: 'user' } }), { surfaceOp: 'append' })
  session.append('turn/end', { turn: 1, reason: { kind: 'completed' } })
  await write(root, 'zstd', 'big', session.events, true)
  const run = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(run.code).toBe(1)
  expect(run.report).toMatchObject({ sessions: 1, events: 1, changed: [] })
  expect(run.report?.skipped).toEqual([{ session: 'big', record: 'events 1..2', reason: expect.stringMatching(/^berth cannot hold event 1 \(PayloadTooLargeError: .*\); a harness log has no gaps, so the events after it are not imported either$/) }])
  expect((await readBerthHandle(namespace)).get('big')?.events).toEqual((await readJsonl(root)).stored.get('big')?.events.slice(0, 1))
})
