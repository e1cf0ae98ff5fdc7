/**
 * `berth-store migrate`'s command line and report (issue 56), on any Node: bad input is
 * a usage error (exit 2) saying what is expected, before anything is read or written;
 * the report has the keys and text of Python's `berth-migrate`; the progress line gives
 * sessions, events, rate and ETA. (The runs themselves, which need the harness's
 * Node >= 22 packages, are test/coordinator/migrate-*.test.ts.)
 */
import * as zlib from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { MigrationEnvironmentError, MigrationUsageError } from '../src/migrate/errors.js'
import { migrateMain, parseMigrateArguments, parseStore } from '../src/migrate/cli.js'
import { Report } from '../src/migrate/report.js'

async function run(argv: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = ''
  let stderr = ''
  const code = await migrateMain(argv, {
    stdout: { write: (text: string) => { stdout += text } },
    stderr: { write: (text: string) => { stderr += text }, isTTY: false },
    env,
  })
  return { code, stdout, stderr }
}

const berth = ['--server', 'http://127.0.0.1:1', '--api-key', 'k']

describe('arguments', () => {
  it('takes a SOURCE (or --from) to import and --to TARGET to export, as Python berth-migrate does', () => {
    expect(parseMigrateArguments(['dsh-jsonl:/srv/logs', ...berth], {})).toMatchObject({ direction: 'import', root: '/srv/logs', server: 'http://127.0.0.1:1', apiKey: 'k', dryRun: false, json: false, progress: true })
    expect(parseMigrateArguments(['--from', 'dsh-jsonl:rel/dir', ...berth, '--dry-run', '--json', '--no-progress'], {})).toMatchObject({ direction: 'import', root: 'rel/dir', dryRun: true, json: true, progress: false })
    expect(parseMigrateArguments(['--to', 'dsh-jsonl:out', '--server', 'http://h', '--compression', 'none', '--namespace', 'team.'], { BERTH_API_KEY: 'from-env' })).toMatchObject({ direction: 'export', root: 'out', apiKey: 'from-env', compression: 'none', namespace: 'team.' })
    expect(parseMigrateArguments(['--help'], {})).toBeUndefined()
  })

  it.each([
    [['openai-sqlite:chat.db', ...berth], /openai-sqlite: stores are moved by Python's berth-migrate/],
    [['jsonl:/srv/logs', ...berth], /"jsonl:\/srv\/logs": expected dsh-jsonl:DIR/],
    [['dsh-jsonl:', ...berth], /expected dsh-jsonl:DIR/],
    [['/srv/logs', ...berth], /expected dsh-jsonl:DIR/],
    [[...berth], /give a SOURCE to import, or --to TARGET/],
    [['dsh-jsonl:a', '--to', 'dsh-jsonl:b', ...berth], /one of them/],
    [['dsh-jsonl:a', '--from', 'dsh-jsonl:b', ...berth], /give the SOURCE once/],
    [['dsh-jsonl:a', 'extra', ...berth], /unexpected arguments: extra/],
    [['dsh-jsonl:a'], /name the berth: --server URL --api-key KEY/],
    [['dsh-jsonl:a', '--server', 'http://h'], /--server needs --api-key/],
    [['dsh-jsonl:a', '--data', './berth-data', '--tenant', 't'], /talks to a berth server/],
    [['dsh-jsonl:a', ...berth, '--compression', 'gzip'], /--compression: expected zstd or none/],
    [['dsh-jsonl:a', ...berth, '--namespace', 'a/b'], /--namespace: namespace must be at most 64 characters of \[A-Za-z0-9._-\]/],
    [['dsh-jsonl:a', ...berth, '--frobnicate'], /Unknown option '--frobnicate'/],
  ])('%j is a usage error', (argv, message) => {
    expect(() => parseMigrateArguments(argv, {})).toThrow(MigrationUsageError)
    expect(() => parseMigrateArguments(argv, {})).toThrow(message)
  })

  it('a usage error exits 2 with the usage and the reason on stderr, and reads nothing', async () => {
    const result = await run(['sqlite:/x.db', ...berth])
    expect(result.code).toBe(2)
    expect(result.stdout).toBe('')
    expect(result.stderr).toMatch(/^usage: berth-store migrate SOURCE/)
    expect(result.stderr).toMatch(/berth-store migrate: error: "sqlite:\/x.db": expected dsh-jsonl:DIR/)
    expect(parseStore('dsh-jsonl:C:/with:colons')).toBe('C:/with:colons')
  })

  it('--help prints the usage and exits 0', async () => {
    const result = await run(['--help'])
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/dsh-jsonl:DIR {10}a harness JSONL root/)
  })

  it.runIf(typeof (zlib as { zstdCompress?: unknown }).zstdCompress !== 'function')('on a Node without Zstandard: a plain environment error, exit 1', async () => {
    const result = await run(['dsh-jsonl:/nonexistent', ...berth])
    expect(result.code).toBe(1)
    expect(result.stderr).toBe(`berth-store migrate: MigrationEnvironmentError: the DeepSeek Harness JSONL backend needs Node >= 22.15 (node:zlib Zstandard); this is Node ${process.versions.node}\n`)
    expect(new MigrationEnvironmentError('x').name).toBe('MigrationEnvironmentError')
  })
})

describe('the report', () => {
  it('has the keys and the text of Python berth-migrate', () => {
    const report = new Report('import', 'dsh-jsonl:/srv/logs', 'berth:http://h', true)
    report.sessions = 3
    report.imported = 2
    report.unchanged = 1
    report.records = 40
    report.recordsUnchanged = 7
    report.bytes = 1234
    report.skip('s1', 'torn tail', 'why')
    report.change('s2', 'event 4', 'because')
    const json = report.toJSON()
    expect(Object.keys(json)).toEqual(['direction', 'source', 'target', 'dry_run', 'sessions', 'sessions_imported', 'sessions_unchanged', 'events', 'events_unchanged', 'pending_write_groups', 'bytes', 'skipped', 'changed', 'seconds'])
    expect(json).toMatchObject({ dry_run: true, sessions: 3, sessions_imported: 2, sessions_unchanged: 1, events: 40, events_unchanged: 7, bytes: 1234, skipped: [{ session: 's1', record: 'torn tail', reason: 'why' }], changed: [{ session: 's2', record: 'event 4', reason: 'because' }] })
    expect(report.clean).toBe(false)
    expect(report.text()).toMatch(/^berth-store migrate import dsh-jsonl:\/srv\/logs -> berth:http:\/\/h: 3 sessions \(2 with new records, 1 unchanged\); would write 40 events \(1234 bytes\), 7 already there, in [\d.]+s\n {2}changed: s2 event 4: because\n {2}skipped: s1 torn tail: why\n$/)
  })

  it('the progress line: sessions done of all, percent, ETA, events and rate', () => {
    let out = ''
    const report = new Report('export', 'berth:x', 'dsh-jsonl:y')
    report.progress = { write: (text: string) => { out += text } }
    report.total = 4
    report.sessions = 1
    report.records = 10
    report.tick(true)
    expect(out).toMatch(/^\rexport: 1\/4 sessions \(25%\), ETA \d+s, 10 events \(\d+\/s\)\n$/)
  })
})
