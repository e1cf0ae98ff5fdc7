/**
 * `berth-store migrate`: the TypeScript half of `berth-migrate` (Python's console script
 * moves the OpenAI Agents SDK, LangGraph and ADK stores; this one moves DeepSeek Harness
 * JSONL roots, through the harness's own JSONL backend). The same arguments, report and
 * exit status as Python's:
 *
 *     berth-store migrate SOURCE [berth]          import SOURCE into berth
 *     berth-store migrate --to TARGET [berth]     export berth into TARGET
 *
 * SOURCE / TARGET: `dsh-jsonl:DIR`. The berth: `--server URL --api-key KEY` (or
 * `BERTH_API_KEY`). Whose sessions an import makes (`users.ts`): the caller's user
 * (`--user-from caller`, the default), or `--user-map FILE.json` (harness session id →
 * berth user, with a service key). Exit status: 0 when the target holds everything, 1
 * when records were skipped or found changed (the report says which and why) or the run
 * failed (said on stderr), 2 on a usage error (a bad `--user-map` file, or a user key
 * importing for others, included: nothing written).
 */
import { parseArgs } from 'node:util'
import { BerthClient } from '../client.js'
import { BerthHandlePersistence } from '../dsh/persistence.js'
import { assertNamespace } from '../dsh/ids.js'
import { MigrationError, MigrationUsageError } from './errors.js'
import { exportJsonl, importJsonl } from './dsh-jsonl.js'
import { type JsonlCompression, loadHarness } from './harness.js'
import { Report, type ProgressStream } from './report.js'
import { checkRole, loadUserMap, type UserMap, UserMapError } from './users.js'

export const PROGRAM = 'berth-store migrate'

/** The stores Python's `berth-migrate` moves: named here only to send their users there. */
const PYTHON_KINDS = ['openai-sqlite', 'openai-sqlalchemy', 'langgraph-sqlite', 'langgraph-postgres', 'adk']

export const USAGE = `usage: ${PROGRAM} SOURCE [--server URL --api-key KEY] [options]
       ${PROGRAM} --to TARGET [--server URL --api-key KEY] [options]

Move DeepSeek Harness sessions into berth (SOURCE) or back out (--to TARGET), through
the harness's own JSONL backend (@deepseek-ai/dsh-session-persistence-jsonl) and
berth's drop-in (BerthHandlePersistence).

SOURCE / TARGET:
  dsh-jsonl:DIR          a harness JSONL root (the backend's \`root\`)

options:
  --from SOURCE          the same as SOURCE
  --to TARGET            export berth's harness sessions into TARGET
  --server URL           berth server URL (HTTP)
  --api-key KEY          its API key (or BERTH_API_KEY); the key's tenant and user own what is imported
  --namespace NS         prefix of the harness sessions' berth ids (default dsh., as the drop-in's)
  --compression MODE     zstd or none: the root's encoding (default: the root's own; zstd for a new root)
  --user-from caller     import: the sessions become the caller's user's (the default)
  --user-map FILE.json   import: a JSON object of harness session id -> berth user; sessions it
                         does not name are skipped (needs a service key)
  --dry-run              write nothing; report what would be written
  --json                 print the final report as JSON
  --no-progress          no progress line on stderr
  -h, --help             this help
`

export interface CliIo {
  readonly stdout: ProgressStream
  readonly stderr: ProgressStream & { readonly isTTY?: boolean }
  readonly env: Readonly<Record<string, string | undefined>>
}

export interface MigrateArguments {
  readonly direction: 'import' | 'export'
  /** The JSONL root. */
  readonly root: string
  readonly server: string
  readonly apiKey: string
  readonly namespace: string | undefined
  readonly compression: JsonlCompression | undefined
  readonly dryRun: boolean
  readonly json: boolean
  readonly progress: boolean
  /** `--user-map FILE.json` (import only): read and checked by `migrateMain` before the run. */
  readonly userMap: string | undefined
}

/** `dsh-jsonl:DIR` → DIR; anything else is a usage error saying what is expected. */
export function parseStore(spec: string): string {
  const colon = spec.indexOf(':')
  const kind = colon < 0 ? spec : spec.slice(0, colon)
  const where = colon < 0 ? '' : spec.slice(colon + 1)
  if (kind === 'dsh-jsonl' && where !== '') return where
  if (PYTHON_KINDS.includes(kind)) {
    throw new MigrationUsageError(`${JSON.stringify(spec)}: ${kind}: stores are moved by Python's berth-migrate (pip install berth-store); this command moves DeepSeek Harness JSONL roots: dsh-jsonl:DIR`)
  }
  throw new MigrationUsageError(`${JSON.stringify(spec)}: expected dsh-jsonl:DIR (a DeepSeek Harness JSONL root)`)
}

/** The command line (after `migrate`) → what to do; `undefined` for `--help`. */
export function parseMigrateArguments(argv: readonly string[], env: CliIo['env']): MigrateArguments | undefined {
  let parsed
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: {
        from: { type: 'string' },
        to: { type: 'string' },
        server: { type: 'string' },
        'api-key': { type: 'string' },
        namespace: { type: 'string' },
        compression: { type: 'string' },
        'dry-run': { type: 'boolean' },
        json: { type: 'boolean' },
        'no-progress': { type: 'boolean' },
        'user-from': { type: 'string' },
        'user-map': { type: 'string' },
        // Python's embedded-store options: refused with the reason below.
        data: { type: 'string' },
        tenant: { type: 'string' },
        user: { type: 'string' },
        role: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    })
  } catch (error) {
    throw new MigrationUsageError((error as Error).message)
  }
  const { values, positionals } = parsed
  if (values.help === true) return undefined
  if (positionals.length > 1) throw new MigrationUsageError(`unexpected arguments: ${positionals.slice(1).join(' ')}`)
  const source = positionals[0] ?? values.from
  if (positionals[0] !== undefined && values.from !== undefined) throw new MigrationUsageError('give the SOURCE once: as an argument or as --from')
  if ((source === undefined) === (values.to === undefined)) {
    throw new MigrationUsageError('give a SOURCE to import, or --to TARGET to export (one of them)')
  }
  const root = parseStore((source ?? values.to) as string)
  checkUsers(values['user-from'], values['user-map'], source !== undefined)
  if (values.data !== undefined || values.tenant !== undefined || values.user !== undefined || values.role !== undefined) {
    throw new MigrationUsageError('--data/--tenant/--user/--role name Python\'s embedded store; this command talks to a berth server: --server URL --api-key KEY (the key\'s tenant and user own what is imported)')
  }
  if (values.server === undefined) throw new MigrationUsageError('name the berth: --server URL --api-key KEY')
  const apiKey = values['api-key'] ?? env.BERTH_API_KEY
  if (apiKey === undefined || apiKey === '') throw new MigrationUsageError('--server needs --api-key (or BERTH_API_KEY)')
  if (values.namespace !== undefined) {
    try {
      assertNamespace(values.namespace)
    } catch (error) {
      throw new MigrationUsageError(`--namespace: ${(error as Error).message}`)
    }
  }
  const compression = values.compression
  if (compression !== undefined && compression !== 'zstd' && compression !== 'none') {
    throw new MigrationUsageError(`--compression: expected zstd or none, got ${JSON.stringify(compression)}`)
  }
  return {
    direction: source !== undefined ? 'import' : 'export',
    root,
    server: values.server,
    apiKey,
    namespace: values.namespace,
    compression,
    dryRun: values['dry-run'] === true,
    json: values.json === true,
    progress: values['no-progress'] !== true,
    userMap: values['user-map'],
  }
}

/** Which `--user-from` / `--user-map` the direction takes (Python's `_check_users`, for harness roots). */
function checkUsers(userFrom: string | undefined, userMap: string | undefined, importing: boolean): void {
  if (userFrom === undefined && userMap === undefined) return
  if (!importing) throw new MigrationUsageError('--user-from and --user-map are for an import (a SOURCE); an export keeps each session\'s own')
  if (userFrom !== undefined && userMap !== undefined) throw new MigrationUsageError('give --user-from or --user-map, not both')
  if (userFrom === 'adk-user') {
    throw new MigrationUsageError('--user-from adk-user is for an adk: source (Python\'s berth-migrate); dsh-jsonl keeps no user (--user-from caller, or --user-map FILE.json)')
  }
  if (userFrom !== undefined && userFrom !== 'caller') {
    throw new MigrationUsageError(`--user-from: expected caller, got ${JSON.stringify(userFrom)}`)
  }
  if (userMap === '') throw new MigrationUsageError('--user-map: name a file')
}

/** One run: the report (the caller prints it). Throws the run's failure. */
export async function runMigration(args: MigrateArguments, io: CliIo, users?: UserMap): Promise<Report> {
  const harness = await loadHarness()
  const client = new BerthClient({ baseUrl: args.server, apiKey: args.apiKey })
  // Before the source is even mounted: a user key writes nothing.
  if (users !== undefined) await checkRole(client)
  const persistence = new BerthHandlePersistence({
    client,
    ...(args.namespace === undefined ? {} : { namespace: args.namespace }),
    // The harness's own vocabulary and format version: the drop-in's fail-closed reads
    // take exactly what the harness takes.
    knownEventTypes: harness.session.KNOWN_SESSION_EVENT_TYPES,
    formatVersion: harness.session.SESSION_FORMAT_VERSION,
  })
  const store = `dsh-jsonl:${args.root}`
  const berth = `berth:${args.server}`
  const report = args.direction === 'import'
    ? new Report('import', store, berth, args.dryRun, PROGRAM)
    : new Report('export', berth, store, args.dryRun, PROGRAM)
  if (args.progress && io.stderr.isTTY === true) report.progress = io.stderr
  if (users !== undefined) report.users = new Map()
  const options = {
    harness,
    root: args.root,
    persistence,
    report,
    ...(args.compression === undefined ? {} : { compression: args.compression }),
    ...(users === undefined ? {} : { users }),
  }
  try {
    if (args.direction === 'import') await importJsonl(options)
    else await exportJsonl(options)
  } finally {
    await persistence.close()
  }
  return report
}

function errorLine(error: unknown): string {
  if (error instanceof AggregateError) return `${error.name}: ${error.message} (${error.errors.map((each) => errorLine(each)).join('; ')})`
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error)
}

/** `berth-store migrate ARGS`: prints the report, returns the exit status. */
export async function migrateMain(argv: readonly string[], io: CliIo): Promise<number> {
  let args: MigrateArguments | undefined
  try {
    args = parseMigrateArguments(argv, io.env)
  } catch (error) {
    if (!(error instanceof MigrationUsageError)) throw error
    io.stderr.write(`${USAGE}\n${PROGRAM}: error: ${error.message}\n`)
    return 2
  }
  if (args === undefined) {
    io.stdout.write(USAGE)
    return 0
  }
  let report: Report
  try {
    const users = args.userMap === undefined ? undefined : await loadUserMap(args.userMap)
    report = await runMigration(args, io, users)
  } catch (error) {
    if (error instanceof UserMapError) {
      io.stderr.write(`${PROGRAM}: ${errorLine(error)}\n`)
      return 2
    }
    io.stderr.write(`${PROGRAM}: ${errorLine(error)}\n`)
    // Not one of the failures a run reports (ours, berth's, the file system's): the trace too.
    if (!(error instanceof MigrationError) && io.env.BERTH_DEBUG !== undefined && error instanceof Error) io.stderr.write(`${error.stack ?? ''}\n`)
    return 1
  }
  io.stdout.write(args.json ? `${JSON.stringify(report.toJSON(), null, 2)}\n` : report.text())
  return report.clean ? 0 : 1
}
