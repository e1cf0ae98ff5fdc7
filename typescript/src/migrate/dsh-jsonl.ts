/**
 * DeepSeek Harness JSONL roots into berth, and back.
 *
 * Import: the root is read through the harness's own JSONL backend
 * (`@deepseek-ai/dsh-session-persistence-jsonl`, `harness.ts`): `list()` names its
 * sessions, `readFrom(id, 0)` gives each one's header and stored events — validated by
 * the harness, read-only, exactly what a resumed harness starts from (an interrupted
 * final turn stays open: the harness closes it when it resumes, on berth as on disk).
 * Each session is written through `BerthHandlePersistence`, the drop-in itself
 * (`create`, `append`, `close`), so the berth session is what the drop-in writes: the
 * header, then every event as its exact JSON text, at the event's own `time`. The
 * appends' idempotency keys are the drop-in's: the session, the seq and a digest of the
 * events' exact texts — the source record's identity and its content.
 *
 * A rerun compares before it writes: the events berth already holds must be the
 * source's first events, text for text; then only the events after them are appended (a
 * run killed half-way is resumed so). A session whose source changed since (or that
 * berth holds otherwise) is reported under `changed` and left as it is; a session that
 * went on on berth after the import (a harness resumed it there) is not a change.
 * A run killed with `kill -9` leaves the sessions it was writing owned by its berth runs
 * until their leases lapse (the session policy's `run_lease_ttl_ms`, 30 s as the drop-in
 * makes them): the rerun waits that out for a run nobody heartbeats, and skips (and
 * reports) a session whose owner is alive.
 *
 * With a user map (`users.ts`), each session is first made for its berth user (the
 * drop-in's own create body, with `user`), then written as above.
 *
 * Export: every harness session berth holds (label `dsh`, the namespace's) is read
 * through `BerthHandlePersistence` and written through the harness's JSONL backend
 * (`create`, then one `append`: the header and all events in one atomic file), with the
 * same comparison on a rerun.
 */
import { stat } from 'node:fs/promises'
import type { SessionEvent as HarnessEvent, SessionHeader as HarnessHeader, SessionId as HarnessSessionId } from '@deepseek-ai/dsh-session'
import { BerthConnectionError, BerthError, InvalidError, LimitExceededError, PayloadTooLargeError } from '../errors.js'
import { SessionAlreadyExistsError, SessionAlreadyOwnedError, SessionPersistenceNotFoundError } from '../dsh/errors.js'
import { materializeCreateHeader } from '../dsh/storage-contract.js'
import type { BerthClient } from '../client.js'
import { NotFoundError } from '../errors.js'
import type { BerthHandlePersistence } from '../dsh/persistence.js'
import type { SessionEvent, SessionHandle, SessionHeader } from '../dsh/types.js'
import { MigrationError } from './errors.js'
import { type Harness, type JsonlCompression, type MountedRoot, mountRoot } from './harness.js'
import type { Report } from './report.js'
import { claim, elsewhere, type UserMap, userFor } from './users.js'

/**
 * Sessions moved at once: each one is several round trips to berth (its record, its run,
 * its appends, each synced by the server), so a few in flight hide that latency. Within a
 * session everything stays in order.
 */
export const SESSIONS_IN_FLIGHT = 8

/** Runs `work` over `items`, at most `limit` at a time, in the items' order of start. */
async function eachConcurrently<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0
  let failure: { error: unknown } | undefined
  const worker = async (): Promise<void> => {
    while (failure === undefined && next < items.length) {
      const item = items[next++] as T
      try {
        await work(item)
      } catch (error) {
        failure ??= { error }
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
  if (failure !== undefined) throw failure.error
}

export interface JsonlRunOptions {
  readonly harness: Harness
  /** The JSONL root. */
  readonly root: string
  /** Its encoding; default: the root's own (`zstd`, the harness's default, for a new root). */
  readonly compression?: JsonlCompression
  /** The drop-in the sessions are written through (import) or read from (export). */
  readonly persistence: BerthHandlePersistence
  readonly report: Report
  /** Import: whose sessions they become (`--user-map`); none: the caller's. */
  readonly users?: UserMap
}

/** A harness event's exact text, as the drop-in stores it. */
function textOf(event: unknown): string {
  return JSON.stringify(event)
}

function bytesOf(texts: readonly string[]): number {
  let total = 0
  for (const text of texts) total += Buffer.byteLength(text)
  return total
}

/**
 * A failure of the whole run, not of one session: berth refusing the key or unreachable,
 * the file system failing, the migration's own errors. Anything else a session's read or
 * write throws (the harness refusing a log, a header it cannot store) is that session's:
 * reported under `skipped`, and the run goes on.
 */
function failsTheRun(error: unknown): boolean {
  if (error instanceof MigrationError || error instanceof BerthConnectionError) return true
  if (error instanceof BerthError) return !isRefusedRecord(error)
  return typeof (error as { code?: unknown })?.code === 'string' && /^E[A-Z]+$/.test((error as { code: string }).code)
}

/** berth refusing a record it cannot hold (too large, over a limit, invalid): that record's, not the run's. */
function isRefusedRecord(error: unknown): boolean {
  return error instanceof PayloadTooLargeError || error instanceof LimitExceededError || error instanceof InvalidError
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error)
}

/** Where two logs part: the first index at which their texts differ, or `undefined` when one is a prefix of the other. */
function divergence(left: readonly string[], right: readonly string[]): number | undefined {
  const length = Math.min(left.length, right.length)
  for (let index = 0; index < length; index++) if (left[index] !== right[index]) return index
  return undefined
}

function byCreation(a: { createdAt: number; id: string }, b: { createdAt: number; id: string }): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
}

// ---- import -------------------------------------------------------------------------

/** Every session of a JSONL root into berth (see the module's doc). */
export async function importJsonl(options: JsonlRunOptions): Promise<void> {
  const { harness, report, persistence } = options
  const mounted = await mountRoot(harness, options.root, options.compression, true)
  try {
    const headers = [...mounted.headers].sort(byCreation)
    report.total = headers.length
    try {
      await eachConcurrently(headers, SESSIONS_IN_FLIGHT, async (header) => {
        try {
          await importSession(mounted, persistence, header, report, options.users)
        } catch (error) {
          if (failsTheRun(error)) throw error
          report.skip(header.id, 'session', `not imported: ${describe(error)}`)
        }
        report.sessions++
        report.tick()
      })
    } finally {
      report.orderBy(headers.map((header) => header.id))
    }
    report.tick(true)
  } finally {
    await mounted.dispose()
  }
}

async function importSession(mounted: MountedRoot, persistence: BerthHandlePersistence, listed: HarnessHeader, report: Report, users: UserMap | undefined): Promise<void> {
  const id = listed.id
  const user = users === undefined ? undefined : userFor(users, id)
  if (users !== undefined && user === undefined) {
    report.skip(id, 'session', `the user map ${users.path} names no berth user for it: not imported`)
    return
  }
  const { meta, events } = await mounted.backend.readFrom(id, 0)
  await reportTornTail(mounted, meta, report)
  const header = meta as unknown as SessionHeader
  if (user !== undefined) {
    // The session made for its user first: the drop-in finds it (empty) and writes on.
    const create = persistence.createBody(header, materializeCreateHeader(header).text) ?? {}
    const held = await claim(persistence.client, persistence.berthId(id), create, user, report.dryRun)
    if (held !== undefined) {
      report.change(id, 'session', elsewhere(user, held))
      return
    }
    report.owned(user)
  }
  const texts = events.map(textOf)
  const held = await heldOnBerth(persistence, id)
  if (held !== undefined) {
    if (textOf(held.header) !== textOf(header)) {
      report.change(id, 'header', 'berth already holds this session with another header: not imported')
      return
    }
    const at = divergence(held.texts, texts)
    if (at !== undefined) {
      report.change(id, `event ${at}`,
        'the source differs from what berth holds from this event on (changed at the source since the last import, or the session went on otherwise on berth): left as it is')
      return
    }
  }
  const start = held?.texts.length ?? 0
  report.recordsUnchanged += Math.min(start, texts.length)
  if (start >= texts.length) {
    report.unchanged++
    return
  }
  report.imported++
  if (report.dryRun) {
    report.records += texts.length - start
    report.bytes += bytesOf(texts.slice(start))
    return
  }
  await awaitLapsedRuns(persistence.client, persistence.berthId(id))
  await writeSession(persistence, header, held !== undefined, events as unknown as SessionEvent[], texts, start, report)
}

/**
 * Appends `events[start..]` to the session through the drop-in's write handle (`created`
 * when berth holds none of it yet), after checking, with ownership taken, that berth's
 * log is still the one compared.
 */
async function writeSession(persistence: BerthHandlePersistence, header: SessionHeader, held: boolean, events: readonly SessionEvent[], texts: readonly string[], start: number, report: Report): Promise<void> {
  const id = header.id
  const owned = (): void => report.skip(id, `events ${start}..${texts.length - 1}`,
    'the berth session is owned by a live writer (a harness resumed it, or another import is writing it): not imported; run again once it is released')
  let handle: SessionHandle
  try {
    handle = held ? await persistence.open(id, 'write') : await persistence.create(header)
  } catch (error) {
    if (error instanceof SessionAlreadyOwnedError) return owned()
    throw error
  }
  try {
    if (held) {
      // Ownership taken: the log must still be the one compared (nobody appended meanwhile).
      const now = (await handle.read(0)).map(textOf)
      if (now.length !== start || divergence(now, texts) !== undefined) {
        report.change(id, `event ${start}`, 'berth\'s session changed during the import: left as it is (run again)')
        return
      }
    }
    await appendAll(handle, id, events, texts, start, report)
  } catch (error) {
    // A created session's first append attaches its run: another writer there is the same refusal.
    if (!held && error instanceof SessionAlreadyExistsError) return owned()
    throw error
  } finally {
    await handle.close()
  }
}

/** Margin past a lease's end before the import tries the session (the server's clock may run a little behind). */
const LEASE_MARGIN_MS = 250

/**
 * Waits out the runs attached to `berthId` that nobody keeps alive: a killed import's (or
 * harness's) run holds the session until its lease lapses, at most the session policy's
 * `run_lease_ttl_ms` from now. It looks again four times a lease (a live owner
 * heartbeats more often than that): a lease that moved on has a live owner, and the
 * caller's attach then reports it. No session, or no run: no wait.
 */
async function awaitLapsedRuns(client: BerthClient, berthId: string): Promise<void> {
  const seen = await leaseOfRuns(client, berthId)
  if (seen === undefined) return
  const step = Math.max(LEASE_MARGIN_MS, Math.floor(seen.leaseTtlMs / 4))
  // Bounded whatever the clocks say: one lease and a margin past the one seen.
  const deadline = Date.now() + seen.leaseTtlMs + step + LEASE_MARGIN_MS
  while (Date.now() < deadline) {
    const remaining = Math.min(seen.leaseUntil + LEASE_MARGIN_MS, deadline) - Date.now()
    if (remaining <= 0) return
    await new Promise((resolve) => setTimeout(resolve, Math.min(step, remaining)))
    const now = await leaseOfRuns(client, berthId)
    if (now === undefined || now.leaseUntil > seen.leaseUntil) return // released, or alive: the attach tells
  }
}

/** The latest lease of the runs attached to `berthId`, with the session's run lease; `undefined` when none is. */
async function leaseOfRuns(client: BerthClient, berthId: string): Promise<{ leaseUntil: number; leaseTtlMs: number } | undefined> {
  let record
  try {
    record = await client.getSession(berthId)
  } catch (error) {
    if (error instanceof NotFoundError) return undefined
    throw error
  }
  const attached = record.runs.filter((run) => run.status === 'attached')
  if (attached.length === 0) return undefined
  return { leaseUntil: Math.max(...attached.map((run) => run.lease_until)), leaseTtlMs: record.header.policy.run_lease_ttl_ms }
}

/** What berth holds of a harness session (its header and events' texts), or `undefined` when it holds none. */
async function heldOnBerth(persistence: BerthHandlePersistence, id: string): Promise<{ header: SessionHeader; texts: string[] } | undefined> {
  let reader: SessionHandle
  try {
    reader = await persistence.open(id, 'read')
  } catch (error) {
    if (error instanceof SessionPersistenceNotFoundError) return undefined
    throw error
  }
  try {
    return { header: reader.header, texts: (await reader.read(0)).map(textOf) }
  } finally {
    await reader.close()
  }
}

/**
 * Appends `events[start..]` through the drop-in's write handle. When berth refuses a
 * record (too large for one event, over a limit), the events are retried one by one to
 * find it: it and everything after it are reported, not stored (a harness log has no gaps).
 */
async function appendAll(handle: SessionHandle, id: string, events: readonly SessionEvent[], texts: readonly string[], start: number, report: Report): Promise<void> {
  try {
    await handle.append(events.slice(start))
    report.records += events.length - start
    report.bytes += bytesOf(texts.slice(start))
    return
  } catch (error) {
    if (!isRefusedRecord(error)) throw error
  }
  // The chunks before the refused one are stored: go on from where berth is.
  let at = (await handle.read(0)).length
  report.records += at - start
  report.bytes += bytesOf(texts.slice(start, at))
  for (; at < events.length; at++) {
    try {
      await handle.append([events[at] as SessionEvent])
    } catch (error) {
      if (!isRefusedRecord(error)) throw error
      report.skip(id, at === events.length - 1 ? `event ${at}` : `events ${at}..${events.length - 1}`,
        `berth cannot hold event ${at} (${describe(error)}); a harness log has no gaps, so the events after it are not imported either`)
      return
    }
    report.records++
    report.bytes += Buffer.byteLength(texts[at] as string)
  }
}

/**
 * A torn tail (the last write of a process that died mid-write): the harness reads the
 * log without it, and so does the import — the complete records of a torn Zstandard
 * frame are read back by the harness and imported; the incomplete rest is reported.
 */
async function reportTornTail(mounted: MountedRoot, meta: HarnessHeader, report: Report): Promise<void> {
  const stored = await mounted.backend.loadStored(meta.id)
  const marker = stored?.tornMarker as { truncateTo?: unknown; recoveredEvents?: unknown[] } | undefined
  if (marker === undefined || typeof marker.truncateTo !== 'number') return
  let size: number | undefined
  try {
    size = (await stat(mounted.backend.locate(meta).path)).size
  } catch {
    size = undefined
  }
  const torn = size === undefined ? 'the bytes' : `${size - marker.truncateTo} bytes`
  const recovered = marker.recoveredEvents?.length ?? 0
  report.skip(meta.id, 'torn tail',
    `${torn} after the last complete write (a write the harness never finished)` +
      (recovered > 0 ? `; the ${recovered} complete records the harness recovers from it are imported` : '') +
      ': the harness discards the incomplete rest, and so does the import')
}

// ---- export -------------------------------------------------------------------------

/** Every harness session berth holds into a JSONL root (see the module's doc). */
export async function exportJsonl(options: JsonlRunOptions): Promise<void> {
  const { harness, report, persistence } = options
  const mounted = await mountRoot(harness, options.root, options.compression, false)
  try {
    const snapshots = [...(await persistence.list())].map((snapshot) => snapshot.header).sort(byCreation)
    const inTarget = new Set<string>(mounted.headers.map((header) => header.id))
    report.total = snapshots.length
    try {
      await eachConcurrently(snapshots, SESSIONS_IN_FLIGHT, async (header) => {
        try {
          await exportSession(harness, mounted, persistence, header.id, inTarget.has(header.id), report)
        } catch (error) {
          if (failsTheRun(error)) throw error
          report.skip(header.id, 'session', `not exported: ${describe(error)}`)
        }
        report.sessions++
        report.tick()
      })
    } finally {
      report.orderBy(snapshots.map((header) => header.id))
    }
    report.tick(true)
  } finally {
    await mounted.dispose()
  }
}

async function exportSession(harness: Harness, mounted: MountedRoot, persistence: BerthHandlePersistence, id: string, inTarget: boolean, report: Report): Promise<void> {
  const held = await heldOnBerth(persistence, id)
  if (held === undefined) return // deleted since the listing
  const texts = held.texts
  if (texts.length === 0) {
    report.skip(id, 'session', 'it holds no events: the JSONL backend stores a session only from its first event on')
    return
  }
  const backend = mounted.backend
  const sessionId = id as HarnessSessionId
  const events = (): HarnessEvent[] => texts.map((text) => JSON.parse(text) as HarnessEvent)
  if (!inTarget) {
    if (!report.dryRun) {
      await backend.create(held.header as unknown as HarnessHeader)
      await backend.append(sessionId, events())
    }
    report.imported++
    report.records += texts.length
    report.bytes += bytesOf(texts)
    return
  }
  const target = await backend.readFrom(sessionId, 0)
  if (textOf(target.meta) !== textOf(held.header)) {
    report.change(id, 'header', 'the target already holds this session with another header: not exported')
    return
  }
  const there = target.events.map(textOf)
  const at = divergence(there, texts)
  if (at !== undefined) {
    report.change(id, `event ${at}`, 'the target already holds this session with other events from this one on: not exported')
    return
  }
  report.recordsUnchanged += Math.min(there.length, texts.length)
  if (there.length >= texts.length) {
    report.unchanged++
    return
  }
  // The target's log ends in an open turn: the harness closes it before any append (its
  // crash repair). berth's session must go on with those very closers (a harness resumed
  // it on berth), or the rest cannot follow it.
  const closers = harness.session.interruptedTurnClosers(target.events).map(textOf)
  if (closers.length > 0 && divergence(closers, texts.slice(there.length)) !== undefined) {
    report.change(id, `event ${there.length}`,
      'the target\'s log ends in an interrupted turn, which the harness would close before appending, and berth\'s session goes on otherwise: not exported')
    return
  }
  if (closers.length > 0 && texts.length - there.length < closers.length) {
    report.change(id, `event ${there.length}`, 'the target\'s log ends in an interrupted turn that berth\'s session closes only partly: not exported')
    return
  }
  if (!report.dryRun) {
    // `load` commits the harness's own repair (the closers, equal to berth's next events).
    if (closers.length > 0) await backend.load(sessionId)
    const rest = events().slice(there.length + closers.length)
    if (rest.length > 0) await backend.append(sessionId, rest)
  }
  report.imported++
  report.records += texts.length - there.length
  report.bytes += bytesOf(texts.slice(there.length))
}
