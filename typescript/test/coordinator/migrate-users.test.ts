/**
 * `berth-store migrate dsh-jsonl:DIR --user-map FILE.json` (issue 56; Node >= 22), through
 * the real `dist/bin` process: each harness session is imported under the berth user the
 * map names (made for it under the caller's tenant, with a service key), a session the
 * map does not name is skipped and reported, one berth already holds under another user
 * is reported as changed and left as it is; a bad map file, or a user key, is a typed
 * error with exit status 2 before anything is written — Python's `berth-migrate` rules.
 */
import { execFileSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, expect, inject, it } from 'vitest'
import { BerthClient } from '../../src/index.js'
import { berthBinary } from '../support/berth-server.js'
import {
  berthStore,
  byId,
  freshNamespace,
  handlePersistence,
  harnessRoot,
  readBerthCoordinator,
  readBerthHandle,
  readJsonl,
  removeScratch,
  scratchDir,
  treeHash,
} from '../support/dsh-jsonl-roots.js'

afterAll(removeScratch)

const serviceEnv = (): Record<string, string> => ({ BERTH_API_KEY: inject('berthServiceKey') })

function keyFor(user: string, role: 'user' | 'service'): string {
  return execFileSync(berthBinary(), ['--data', inject('berthDataDir'), 'keys', 'create', '--tenant', 'dsh', '--user', user, '--role', role], { encoding: 'utf8' }).trim()
}

function mapFile(content: string): string {
  const path = join(scratchDir('dsh-users-'), 'users.json')
  writeFileSync(path, content)
  return path
}

/** The berth ids of the namespace's sessions a key sees (empty leftovers included). */
async function visible(namespace: string, apiKey: string): Promise<string[]> {
  const client = new BerthClient({ baseUrl: inject('berthUrl'), apiKey })
  const ids: string[] = []
  for await (const session of client.listAllSessions({ label: 'dsh', include_blank: true, limit: 200 })) {
    if (session.header.id.startsWith(namespace)) ids.push(session.header.id)
  }
  return ids.sort()
}

async function ownerOf(namespace: string, id: string): Promise<string> {
  const persistence = handlePersistence(namespace)
  return (await persistence.client.getSession(persistence.berthId(id))).header.scope.user
}

it('each mapped session under its user; an unmapped one skipped; one held by another user left as it is', async () => {
  const { root, sessions } = await harnessRoot('zstd')
  const before = treeHash(root)
  const namespace = freshNamespace()
  const users = { weather: 'alice', 'notes ünïcödé/../id': 'alice', 'weather.sub-1': 'bob', 'weather-fork': 'bob', charge: 'carol.x~1' }
  const path = mapFile(JSON.stringify(users))
  const args = ['migrate', `dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--namespace', namespace, '--user-map', path]
  const unmapped = { session: 'bare', record: 'session', reason: `the user map ${path} names no berth user for it: not imported` }
  const counts = { alice: 2, bob: 2, 'carol.x~1': 1 }

  // A dry run writes nothing, and says whose sessions they would be.
  const dry = await berthStore([...args, '--dry-run', '--json'], serviceEnv())
  expect(dry.code, dry.stderr).toBe(1) // `bare` is skipped
  expect(JSON.parse(dry.stdout)).toMatchObject({ sessions: 6, sessions_imported: 5, skipped: [unmapped], changed: [], users: counts })
  expect(await visible(namespace, inject('berthServiceKey'))).toEqual([])

  const run = await berthStore([...args, '--json'], serviceEnv())
  expect(run.code, run.stderr).toBe(1)
  const total = sessions.filter(([id]) => id !== 'bare').reduce((n, [, count]) => n + count, 0)
  expect(JSON.parse(run.stdout)).toMatchObject({ sessions: 6, sessions_imported: 5, events: total, skipped: [unmapped], changed: [], users: counts })
  for (const [id, user] of Object.entries(users)) expect(await ownerOf(namespace, id)).toBe(user)
  // Each user's own key sees its sessions, and only those.
  const persistence = handlePersistence(namespace)
  expect(await visible(namespace, keyFor('alice', 'user'))).toEqual([persistence.berthId('weather'), persistence.berthId('notes ünïcödé/../id')].sort())
  expect(await visible(namespace, keyFor('bob', 'user'))).toEqual([persistence.berthId('weather.sub-1'), persistence.berthId('weather-fork')].sort())

  // What berth holds is what the harness reads, through both drop-ins; the source is untouched.
  const source = (await readJsonl(root)).stored
  source.delete('bare')
  expect(byId(await readBerthHandle(namespace))).toEqual(byId(source))
  expect(byId((await readBerthCoordinator(namespace)).stored)).toEqual(byId(source))
  expect(treeHash(root)).toEqual(before)

  // A rerun writes nothing; the text report names the users.
  const again = await berthStore(args, serviceEnv())
  expect(again.code, again.stderr).toBe(1)
  expect(again.stdout).toMatch(/: 6 sessions \(0 with new records, 5 unchanged\); wrote 0 events \(0 bytes\), \d+ already there, in [\d.]+s\n {2}users: alice 2, bob 2, carol\.x~1 1\n {2}skipped: bare session: the user map .* names no berth user for it: not imported\n$/)

  // A map that names another user for a session berth already holds: changed, left as it is.
  const moved = mapFile(JSON.stringify({ ...users, weather: 'dave', bare: 'erin' }))
  const other = await berthStore([...args.slice(0, -1), moved, '--json'], serviceEnv())
  expect(other.code, other.stderr).toBe(1)
  expect(JSON.parse(other.stdout)).toMatchObject({
    sessions: 6, sessions_imported: 1, sessions_unchanged: 4, skipped: [],
    changed: [{ session: 'weather', record: 'session', reason: 'berth holds this session under user "alice", the user map names "dave": left as it is' }],
    users: { alice: 1, bob: 2, 'carol.x~1': 1, erin: 1 },
  })
  expect(await ownerOf(namespace, 'weather')).toBe('alice')
  expect(await ownerOf(namespace, 'bare')).toBe('erin')
  expect(byId(await readBerthHandle(namespace))).toEqual(byId((await readJsonl(root)).stored))
})

it('a bad map file, or a user key, is a UserMapError with exit 2 and nothing written; misplaced options are usage errors', async () => {
  const { root } = await harnessRoot('none')
  const namespace = freshNamespace()
  const args = (path: string): string[] => ['migrate', `dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--namespace', namespace, '--user-map', path]
  const missing = join(scratchDir('dsh-users-'), 'missing.json')
  const bad: [string, RegExp][] = [
    [missing, /cannot read it: ENOENT/],
    [mapFile('{"weather": "alice",'), /not JSON: /],
    [mapFile('["alice"]'), /expected a JSON object of source id -> berth user, not an array/],
    [mapFile('"alice"'), /expected a JSON object of source id -> berth user, not a string/],
    [mapFile('{}'), /maps no session/],
    [mapFile('{"weather": 7}'), /"weather" maps to 7, not a user id \(a string\)/],
    [mapFile('{"weather": "alice", "bare": "a b"}'), /"bare" maps to "a b", not a berth user id \(1-128 bytes of A-Z a-z 0-9 \. _ ~ -, never \. or \.\.\)/],
    [mapFile('{"weather": ".."}'), /"weather" maps to "\.\.", not a berth user id/],
    [mapFile('{"weather": ""}'), /"weather" maps to "", not a berth user id/],
    [mapFile(JSON.stringify({ weather: 'u'.repeat(129) })), /not a berth user id/],
    [mapFile('{"weather": "ünï"}'), /not a berth user id/],
  ]
  for (const [path, message] of bad) {
    const run = await berthStore(args(path), serviceEnv())
    expect(run, path).toMatchObject({ code: 2, stdout: '' })
    expect(run.stderr).toMatch(new RegExp(`^berth-store migrate: UserMapError: --user-map ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: `))
    expect(run.stderr).toMatch(message)
  }
  // A user key acts only for itself: refused after whoami, before anything is written.
  const good = mapFile('{"weather": "alice"}')
  const asUser = await berthStore(args(good), { BERTH_API_KEY: keyFor('someone', 'user') })
  expect(asUser).toMatchObject({ code: 2, stdout: '' })
  expect(asUser.stderr).toBe('berth-store migrate: UserMapError: --user-map: the caller is a "user" key (user "someone"), which makes sessions only for itself: import with a service key\n')
  expect(await visible(namespace, inject('berthServiceKey'))).toEqual([])

  const usage = async (extra: string[], message: string): Promise<void> => {
    const run = await berthStore(['migrate', ...extra, '--server', inject('berthUrl'), '--namespace', namespace], serviceEnv())
    expect(run).toMatchObject({ code: 2, stdout: '' })
    expect(run.stderr).toContain(`berth-store migrate: error: ${message}`)
  }
  await usage(['--to', `dsh-jsonl:${root}`, '--user-map', good], '--user-from and --user-map are for an import (a SOURCE)')
  await usage([`dsh-jsonl:${root}`, '--user-from', 'caller', '--user-map', good], 'give --user-from or --user-map, not both')
  await usage([`dsh-jsonl:${root}`, '--user-from', 'adk-user'], '--user-from adk-user is for an adk: source')
  await usage([`dsh-jsonl:${root}`, '--user-from', 'someone'], '--user-from: expected caller, got "someone"')
  expect(await visible(namespace, inject('berthServiceKey'))).toEqual([])

  // `--user-from caller` is the default, said out loud: the caller's own user.
  const caller = await berthStore(['migrate', `dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--namespace', namespace, '--user-from', 'caller', '--json'], serviceEnv())
  expect(caller.code, caller.stderr).toBe(0)
  expect(JSON.parse(caller.stdout)).not.toHaveProperty('users')
  expect(await ownerOf(namespace, 'weather')).toBe('agent')
})
