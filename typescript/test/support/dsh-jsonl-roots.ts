/**
 * Helpers of the migration tests (test/coordinator/migrate-*.test.ts, Node >= 22): JSONL
 * roots built by the harness itself, read back through the harness's JSONL backend and
 * through berth's two drop-ins, a tree hash, and the CLI run in-process.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createHash, randomUUID } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { inject } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import { KNOWN_SESSION_EVENT_TYPES, SESSION_FORMAT_VERSION, SessionStore, type SessionId } from '@deepseek-ai/dsh-session'
import { BerthCoordinatorBackend } from '../../src/dsh-coordinator/index.js'
import { BerthHandlePersistence } from '../../src/dsh/index.js'
import { migrateMain } from '../../src/migrate/cli.js'
import { loadHarness, mountRoot, type JsonlCompression, type MountedRoot } from '../../src/migrate/harness.js'

const here = dirname(fileURLToPath(import.meta.url))
const scratchDirs: string[] = []

export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  scratchDirs.push(dir)
  return dir
}

export function removeScratch(): void {
  for (const dir of scratchDirs.splice(0)) rmSync(dir, { recursive: true, force: true })
}

/**
 * A JSONL root written by the harness (`test/fixtures/dsh-jsonl-writer.mjs`): six
 * sessions, the last one SIGKILLed while its tool runs. Returns the root and what the
 * writer said (each session's id and event count).
 */
export async function harnessRoot(compression: JsonlCompression): Promise<{ root: string; sessions: [string, number][] }> {
  const root = join(scratchDir('dsh-root-'), 'sessions')
  const child = spawn(process.execPath, [resolve(here, '../fixtures/dsh-jsonl-writer.mjs'), root, compression], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const exited = new Promise((r) => child.once('exit', r))
  const first = await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next()
  child.kill('SIGKILL')
  await exited
  if (first.done === true) throw new Error(`the harness process exited: ${stderr}`)
  const said = JSON.parse(first.value as string) as { state: string; sessions: [string, number][] }
  if (said.state !== 'tool-running') throw new Error(`unexpected: ${first.value as string}`)
  return { root, sessions: said.sessions }
}

/**
 * A larger JSONL root written by the harness (`test/fixtures/dsh-jsonl-bulk-writer.mjs`):
 * `sessions` sessions of `turns` turns (19 events a turn). Returns the root and each
 * session's id and event count.
 */
export async function bulkRoot(sessions: number, turns: number, compression: JsonlCompression = 'zstd'): Promise<{ root: string; sessions: [string, number][] }> {
  const root = join(scratchDir('dsh-bulk-'), 'sessions')
  const run = await runNode([resolve(here, '../fixtures/dsh-jsonl-bulk-writer.mjs'), root, String(sessions), String(turns), compression])
  if (run.code !== 0) throw new Error(`the harness process failed (${String(run.code)}): ${run.stderr}`)
  return { root, sessions: (JSON.parse(run.stdout) as { sessions: [string, number][] }).sessions }
}

/** The package's `berth-store` command (dist/, built by the suite's global setup). */
export const BERTH_STORE_BIN = resolve(here, '../../dist/bin/berth-store.js')

export interface ProcessRun {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** A Node process (this test's Node) on `args`; `started` sees the child as soon as it runs. */
export function runNode(args: readonly string[], env: Record<string, string> = { PATH: process.env.PATH ?? '' }, started?: (child: ChildProcess) => void): Promise<ProcessRun> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(process.execPath, [...args], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
    child.once('error', reject)
    child.once('close', (code, signal) => resolveRun({ code, signal, stdout, stderr }))
    started?.(child)
  })
}

/** `berth-store ARGS` as a process (the package's `bin`). */
export function berthStore(args: readonly string[], env: Record<string, string> = {}, started?: (child: ChildProcess) => void): Promise<ProcessRun> {
  return runNode([BERTH_STORE_BIN, ...args], { PATH: process.env.PATH ?? '', ...env }, started)
}

/** Every file under `dir` (relative path → SHA-256), and every directory: the tree as bytes. */
export function treeHash(dir: string): Record<string, string> {
  const out: Record<string, string> = {}
  const walk = (path: string): void => {
    for (const entry of readdirSync(path, { withFileTypes: true })) {
      const full = join(path, entry.name)
      if (entry.isDirectory()) {
        out[`${relative(dir, full)}/`] = 'dir'
        walk(full)
      } else {
        out[relative(dir, full)] = createHash('sha256').update(readFileSync(full)).digest('hex')
      }
    }
  }
  walk(dir)
  return out
}

/** One session as a reader gives it: the header and each event's exact JSON text. */
export interface SessionView {
  readonly header: unknown
  readonly events: string[]
}

const texts = (events: readonly unknown[]): string[] => events.map((event) => JSON.stringify(event))

/** A JSONL root mounted through the harness's backend (the caller disposes it). */
export async function mountJsonl(root: string, compression?: JsonlCompression): Promise<MountedRoot> {
  return mountRoot(await loadHarness(), root, compression, true)
}

/** What the harness's JSONL backend reads: `readFrom(id, 0)` (stored) and `inspect(id)` (balanced), per session id. */
export async function readJsonl(root: string, compression?: JsonlCompression): Promise<{ stored: Map<string, SessionView>; inspected: Map<string, SessionView>; compression: JsonlCompression }> {
  const mounted = await mountJsonl(root, compression)
  try {
    const stored = new Map<string, SessionView>()
    const inspected = new Map<string, SessionView>()
    for (const header of await mounted.backend.list()) {
      const read = await mounted.backend.readFrom(header.id, 0)
      stored.set(header.id, { header: read.meta, events: texts(read.events) })
      const inspection = await mounted.backend.inspect(header.id)
      inspected.set(header.id, { header: inspection.meta, events: texts(inspection.events) })
    }
    return { stored, inspected, compression: mounted.compression }
  } finally {
    await mounted.dispose()
  }
}

export function serverConfig(namespace: string): { baseUrl: string; apiKey: string; namespace: string } {
  return { baseUrl: inject('berthUrl'), apiKey: inject('berthServiceKey'), namespace }
}

export function freshNamespace(): string {
  return `m${randomUUID().slice(0, 8)}.`
}

/** The handle-seam drop-in over the namespace, with the harness's own vocabulary. */
export function handlePersistence(namespace: string, runLeaseTtlMs?: number): BerthHandlePersistence {
  const { baseUrl, apiKey } = serverConfig(namespace)
  return new BerthHandlePersistence({
    client: { baseUrl, apiKey },
    namespace,
    knownEventTypes: KNOWN_SESSION_EVENT_TYPES,
    formatVersion: SESSION_FORMAT_VERSION,
    ...(runLeaseTtlMs === undefined ? {} : { runLeaseTtlMs }),
  })
}

/** What `BerthHandlePersistence` reads of every harness session in the namespace. */
export async function readBerthHandle(namespace: string): Promise<Map<string, SessionView>> {
  const persistence = handlePersistence(namespace)
  const out = new Map<string, SessionView>()
  for (const snapshot of await persistence.list()) {
    const handle = await persistence.open(snapshot.header.id, 'read')
    out.set(snapshot.header.id, { header: handle.header, events: texts(await handle.read(0)) })
    await handle.close()
  }
  return out
}

/** The rc.8 drop-in (`BerthCoordinatorBackend`) mounted in a harness context over the namespace. */
export async function mountCoordinator(namespace: string): Promise<{ backend: BerthCoordinatorBackend; dispose(): Promise<void> }> {
  const ctx = new Context()
  ctx.plugin(SessionStore)
  await (ctx.plugin(BerthCoordinatorBackend, serverConfig(namespace)) as unknown as Promise<unknown>)
  await new Promise((r) => setTimeout(r, 0))
  const backend = ctx.get('sessionPersistence') as BerthCoordinatorBackend
  return { backend, dispose: () => (ctx as unknown as { fiber: { dispose(): Promise<void> } }).fiber.dispose() }
}

/** What `BerthCoordinatorBackend` reads: stored (`readFrom`) and balanced (`inspect`), like `readJsonl`. */
export async function readBerthCoordinator(namespace: string): Promise<{ stored: Map<string, SessionView>; inspected: Map<string, SessionView> }> {
  const mounted = await mountCoordinator(namespace)
  try {
    const stored = new Map<string, SessionView>()
    const inspected = new Map<string, SessionView>()
    for (const header of await mounted.backend.list()) {
      const id = header.id as SessionId
      const read = await mounted.backend.readFrom(id, 0)
      stored.set(header.id, { header: read.meta, events: texts(read.events) })
      const inspection = await mounted.backend.inspect(id)
      inspected.set(header.id, { header: inspection.meta, events: texts(inspection.events) })
    }
    return { stored, inspected }
  } finally {
    await mounted.dispose()
  }
}

/** A map as a plain object sorted by key (for `toEqual` with readable diffs). */
export function byId(map: Map<string, SessionView>): Record<string, SessionView> {
  return Object.fromEntries([...map.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
}

export interface CliRun {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
  /** The `--json` report, when the run printed one. */
  readonly report: Record<string, unknown> | undefined
}

/** `berth-store migrate ARGS` in this process, against the suite's server and `namespace`. */
export async function migrate(args: readonly string[], namespace?: string): Promise<CliRun> {
  let stdout = ''
  let stderr = ''
  const berth = namespace === undefined ? [] : ['--server', inject('berthUrl'), '--api-key', inject('berthServiceKey'), '--namespace', namespace]
  const code = await migrateMain([...args, ...berth], {
    stdout: { write: (text: string) => { stdout += text } },
    stderr: { write: (text: string) => { stderr += text }, isTTY: false },
    env: {},
  })
  let report: Record<string, unknown> | undefined
  if (args.includes('--json') && stdout.trim().startsWith('{')) report = JSON.parse(stdout) as Record<string, unknown>
  return { code, stdout, stderr, report }
}
