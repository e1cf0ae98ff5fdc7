/**
 * The `berth-store` command as a process (the package's `bin`, built into dist/ by the
 * suite's global setup; Node >= 22): a run prints its report and exits 0; bad input is
 * a typed one-line error with exit 1 (a missing root, a file, a root of the other
 * encoding, an unreachable or refusing berth) or a usage error with exit 2.
 */
import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, expect, inject, it } from 'vitest'
import { migrateMain } from '../../src/migrate/cli.js'
import { berthBinary } from '../support/berth-server.js'
import { berthStore, freshNamespace, harnessRoot, removeScratch, scratchDir } from '../support/dsh-jsonl-roots.js'

afterAll(removeScratch)

it('imports and exports as a process: the JSON report on stdout, exit 0 (the key from BERTH_API_KEY)', async () => {
  const { root, sessions } = await harnessRoot('zstd')
  const namespace = freshNamespace()
  const env = { BERTH_API_KEY: inject('berthServiceKey') }
  const imported = await berthStore(['migrate', `dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--namespace', namespace, '--json'], env)
  expect(imported.code, imported.stderr).toBe(0)
  expect(imported.stderr).toBe('') // no progress line off a terminal
  expect(JSON.parse(imported.stdout)).toMatchObject({ direction: 'import', sessions: sessions.length, events: sessions.reduce((n, [, count]) => n + count, 0), skipped: [], changed: [] })
  const target = join(scratchDir('dsh-bin-'), 'out')
  const exported = await berthStore(['migrate', '--to', `dsh-jsonl:${target}`, '--server', inject('berthUrl'), '--namespace', namespace], env)
  expect(exported.code, exported.stderr).toBe(0)
  expect(exported.stdout).toMatch(new RegExp(`^berth-store migrate export berth:${inject('berthUrl')} -> dsh-jsonl:${target}: 6 sessions \\(6 with new records, 0 unchanged\\); wrote \\d+ events`))
  // Any role: the import keeps no bookkeeping in berth's memory (a `user` key's sessions are its user's).
  const userKey = execFileSync(berthBinary(), ['--data', inject('berthDataDir'), 'keys', 'create', '--tenant', 'dsh', '--user', 'someone', '--role', 'user'], { encoding: 'utf8' }).trim()
  const asUser = await berthStore(['migrate', `dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--api-key', userKey, '--json'])
  expect(asUser.code, asUser.stderr).toBe(0)
  expect(JSON.parse(asUser.stdout)).toMatchObject({ sessions: 6, sessions_imported: 6, skipped: [], changed: [] })
})

it('bad input: a typed one-line error and exit 1, or a usage error and exit 2', async () => {
  const berth = ['--server', inject('berthUrl'), '--api-key', inject('berthServiceKey')]
  const scratch = scratchDir('dsh-bad-')
  const missing = join(scratch, 'missing')
  expect(await berthStore(['migrate', `dsh-jsonl:${missing}`, ...berth])).toEqual({
    code: 1, signal: null, stdout: '', stderr: `berth-store migrate: MigrationSourceError: no such DeepSeek Harness JSONL root: ${missing} (no such directory)\n`,
  })
  const file = join(scratch, 'file')
  writeFileSync(file, 'not a root')
  expect(await berthStore(['migrate', `dsh-jsonl:${file}`, ...berth])).toMatchObject({ code: 1, stderr: `berth-store migrate: MigrationSourceError: not a DeepSeek Harness JSONL root: ${file} is not a directory\n` })
  expect(await berthStore(['migrate', '--to', `dsh-jsonl:${file}`, ...berth])).toMatchObject({ code: 1, stderr: expect.stringContaining('is not a directory') })

  // A root of the other encoding than the one asked for: the harness's own refusal.
  const { root } = await harnessRoot('none')
  const mismatch = await berthStore(['migrate', `dsh-jsonl:${root}`, '--compression', 'zstd', ...berth])
  expect(mismatch.code).toBe(1)
  expect(mismatch.stderr.startsWith(`berth-store migrate: MigrationSourceError: the DeepSeek Harness JSONL backend refuses ${root}: session artifact `)).toBe(true)
  expect(mismatch.stderr).toMatch(/uses \.jsonl, but this backend is configured for compression "zstd"/)

  // The old flat layout, which the backend refuses.
  const flat = join(scratch, 'flat')
  mkdirSync(join(flat, '--work-project--'), { recursive: true })
  writeFileSync(join(flat, '--work-project--', 'old.jsonl'), '{"type":"session"}\n')
  expect(await berthStore(['migrate', `dsh-jsonl:${flat}`, ...berth])).toMatchObject({ code: 1, stderr: expect.stringMatching(/^berth-store migrate: MigrationSourceError: the DeepSeek Harness JSONL backend refuses .*unsupported flat-file layout/) })

  // berth refusing the key, or not there.
  expect(await berthStore(['migrate', `dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--api-key', 'not-a-key'])).toMatchObject({ code: 1, stderr: expect.stringMatching(/^berth-store migrate: UnauthenticatedError: /) })
  expect(await berthStore(['migrate', `dsh-jsonl:${root}`, '--server', 'http://127.0.0.1:9', '--api-key', 'k'])).toMatchObject({ code: 1, stderr: expect.stringMatching(/^berth-store migrate: BerthConnectionError: /) })

  // Usage errors.
  expect(await berthStore(['migrate', `jsonl:${root}`, ...berth])).toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining(`berth-store migrate: error: "jsonl:${root}": expected dsh-jsonl:DIR`) })
  expect(await berthStore(['migrate', `dsh-jsonl:${root}`])).toMatchObject({ code: 2, stderr: expect.stringContaining('name the berth') })
  expect(await berthStore(['import'])).toMatchObject({ code: 2, stderr: expect.stringContaining('unknown command "import"') })
  expect(await berthStore([])).toMatchObject({ code: 2, stdout: expect.stringContaining('usage: berth-store migrate') })
})

it('on a terminal, a progress line on stderr: sessions done of all, percent, ETA, events and rate; --no-progress drops it', async () => {
  const { root, sessions } = await harnessRoot('none')
  const total = sessions.reduce((n, [, count]) => n + count, 0)
  const args = [`dsh-jsonl:${root}`, '--server', inject('berthUrl'), '--api-key', inject('berthServiceKey'), '--namespace', freshNamespace(), '--dry-run']
  for (const quiet of [false, true]) {
    let stderr = ''
    const code = await migrateMain(quiet ? [...args, '--no-progress'] : args, {
      stdout: { write: () => true },
      stderr: { write: (text: string) => { stderr += text }, isTTY: true },
      env: {},
    })
    expect(code).toBe(0)
    if (quiet) expect(stderr).toBe('')
    else expect(stderr).toMatch(new RegExp(`\\rimport: 6/6 sessions \\(100%\\), ETA 0s, ${total} events \\(\\d+/s\\)\\n$`))
  }
})
