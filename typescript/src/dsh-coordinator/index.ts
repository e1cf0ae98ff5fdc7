/**
 * `BerthCoordinatorBackend`: berth as the storage of the *published* DeepSeek Harness
 * persistence seam, `@deepseek-ai/dsh-session-persistence@0.1.0-rc.8` (the coordinator
 * seam npm carries today; it needs Node ≥ 22). The rc.8 `PersistenceCoordinator` keeps
 * live sessions, write-behind batching, lazy materialization and crash-repair closers;
 * this class supplies its storage hooks (`loadStored`, `readStoredRevision`,
 * `appendBatch`, `commitRepair`, `list`, `listSnapshots`) over berth's HTTP API.
 *
 * Mount it where the JSONL backend was: `ctx.plugin(BerthCoordinatorBackend, { baseUrl, apiKey })`.
 *
 * On berth a harness session is one berth session (id encoded, label `dsh`): seq 0 is
 * `dsh/header` with the header's exact JSON text, harness seq `n` is berth seq `n + 1`,
 * ONE berth event: the harness's message, tool, turn and step events as berth's
 * conversation vocabulary with the event's exact JSON text under `dsh`, any other event a
 * `dsh/event` holding that text (`../dsh/vocabulary.ts`). The coordinator compares stored
 * events by their text, and reads give it back exactly. The header is not `ignorable`, so
 * berth's own repair refuses these sessions: the coordinator's crash-repair closers are the
 * only ones. Every append names its expected seq and an idempotency key (made of the
 * events' texts): berth enforces the coordinator's contiguity, and a retried batch is
 * stored once. A batch is durable when `appendBatch` resolves (berth syncs every append).
 */
import type { Context } from '@deepseek-ai/cordis'
import {
  DEFAULT_PREPARED_SESSION_CACHE_SIZE,
  DEFAULT_WRITE_BATCH_MAX_DELAY_MS,
  PersistenceCoordinator,
  SessionPersistence,
  SessionPersistenceCorruptionError,
  SessionPersistenceRevision,
  type PersistenceBackend,
  type SessionInspection,
  type SessionPersistenceSnapshot,
  type StoredPrefix,
} from '@deepseek-ai/dsh-session-persistence'
import type { SessionEvent, SessionHeader, SessionId, SessionPreparation } from '@deepseek-ai/dsh-session'
import { BerthClient, type EventRecord, type NewEvent, type SessionRecord } from '../client.js'
import { AlreadyExistsError, NotFoundError } from '../errors.js'
import { berthSessionId } from '../dsh/ids.js'
import { readEventRange } from '../dsh/read-range.js'
import { DSH_ACTIVITY_TTL_MS, chunkKey } from '../dsh/persistence.js'
import { DSH_EVENT_TYPE, DSH_HEADER_TYPE, berthEvent, bodyBytesEstimate, harnessEvent } from '../dsh/vocabulary.js'

export interface Config {
  readonly baseUrl: string
  readonly apiKey: string
  /** Prefix of the berth ids (default `dsh.`): several harnesses can share a tenant. */
  readonly namespace?: string
  /** The berth label of these sessions (default `dsh`). */
  readonly label?: string
  readonly preparedSessionCacheSize?: number
  readonly writeBatchMaxDelayMs?: number
}

const BERTH_BATCH_EVENTS_MAX = 1000
const BERTH_BATCH_BYTES_MAX = 7 << 20
const LIST_CONCURRENCY = 8

export class BerthCoordinatorBackend extends SessionPersistence implements PersistenceBackend<never> {
  static inject = ['sessions']
  override readonly name = 'session-persistence-berth'
  readonly supportsRawArtifacts = false
  readonly client: BerthClient
  readonly namespace: string
  readonly label: string
  private readonly coordinator: PersistenceCoordinator<never>

  constructor(ctx: Context, config: Config) {
    assertNodeForRc8()
    super(ctx)
    this.client = new BerthClient({ baseUrl: config.baseUrl, apiKey: config.apiKey })
    this.namespace = config.namespace ?? 'dsh.'
    this.label = config.label ?? 'dsh'
    this.coordinator = new PersistenceCoordinator<never>(this.ctx, this, {
      preparedSessionCacheSize: config.preparedSessionCacheSize ?? DEFAULT_PREPARED_SESSION_CACHE_SIZE,
      writeBatchMaxDelayMs: config.writeBatchMaxDelayMs ?? DEFAULT_WRITE_BATCH_MAX_DELAY_MS,
    })
  }

  /** berth keeps no per-session artifact on the caller's disk. */
  locate(): undefined {
    return undefined
  }

  create(meta: SessionHeader): Promise<void> {
    return this.coordinator.create(meta)
  }

  append(id: SessionId, events: readonly SessionEvent[]): Promise<void> {
    return this.coordinator.append(id, events)
  }

  override prepare(id: SessionId, signal?: AbortSignal): Promise<SessionPreparation> {
    return this.coordinator.prepare(id, signal)
  }

  load(id: SessionId): Promise<SessionInspection> {
    return this.coordinator.load(id)
  }

  inspect(id: SessionId, signal?: AbortSignal): Promise<SessionInspection> {
    return this.coordinator.inspect(id, signal)
  }

  readFrom(id: SessionId, fromSeq: number, signal?: AbortSignal): Promise<{ meta: SessionHeader; events: SessionEvent[] }> {
    return this.coordinator.readFrom(id, fromSeq, signal)
  }

  // ---- the storage hooks ----

  async loadStored(id: SessionId, signal?: AbortSignal): Promise<StoredPrefix<never> | undefined> {
    const berthId = this.berthId(id)
    const record = await this.recordOrUndefined(berthId, signal)
    if (record === undefined) return undefined
    let records: EventRecord[]
    try {
      records = await readEventRange(this.client, berthId, 0, undefined, signal)
    } catch (error) {
      if (error instanceof NotFoundError) return undefined
      throw error
    }
    const first = records[0]
    // An empty record is a materialization that never stored its first batch: absent.
    if (first === undefined) return undefined
    const meta = decodeHeader(berthId, first)
    const events = records.slice(1).map((event) => decodeEvent(berthId, event))
    return { meta, events, revision: revisionOf(record, records.length) }
  }

  async readStoredRevision(id: SessionId, signal?: AbortSignal): Promise<SessionPersistenceRevision | undefined> {
    const berthId = this.berthId(id)
    const record = await this.recordOrUndefined(berthId, signal)
    if (record === undefined) return undefined
    const nextSeq = await this.nextSeqOrUndefined(berthId, signal)
    return nextSeq === undefined || nextSeq === 0 ? undefined : revisionOf(record, nextSeq)
  }

  /**
   * The first batch creates the berth session and stores the header with the events in
   * one append (atomic on berth: an empty record left by a crash between the two reads as
   * absent and is reused). Later batches continue at `events[0].seq + 1`.
   */
  async appendBatch(meta: SessionHeader, events: readonly SessionEvent[], isMaterialized: boolean): Promise<void> {
    const berthId = this.berthId(meta.id)
    const stored = events.map((event) => storedEvent(event))
    if (!isMaterialized) {
      // Stored as the JSONL backend stores it: `delegationDepth` is explicit on disk (0 = top level).
      // Not `ignorable`: berth's own repair refuses the session rather than repair it too.
      const headText = JSON.stringify({ ...meta, delegationDepth: meta.delegationDepth ?? 0 })
      const head: NewEvent = { type: DSH_HEADER_TYPE, data: headText }
      const firstChunk = stored.splice(0, BERTH_BATCH_EVENTS_MAX - 1)
      const first = [head, ...firstChunk.map((item) => item.body)]
      const key = chunkKey(berthId, 0, [headText, ...firstChunk.map((item) => item.text)])
      try {
        await this.client.createSession({
          id: berthId,
          labels: [this.label],
          policy: { activity_ttl_ms: DSH_ACTIVITY_TTL_MS, run_lease_ttl_ms: 60_000, concurrency: { mode: 'serial' } },
        })
      } catch (error) {
        // An empty leftover is reused; a stored first batch under this very key is an
        // earlier attempt of this one (its answer lost): the append below answers `duplicate`.
        if (!(error instanceof AlreadyExistsError)) throw error
        if ((await this.client.nextSeq(berthId)) !== 0) {
          const stored = (await this.client.readEvents(berthId, { from: 0, limit: 1 })).events[0]
          if (stored?.idempotency_key !== key) throw error
        }
      }
      await this.client.appendEvents(berthId, { events: first, expected_seq: 0 }, { idempotencyKey: key })
      if (stored.length > 0) await this.appendChunks(berthId, stored, 1 + firstChunk.length)
      return
    }
    const first = events[0]
    if (first === undefined) return
    await this.appendChunks(berthId, stored, first.seq + 1)
  }

  /** berth never serves a torn tail, so there is never one to truncate: the closers are appended. */
  async commitRepair(meta: SessionHeader, _tornMarker: never | undefined, closers: readonly SessionEvent[]): Promise<void> {
    const first = closers[0]
    if (first === undefined) return
    await this.appendChunks(this.berthId(meta.id), closers.map((event) => storedEvent(event)), first.seq + 1)
  }

  async list(signal?: AbortSignal): Promise<SessionHeader[]> {
    return (await this.listSnapshots(signal)).map((snapshot) => snapshot.header)
  }

  async listSnapshots(signal?: AbortSignal): Promise<SessionPersistenceSnapshot[]> {
    const records: SessionRecord[] = []
    for await (const record of this.client.listAllSessions({ label: this.label, include_blank: true, limit: 200 }, signalOption(signal))) {
      if (record.header.id.startsWith(this.namespace)) records.push(record)
    }
    const snapshots: SessionPersistenceSnapshot[] = []
    for (let start = 0; start < records.length; start += LIST_CONCURRENCY) {
      const results = await Promise.all(records.slice(start, start + LIST_CONCURRENCY).map(async (record) => {
        const page = await this.client.readEvents(record.header.id, { from: 0, limit: 1 }, signalOption(signal)).catch((error: unknown) => {
          if (error instanceof NotFoundError) return undefined
          throw error
        })
        const first = page?.events[0]
        if (page === undefined || first === undefined) return undefined
        const nextSeq = await this.nextSeqOrUndefined(record.header.id, signal)
        if (nextSeq === undefined) return undefined
        return { header: decodeHeader(record.header.id, first), revision: revisionOf(record, nextSeq) }
      }))
      for (const snapshot of results) if (snapshot !== undefined) snapshots.push(snapshot)
    }
    return snapshots
  }

  // ---- helpers ----

  berthId(id: SessionId): string {
    return berthSessionId(this.namespace, id)
  }

  private async appendChunks(berthId: string, stored: readonly StoredEvent[], firstSeq: number): Promise<void> {
    let seq = firstSeq
    let start = 0
    while (start < stored.length) {
      let end = start
      let bytes = 0
      while (end < stored.length && end - start < BERTH_BATCH_EVENTS_MAX) {
        const item = stored[end] as StoredEvent
        const size = bodyBytesEstimate(item.body, item.text)
        if (end > start && bytes + size > BERTH_BATCH_BYTES_MAX) break
        bytes += size
        end++
      }
      const chunk = stored.slice(start, end)
      await this.client.appendEvents(berthId, { events: chunk.map((item) => item.body), expected_seq: seq }, { idempotencyKey: chunkKey(berthId, seq, chunk.map((item) => item.text)) })
      seq += end - start
      start = end
    }
  }

  private async recordOrUndefined(berthId: string, signal?: AbortSignal): Promise<SessionRecord | undefined> {
    try {
      return await this.client.getSession(berthId, signalOption(signal))
    } catch (error) {
      if (error instanceof NotFoundError) return undefined
      throw error
    }
  }

  private async nextSeqOrUndefined(berthId: string, signal?: AbortSignal): Promise<number | undefined> {
    try {
      return await this.client.nextSeq(berthId, signalOption(signal))
    } catch (error) {
      if (error instanceof NotFoundError) return undefined
      throw error
    }
  }
}

export default BerthCoordinatorBackend

/** The oldest Node the rc.8 packages run on (they use `Promise.withResolvers` and `node:zlib` zstd). */
export const COORDINATOR_NODE_MAJOR_MIN = 22

/**
 * This entry's `engines` is `node >= 22` while the package's is `>= 20` (one package.json
 * cannot say both): refuse plainly instead of failing deep inside rc.8.
 */
function assertNodeForRc8(): void {
  const major = Number(process.versions.node.split('.')[0])
  if (major < COORDINATOR_NODE_MAJOR_MIN) {
    throw new Error(`BerthCoordinatorBackend needs Node >= ${COORDINATOR_NODE_MAJOR_MIN} (the @deepseek-ai rc.8 packages do); this is Node ${process.versions.node}`)
  }
}

function signalOption(signal: AbortSignal | undefined): { signal?: AbortSignal } {
  return signal === undefined ? {} : { signal }
}

/** A harness event with its exact text and the berth event that stores it. */
interface StoredEvent {
  readonly text: string
  readonly body: NewEvent
}

function storedEvent(event: SessionEvent): StoredEvent {
  const text = JSON.stringify(event)
  const time = Number.isSafeInteger(event.time) && event.time >= 0 ? event.time : undefined
  return { text, body: berthEvent(event, text, time) }
}

function revisionOf(record: SessionRecord, nextSeq: number): SessionPersistenceRevision {
  return SessionPersistenceRevision(`berth:${record.header.created_at}:${nextSeq}`)
}

/** Each call parses afresh: the coordinator freezes and publishes what it is given. */
function parseText<T>(berthId: string, record: EventRecord, text: string): T {
  try {
    return JSON.parse(text) as T
  } catch (cause) {
    throw new SessionPersistenceCorruptionError(`berth session "${berthId}": event ${record.seq} does not hold JSON`, { cause })
  }
}

function decodeHeader(berthId: string, record: EventRecord): SessionHeader {
  if (record.type !== DSH_HEADER_TYPE || typeof record.data !== 'string') {
    throw new SessionPersistenceCorruptionError(`berth session "${berthId}": event ${record.seq} is a ${record.type}, not a ${DSH_HEADER_TYPE} with its text`, { cause: undefined })
  }
  return parseText<SessionHeader>(berthId, record, record.data)
}

/** The harness event a berth event stores, from any form (`dsh/event`, a vocabulary event with its text under `dsh`, a boundary rebuilt from its fields). */
function decodeEvent(berthId: string, record: EventRecord): SessionEvent {
  let event: SessionEvent | undefined
  try {
    event = harnessEvent(record) as SessionEvent | undefined
  } catch (cause) {
    throw new SessionPersistenceCorruptionError(`berth session "${berthId}": event ${record.seq} does not hold JSON`, { cause })
  }
  if (event === undefined) {
    throw new SessionPersistenceCorruptionError(`berth session "${berthId}": event ${record.seq} (${record.type}) holds no harness event text: it was not written through this backend`, { cause: undefined })
  }
  if (record.type !== DSH_EVENT_TYPE && (event as { type?: unknown }).type !== record.type) {
    throw new SessionPersistenceCorruptionError(`berth session "${berthId}": event ${record.seq} is a ${record.type} holding a harness ${String((event as { type?: unknown }).type)}`, { cause: undefined })
  }
  return event
}
