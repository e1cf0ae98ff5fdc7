/**
 * `berth-store migrate dsh-jsonl:DIR` (issue 56; Node >= 22, the rc.8 packages): a JSONL
 * root written by the harness itself — tool calls, streamed chunks (packed rows), a fork,
 * a subagent, an id to encode, a session SIGKILLed while its tool runs — imported into a
 * real `berth serve`, in both encodings the backend writes. Verified by the harness's
 * readers, not berth's: what berth's drop-ins read back (`BerthHandlePersistence`, and
 * the rc.8 `BerthCoordinatorBackend`) equals what the JSONL backend reads, session by
 * session and event by event, stored and balanced; the source's bytes are untouched; a
 * dry run writes nothing; a rerun writes nothing; a changed source is reported.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, describe, expect, inject, it } from 'vitest'
import { BerthClient } from '../../src/index.js'
import { DSH_HEADER_TYPE } from '../../src/dsh/index.js'
import {
  byId,
  freshNamespace,
  handlePersistence,
  harnessRoot,
  migrate,
  readBerthCoordinator,
  readBerthHandle,
  readJsonl,
  removeScratch,
  serverConfig,
  treeHash,
} from '../support/dsh-jsonl-roots.js'

afterAll(removeScratch)

describe.each(['zstd', 'none'] as const)('import of a %s root', (compression) => {
  it('berth holds exactly what the JSONL backend reads; the source is untouched; dry runs and reruns write nothing', async () => {
    const { root, sessions } = await harnessRoot(compression)
    const before = treeHash(root)
    if (compression === 'none') {
      // The streamed chunks are on disk as the backend's packed rows (plain text in this encoding).
      const bare = readFileSync(join(root, '_no-cwd', 'bare', 'session.jsonl'), 'utf8')
      expect(bare).toContain('"type":"text-chunks"')
    }
    const namespace = freshNamespace()
    const total = sessions.reduce((sum, [, count]) => sum + count, 0)
    const source = await readJsonl(root)
    expect(source.compression).toBe(compression) // found by the backend's own refusal of the other encoding
    expect([...source.stored.keys()].sort()).toEqual(sessions.map(([id]) => id).sort())
    // The crashed session's stored log ends at the durable tool call (the turn is open)…
    expect(JSON.parse(source.stored.get('charge')?.events.at(-1) ?? '{}')).toMatchObject({ type: 'tool/call' })
    // …and the harness's balanced view closes it with its own repair.
    expect(JSON.parse(source.inspected.get('charge')?.events.at(-1) ?? '{}')).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'interrupted' } } })

    // A dry run: the report of a full import, and nothing on berth.
    const dry = await migrate([`dsh-jsonl:${root}`, '--dry-run', '--json'], namespace)
    expect(dry.code, dry.stderr).toBe(0)
    expect(dry.report).toMatchObject({ direction: 'import', dry_run: true, sessions: 6, sessions_imported: 6, events: total, events_unchanged: 0, skipped: [], changed: [] })
    expect((await readBerthHandle(namespace)).size).toBe(0)

    // The import.
    const run = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
    expect(run.code, run.stderr).toBe(0)
    expect(run.report).toMatchObject({ direction: 'import', dry_run: false, sessions: 6, sessions_imported: 6, sessions_unchanged: 0, events: total, events_unchanged: 0, pending_write_groups: 0, skipped: [], changed: [] })
    expect(run.report?.bytes).toBe([...source.stored.values()].reduce((sum, view) => sum + view.events.reduce((n, text) => n + Buffer.byteLength(text), 0), 0))
    expect(run.report?.source).toBe(`dsh-jsonl:${root}`)

    // What the drop-ins read equals what the harness's backend reads.
    expect(byId(await readBerthHandle(namespace))).toEqual(byId(source.stored))
    const coordinator = await readBerthCoordinator(namespace)
    expect(byId(coordinator.stored)).toEqual(byId(source.stored))
    expect(byId(coordinator.inspected)).toEqual(byId(source.inspected))

    // Each berth event carries the harness event's own time; seq 0 is the header's exact text.
    const client = new BerthClient(serverConfig(namespace))
    const persistence = handlePersistence(namespace)
    for (const [id, view] of source.stored) {
      const records = (await client.readEvents(persistence.berthId(id), { from: 0 })).events
      expect(records[0]).toMatchObject({ type: DSH_HEADER_TYPE, data: JSON.stringify(view.header) })
      expect(records.slice(1).map((record) => record.time)).toEqual(view.events.map((text) => (JSON.parse(text) as { time: number }).time))
    }

    // Read-only on the source: every byte and every directory as before.
    expect(treeHash(root)).toEqual(before)

    // A rerun writes nothing.
    const nextSeqs = await Promise.all([...source.stored.keys()].map((id) => client.nextSeq(persistence.berthId(id))))
    const again = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
    expect(again.code, again.stderr).toBe(0)
    expect(again.report).toMatchObject({ sessions: 6, sessions_imported: 0, sessions_unchanged: 6, events: 0, events_unchanged: total, bytes: 0, skipped: [], changed: [] })
    expect(await Promise.all([...source.stored.keys()].map((id) => client.nextSeq(persistence.berthId(id))))).toEqual(nextSeqs)
    expect(treeHash(root)).toEqual(before)

    // The text report says the same.
    const text = await migrate([`dsh-jsonl:${root}`, '--dry-run'], namespace)
    expect(text.code).toBe(0)
    expect(text.stdout).toBe(`berth-store migrate import dsh-jsonl:${root} -> berth:${inject('berthUrl')}: 6 sessions (0 with new records, 6 unchanged); would write 0 events (0 bytes), ${total} already there, in ${/in ([\d.]+)s/.exec(text.stdout)?.[1]}s\n`)
  })
})
