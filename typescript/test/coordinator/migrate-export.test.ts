/**
 * `berth-store migrate --to dsh-jsonl:DIR` (issue 56; Node >= 22): berth's harness
 * sessions written back into a JSONL root through the harness's own JSONL backend, and
 * verified by that backend: the exported root reads (stored and balanced) exactly as the
 * root the harness wrote, in either encoding; a dry run makes nothing; a rerun writes
 * nothing; a session that went on on berth after a resume there (the harness's own crash
 * repair, then a new turn) is continued in the target the way the harness continues it;
 * a target holding other events is reported and left alone.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { SessionId, type SessionEvent } from '@deepseek-ai/dsh-session'
import { loadHarness, mountRoot } from '../../src/migrate/harness.js'
import {
  byId,
  freshNamespace,
  handlePersistence,
  harnessRoot,
  migrate,
  mountCoordinator,
  readBerthHandle,
  readJsonl,
  removeScratch,
  scratchDir,
  treeHash,
} from '../support/dsh-jsonl-roots.js'

afterAll(removeScratch)

describe.each([
  ['zstd', 'none'],
  ['none', 'zstd'],
  ['none', undefined],
] as const)('a %s root imported, exported to a %s root', (from, to) => {
  it('the exported root reads exactly as the original through the JSONL backend; dry runs and reruns write nothing', async () => {
    const { root } = await harnessRoot(from)
    const namespace = freshNamespace()
    expect((await migrate([`dsh-jsonl:${root}`], namespace)).code).toBe(0)
    const original = await readJsonl(root)
    const target = join(scratchDir('dsh-export-'), 'exported')
    const compression = to === undefined ? [] : ['--compression', to]

    const dry = await migrate(['--to', `dsh-jsonl:${target}`, ...compression, '--dry-run', '--json'], namespace)
    expect(dry.code, dry.stderr).toBe(0)
    expect(dry.report).toMatchObject({ direction: 'export', dry_run: true, sessions: 6, sessions_imported: 6, skipped: [], changed: [] })
    expect(existsSync(target)).toBe(false)

    const run = await migrate(['--to', `dsh-jsonl:${target}`, ...compression, '--json'], namespace)
    expect(run.code, run.stderr).toBe(0)
    expect(run.report).toMatchObject({ direction: 'export', target: `dsh-jsonl:${target}`, sessions: 6, sessions_imported: 6, events: dry.report?.events, bytes: dry.report?.bytes, skipped: [], changed: [] })
    const exported = await readJsonl(target)
    expect(exported.compression).toBe(to ?? 'zstd') // a new root: the harness's default
    expect(byId(exported.stored)).toEqual(byId(original.stored))
    expect(byId(exported.inspected)).toEqual(byId(original.inspected))

    const before = treeHash(target)
    const again = await migrate(['--to', `dsh-jsonl:${target}`, '--json'], namespace)
    expect(again.code, again.stderr).toBe(0)
    expect(again.report).toMatchObject({ sessions: 6, sessions_imported: 0, sessions_unchanged: 6, events: 0, events_unchanged: run.report?.events, skipped: [], changed: [] })
    expect(treeHash(target)).toEqual(before)
  })
})

it('a session resumed and continued on berth is continued in the target as the harness continues it', async () => {
  const { root } = await harnessRoot('zstd')
  const namespace = freshNamespace()
  expect((await migrate([`dsh-jsonl:${root}`], namespace)).code).toBe(0)
  const target = join(scratchDir('dsh-export-'), 'exported')
  expect((await migrate(['--to', `dsh-jsonl:${target}`], namespace)).code).toBe(0)

  // The harness resumes `charge` on berth (rc.8: `load` commits its crash repair) and runs a turn.
  const mounted = await mountCoordinator(namespace)
  try {
    const loaded = await mounted.backend.load(SessionId('charge'))
    const seq = loaded.events.length
    const time = loaded.events.at(-1)?.time ?? 0
    await mounted.backend.append(SessionId('charge'), [
      { type: 'turn/start', seq, time: time + 1, data: { turn: 3 } },
      { type: 'turn/end', seq: seq + 1, time: time + 2, data: { turn: 3, reason: { kind: 'completed' } } },
    ] as SessionEvent[])
  } finally {
    await mounted.dispose()
  }
  const onBerth = (await readBerthHandle(namespace)).get('charge')
  expect(onBerth?.events.map((text) => (JSON.parse(text) as { type: string }).type).slice(-5)).toEqual(['tool/result', 'step/end', 'turn/end', 'turn/start', 'turn/end'])

  // The target still holds the interrupted turn: the export has the harness close it
  // (the same closers berth holds), then appends the new turn.
  const run = await migrate(['--to', `dsh-jsonl:${target}`, '--json'], namespace)
  expect(run.code, run.stderr).toBe(0)
  expect(run.report).toMatchObject({ sessions_imported: 1, sessions_unchanged: 5, events: 5, changed: [], skipped: [] })
  expect((await readJsonl(target)).stored.get('charge')).toEqual(onBerth)

  // Importing the source again: berth being ahead of it is no change.
  const reimport = await migrate([`dsh-jsonl:${root}`, '--json'], namespace)
  expect(reimport.code, reimport.stderr).toBe(0)
  expect(reimport.report).toMatchObject({ events: 0, changed: [], skipped: [] })
})

it('a target holding other events is reported and left alone; a berth session with no events is reported', async () => {
  const { root } = await harnessRoot('none')
  const namespace = freshNamespace()
  expect((await migrate([`dsh-jsonl:${root}`], namespace)).code).toBe(0)
  const empty = await handlePersistence(namespace).create({ version: 0, id: 'empty', createdAt: 1_790_000_000_000 })
  await empty.flush()
  await empty.close()

  const target = join(scratchDir('dsh-export-'), 'exported')
  const mounted = await mountRoot(await loadHarness(), target, 'none', false)
  try {
    await mounted.backend.create({ version: 0, id: SessionId('bare'), createdAt: 1_790_000_000_000, delegationDepth: 0 })
    await mounted.backend.append(SessionId('bare'), [{ type: 'turn/start', seq: 0, time: 1_790_000_000_001, data: { turn: 9 } }] as SessionEvent[])
  } finally {
    await mounted.dispose()
  }
  const before = (await readJsonl(target)).stored.get('bare')
  const run = await migrate(['--to', `dsh-jsonl:${target}`, '--json'], namespace)
  expect(run.code).toBe(1)
  expect(run.report?.changed).toEqual([{ session: 'bare', record: 'header', reason: expect.stringMatching(/another header/) }])
  expect(run.report?.skipped).toEqual([{ session: 'empty', record: 'session', reason: expect.stringMatching(/holds no events/) }])
  expect(run.report).toMatchObject({ sessions: 7, sessions_imported: 5 })
  expect((await readJsonl(target)).stored.get('bare')).toEqual(before)
})
