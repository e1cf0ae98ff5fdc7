/**
 * Whose sessions an import makes: the berth user each harness session is imported under
 * — the same choices, rules and errors as Python's `berth-migrate`
 * (`python/berth/migrate/users.py`):
 *
 * - `--user-from caller` (the default): every session under the caller's own user, as
 *   the drop-in makes them.
 * - `--user-map FILE.json`: a JSON object mapping harness session ids to berth user ids;
 *   a session it does not name is skipped and reported. The sessions are made for their
 *   users under the caller's tenant (`user` in the create, with the drop-in's own labels,
 *   title and policy: the drop-in then finds the session and writes on), which takes a
 *   `service` (or `admin`) key: `checkRole` refuses a `user` key (after `whoami`) before
 *   anything is written. A berth session that already belongs to another user is
 *   reported as changed and left as it is.
 *
 * A bad mapping file (unreadable, not JSON, not an object of strings, a user id outside
 * berth's id grammar) is `UserMapError` before anything is written (exit status 2).
 */
import { readFile } from 'node:fs/promises'
import type { BerthClient, CreateSessionBody } from '../client.js'
import { AlreadyExistsError, NotFoundError } from '../errors.js'
import { MigrationError } from './errors.js'

/** berth's id grammar (users, tenants, sessions): 1–128 bytes of `[A-Za-z0-9._~-]`. */
const BERTH_ID = /^[A-Za-z0-9._~-]{1,128}$/

/**
 * A `--user-map` file the migration cannot use, or a caller that cannot act for its
 * users; nothing was written (exit status 2, as Python's `UserMapError`).
 */
export class UserMapError extends MigrationError {
  override readonly name = 'UserMapError'
}

/** Harness session id → berth user (`--user-map`). */
export interface UserMap {
  /** The file it was read from (the reports name it). */
  readonly path: string
  readonly users: ReadonlyMap<string, string>
}

/** The berth user a map names for `sessionId`, or `undefined`. */
export function userFor(map: UserMap, sessionId: string): string | undefined {
  return map.users.get(sessionId)
}

function isBerthId(value: string): boolean {
  return BERTH_ID.test(value) && value !== '.' && value !== '..'
}

/** The mapping in `path`, checked whole (`UserMapError` names what is wrong). */
export async function loadUserMap(path: string): Promise<UserMap> {
  let text: string
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(await readFile(path))
  } catch (error) {
    const reason = error instanceof TypeError ? 'not UTF-8' : (error as Error).message
    throw new UserMapError(`--user-map ${path}: cannot read it: ${reason}`)
  }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    throw new UserMapError(`--user-map ${path}: not JSON: ${(error as Error).message}`)
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    const kind = value === null ? 'null' : Array.isArray(value) ? 'an array' : `a ${typeof value}`
    throw new UserMapError(`--user-map ${path}: expected a JSON object of source id -> berth user, not ${kind}`)
  }
  const entries = Object.entries(value as Record<string, unknown>)
  if (entries.length === 0) throw new UserMapError(`--user-map ${path}: maps no session`)
  const users = new Map<string, string>()
  for (const [sessionId, user] of entries) {
    if (typeof user !== 'string') {
      throw new UserMapError(`--user-map ${path}: ${JSON.stringify(sessionId)} maps to ${JSON.stringify(user)}, not a user id (a string)`)
    }
    if (!isBerthId(user)) {
      throw new UserMapError(`--user-map ${path}: ${JSON.stringify(sessionId)} maps to ${JSON.stringify(user)}, not a berth user id ` +
        '(1-128 bytes of A-Z a-z 0-9 . _ ~ -, never . or ..)')
    }
    users.set(sessionId, user)
  }
  return { path, users }
}

/** Refuses a `user` key (it acts only for itself) before an import for other users. */
export async function checkRole(client: BerthClient): Promise<void> {
  const principal = await client.whoami()
  if (principal.role !== 'service' && principal.role !== 'admin') {
    throw new UserMapError(`--user-map: the caller is a ${JSON.stringify(principal.role)} key (user ${JSON.stringify(principal.user)}), ` +
      'which makes sessions only for itself: import with a service key')
  }
}

/** The user whose session `berthId` is, or `undefined` when berth holds no such session. */
async function ownerOf(client: BerthClient, berthId: string): Promise<string | undefined> {
  try {
    return (await client.getSession(berthId)).header.scope.user
  } catch (error) {
    if (error instanceof NotFoundError) return undefined
    throw error
  }
}

/**
 * The berth session `berthId` (`create`: the drop-in's own body) for `user`: made for it when
 * missing (not on a dry run). `undefined` when it is (or would be) `user`'s; else the
 * user it belongs to (someone made it meanwhile, or before).
 */
export async function claim(client: BerthClient, berthId: string, create: CreateSessionBody, user: string, dryRun: boolean): Promise<string | undefined> {
  let held = await ownerOf(client, berthId)
  if (held === undefined && !dryRun) {
    try {
      held = (await client.createSession({ ...create, id: berthId, user })).header.scope.user
    } catch (error) {
      if (!(error instanceof AlreadyExistsError)) throw error
      held = await ownerOf(client, berthId)
    }
  }
  return held === undefined || held === user ? undefined : held
}

/** The reason a session under another user is left as it is. */
export function elsewhere(user: string, held: string): string {
  return `berth holds this session under user ${JSON.stringify(held)}, the user map names ${JSON.stringify(user)}: left as it is`
}
