/**
 * `BerthHandlePersistence`: the handle seam of DeepSeek Harness session persistence
 * (seed 004) on berth, with the cross-process ownership the seed could only plan.
 *
 * How a harness session lives on berth:
 * - one berth session per harness session (id encoded by `ids.ts`, label `dsh`), created
 *   with a serial concurrency policy, a long activity TTL (harness sessions never expire)
 *   and the configured run lease;
 * - berth seq 0 is `dsh/header` carrying the header's exact JSON text; harness seq `n` is
 *   berth seq `n + 1`, ONE berth event: the harness's message, tool, turn and step events
 *   as berth's conversation vocabulary with the event's exact JSON text under `dsh` (a
 *   turn or step boundary is exactly its fields), any other event a `dsh/event` holding
 *   that text, `ignorable` (`vocabulary.ts`). Reads take
 *   the text back, so the harness gets exactly what it wrote. The header is not
 *   `ignorable`: berth's own repair (`POST …/resume`), which tracks turns per berth run,
 *   refuses these sessions instead of adding closers of its own — the harness repairs its
 *   turns itself (`interruptedTurnClosers`), through the write handle;
 * - a write handle is a berth run attached with `on_busy: reject` and kept alive by
 *   heartbeats, so a second writer in any process gets `SessionAlreadyOwnedError`; every
 *   append names the run and its expected seq, so a displaced writer's append fails
 *   (`SessionOwnershipLostError`) and can never interleave;
 * - every append carries an idempotency key derived from the session, the seq and the
 *   events' exact texts, so any retry of a batch (the client's, the write-behind's, the
 *   caller's after an unknown outcome) is stored exactly once.
 */
import { createHash, randomUUID } from 'node:crypto'
import { BerthClient, type AppendOutcome, type EventRecord, type NewEvent, type SessionRecord } from '../client.js'
import {
  AlreadyExistsError,
  BerthConnectionError,
  BerthError,
  BusyError,
  IdempotencyKeyReusedError,
  NotFoundError,
  RunNotAttachedError,
  SeqConflictError,
} from '../errors.js'
import {
  SessionAlreadyExistsError,
  SessionAlreadyOwnedError,
  SessionHandleClosedError,
  SessionOwnershipLostError,
  SessionPersistenceCorruptionError,
  SessionPersistenceNotFoundError,
  SessionReadOnlyError,
} from './errors.js'
import { assertNamespace, berthSessionId } from './ids.js'
import { readEventRange } from './read-range.js'
import { DSH_EVENT_TYPE, DSH_HEADER_TYPE, berthEvent, bodyBytesEstimate, harnessEvent } from './vocabulary.js'
import {
  CORE_SESSION_EVENT_TYPES,
  SESSION_FORMAT_VERSION,
  admitAppendBatch,
  type AdmittedBatch,
  assertContiguousSeqs,
  assertKnownEvent,
  assertReadArgument,
  assertStoredId,
  assertVersion,
  deepFreeze,
  materializeCreateHeader,
} from './storage-contract.js'
import {
  SessionPersistenceRevision,
  type SessionAccess,
  type SessionEvent,
  type SessionHandle,
  type SessionHeader,
  type SessionId,
  type SessionLocation,
  type SessionPersistence,
  type SessionPersistenceSnapshot,
  type SignalOptions,
} from './types.js'

/** The longest a published event waits before its batch starts writing (bounded coalescing, not debounce). */
export const LIVE_WRITE_BATCH_MAX_DELAY_MS = 200
/** Buffered bytes (of event text) at which a drain starts at once instead of waiting out the window. */
export const LIVE_WRITE_BATCH_MAX_BYTES = 1 << 20
/** berth's per-batch bounds (1,000 events, 8 MiB), kept under with room for the envelope. */
const BERTH_BATCH_EVENTS_MAX = 1000
const BERTH_BATCH_BYTES_MAX = 7 << 20
/** Ten years: harness sessions never expire on their own (berth's default is 24 h). */
export const DSH_ACTIVITY_TTL_MS = 10 * 365 * 24 * 3600 * 1000
export { DSH_EVENT_TYPE, DSH_HEADER_TYPE } from './vocabulary.js'
const TITLE_BYTES_MAX = 512
const LIST_CONCURRENCY = 8

export interface BerthHandlePersistenceOptions {
  /** A client, or what to make one from. */
  readonly client: BerthClient | { readonly baseUrl: string; readonly apiKey: string }
  /** Prefix of the berth ids of this persistence's sessions (default `dsh.`). */
  readonly namespace?: string
  /** The berth label that marks them (default `dsh`). */
  readonly label?: string
  /**
   * The run lease of sessions this instance creates (ms, default 30,000): how long a
   * dead process keeps a session owned. Sessions created elsewhere keep their own.
   */
  readonly runLeaseTtlMs?: number
  /** How often a write handle renews its run (ms; default a third of the run's lease). */
  readonly heartbeatIntervalMs?: number
  /** Event types the fail-closed vocabulary rule accepts (default `CORE_SESSION_EVENT_TYPES`). */
  readonly knownEventTypes?: ReadonlySet<string>
  /** The format version headers must carry (default 0). */
  readonly formatVersion?: number
  /** Where background failures are reported (default `console.warn`). */
  readonly warn?: (message: string, error: unknown) => void
}

interface PendingSession {
  readonly header: SessionHeader
  readonly headerText: string
  readonly revision: SessionPersistenceRevision
}

/** One persisted chunk of a batch: at most one berth append. */
interface PersistChunk {
  /** The events' exact texts: what the log keeps and the idempotency key is made of. */
  readonly texts: readonly string[]
  /** The berth events that store them (`vocabulary.ts`). */
  readonly bodies: readonly NewEvent[]
}

/** An admitted event: its exact text and the berth event made of it at admission. */
interface Admitted {
  readonly text: string
  readonly body: NewEvent
}

export class BerthHandlePersistence implements SessionPersistence {
  readonly client: BerthClient
  readonly namespace: string
  readonly label: string
  readonly runLeaseTtlMs: number
  readonly heartbeatIntervalMs: number | undefined
  readonly knownEventTypes: ReadonlySet<string>
  readonly formatVersion: number
  readonly warn: (message: string, error: unknown) => void
  /** Write ownership in this instance: `null` is a claim still being established. */
  private readonly writers = new Map<SessionId, BerthWriteHandle | null>()
  /** Created here, not yet materialized on berth: visible to this instance only. */
  private readonly pending = new Map<SessionId, PendingSession>()
  private pendingRevisionCounter = 0

  constructor(options: BerthHandlePersistenceOptions) {
    this.client = options.client instanceof BerthClient ? options.client : new BerthClient(options.client)
    this.namespace = options.namespace ?? 'dsh.'
    assertNamespace(this.namespace)
    this.label = options.label ?? 'dsh'
    this.runLeaseTtlMs = options.runLeaseTtlMs ?? 30_000
    this.heartbeatIntervalMs = options.heartbeatIntervalMs
    this.knownEventTypes = options.knownEventTypes ?? CORE_SESSION_EVENT_TYPES
    this.formatVersion = options.formatVersion ?? SESSION_FORMAT_VERSION
    this.warn = options.warn ?? ((message, error) => console.warn(message, error))
  }

  berthId(id: SessionId): string {
    return berthSessionId(this.namespace, id)
  }

  location(id: SessionId): SessionLocation {
    return { kind: 'berth', path: `${this.client.baseUrl}/v1/sessions/${this.berthId(id)}` }
  }

  /**
   * Registers a new session. Nothing reaches berth until the handle's first append or
   * flush (deferred materialization); until then only this instance sees it, and a close
   * without either erases it.
   */
  async create(header: SessionHeader, options?: SignalOptions): Promise<SessionHandle> {
    options?.signal?.throwIfAborted()
    const snapshot = materializeCreateHeader(header)
    assertVersion(snapshot.header, this.formatVersion)
    const id = snapshot.header.id
    if (this.pending.has(id) || this.writers.has(id)) throw new SessionAlreadyExistsError(id)
    // Reserve the id before the first await, so a concurrent create of it loses here.
    this.writers.set(id, null)
    try {
      // An empty record (a materialization that crashed before its first append) is no session.
      const record = await this.storedRecord(id)
      if (record !== undefined && (await this.nextSeqOrUndefined(record.header.id) ?? 0) > 0) throw new SessionAlreadyExistsError(id)
    } catch (error) {
      this.writers.delete(id)
      throw error
    }
    this.pendingRevisionCounter++
    const pending = { header: snapshot.header, headerText: snapshot.text, revision: SessionPersistenceRevision(`memory:berth:${this.pendingRevisionCounter}`) }
    this.pending.set(id, pending)
    const handle = new BerthWriteHandle(this, id, snapshot.header, snapshot.text, { kind: 'created' })
    this.writers.set(id, handle)
    return handle
  }

  async open(id: SessionId, access: SessionAccess, options?: SignalOptions): Promise<SessionHandle> {
    options?.signal?.throwIfAborted()
    if (access === 'read') return this.openRead(id)
    if (access !== 'write') throw new TypeError(`access must be 'read' or 'write', got ${String(access)}`)
    if (this.writers.has(id)) throw new SessionAlreadyOwnedError(id)
    this.writers.set(id, null)
    try {
      const handle = await BerthWriteHandle.openExisting(this, id)
      this.writers.set(id, handle)
      return handle
    } catch (error) {
      this.writers.delete(id)
      throw error
    }
  }

  private async openRead(id: SessionId): Promise<SessionHandle> {
    const pending = this.pending.get(id)
    if (pending !== undefined) return new BerthReadHandle(this, id, pending.header, true)
    const stored = await this.storedRecord(id)
    if (stored === undefined) throw new SessionPersistenceNotFoundError(id)
    const header = await this.readStoredHeader(id)
    if (header === undefined) throw new SessionPersistenceNotFoundError(id)
    return new BerthReadHandle(this, id, header, false)
  }

  /** Drains and flushes every active write handle; failures are reported together, the rest still flushed. */
  async flush(): Promise<void> {
    const handles = [...this.writers.values()].filter((handle): handle is BerthWriteHandle => handle !== null)
    const results = await Promise.allSettled(handles.map((handle) => handle.flush()))
    const failures: unknown[] = []
    const names: string[] = []
    results.forEach((result, index) => {
      // A handle closed meanwhile counts as flushed: its close drained it.
      if (result.status === 'rejected' && !(result.reason instanceof SessionHandleClosedError)) {
        failures.push(result.reason)
        names.push(`"${handles[index]?.id ?? '?'}"`)
      }
    })
    if (failures.length > 0) {
      throw new AggregateError(failures, `session-persistence: flush failed for ${names.join(', ')}`)
    }
  }

  /**
   * Teardown: closes every open write handle (each drains, then releases its run) and
   * reports the failures together after trying them all.
   */
  async close(): Promise<void> {
    const handles = [...this.writers.values()].filter((handle): handle is BerthWriteHandle => handle !== null)
    const results = await Promise.allSettled(handles.map((handle) => handle.close()))
    const failures = results.flatMap((result) => (result.status === 'rejected' ? [result.reason] : []))
    if (failures.length > 0) throw new AggregateError(failures, `session-persistence: closing ${failures.length} write handle(s) failed`)
  }

  async stat(id: SessionId, options?: SignalOptions): Promise<SessionPersistenceSnapshot | undefined> {
    options?.signal?.throwIfAborted()
    const pending = this.pending.get(id)
    if (pending !== undefined) return { header: pending.header, revision: pending.revision }
    const record = await this.storedRecord(id)
    if (record === undefined) return undefined
    return this.snapshotOf(id, record)
  }

  async list(options?: SignalOptions): Promise<readonly SessionPersistenceSnapshot[]> {
    options?.signal?.throwIfAborted()
    // Pending entries first: a first append landing mid-listing then shows up at least once.
    const pendingBefore = [...this.pending.values()]
    const records: SessionRecord[] = []
    for await (const record of this.client.listAllSessions({ label: this.label, include_blank: true, limit: 200 })) {
      if (record.header.id.startsWith(this.namespace)) records.push(record)
    }
    const snapshots: SessionPersistenceSnapshot[] = []
    const seen = new Set<SessionId>()
    for (let start = 0; start < records.length; start += LIST_CONCURRENCY) {
      const batch = records.slice(start, start + LIST_CONCURRENCY)
      const results = await Promise.all(batch.map((record) => this.snapshotOfRecord(record)))
      for (const snapshot of results) {
        if (snapshot !== undefined && !seen.has(snapshot.header.id)) {
          seen.add(snapshot.header.id)
          snapshots.push(snapshot)
        }
      }
    }
    for (const pending of pendingBefore) {
      if (!seen.has(pending.header.id)) snapshots.push({ header: pending.header, revision: pending.revision })
    }
    return snapshots
  }

  // ---- internals shared with the handles ----

  /** The berth record, or `undefined` when absent (a 404). */
  async storedRecord(id: SessionId): Promise<SessionRecord | undefined> {
    try {
      return await this.client.getSession(this.berthId(id))
    } catch (error) {
      if (error instanceof NotFoundError) return undefined
      throw error
    }
  }

  /** A snapshot of a stored session, or `undefined` when it holds no header (an empty leftover). */
  private async snapshotOf(id: SessionId, record: SessionRecord): Promise<SessionPersistenceSnapshot | undefined> {
    const nextSeq = await this.nextSeqOrUndefined(record.header.id)
    if (nextSeq === undefined || nextSeq === 0) return undefined
    const header = this.headerFromTitle(record) ?? (await this.readStoredHeader(id))
    if (header === undefined) return undefined
    return { header, revision: revisionOf(record, nextSeq), eventCount: nextSeq - 1 }
  }

  private async snapshotOfRecord(record: SessionRecord): Promise<SessionPersistenceSnapshot | undefined> {
    const nextSeq = await this.nextSeqOrUndefined(record.header.id)
    if (nextSeq === undefined || nextSeq === 0) return undefined
    const header = this.headerFromTitle(record) ?? (await this.readHeaderAt(record.header.id))
    if (header === undefined || this.berthId(header.id) !== record.header.id) return undefined
    return { header, revision: revisionOf(record, nextSeq), eventCount: nextSeq - 1 }
  }

  private async nextSeqOrUndefined(berthId: string): Promise<number | undefined> {
    try {
      return await this.client.nextSeq(berthId)
    } catch (error) {
      if (error instanceof NotFoundError) return undefined
      throw error
    }
  }

  /**
   * The header cached in the title (written at materialization when it fits in 512
   * bytes). The title is mutable metadata, so it is used only when it still names this
   * very session; otherwise the caller reads the header event.
   */
  private headerFromTitle(record: SessionRecord): SessionHeader | undefined {
    if (typeof record.title !== 'string' || !record.title.startsWith('{')) return undefined
    try {
      const header = JSON.parse(record.title) as SessionHeader
      if (typeof header !== 'object' || header === null || typeof header.id !== 'string' || this.berthId(header.id) !== record.header.id) return undefined
      return deepFreeze(header)
    } catch {
      return undefined
    }
  }

  async readStoredHeader(id: SessionId): Promise<SessionHeader | undefined> {
    const header = await this.readHeaderAt(this.berthId(id))
    return header === undefined ? undefined : this.validatedHeader(id, header)
  }

  validatedHeader(id: SessionId, header: SessionHeader): SessionHeader {
    assertStoredId(id, header)
    assertVersion(header, this.formatVersion, this.location(id))
    return header
  }

  private async readHeaderAt(berthId: string): Promise<SessionHeader | undefined> {
    let page
    try {
      page = await this.client.readEvents(berthId, { from: 0, limit: 1 })
    } catch (error) {
      if (error instanceof NotFoundError) return undefined
      throw error
    }
    const first = page.events[0]
    if (first === undefined) return undefined
    return decodeHeader(berthId, first)
  }

  /**
   * Reads harness events `[offset, offset + length)` (all to the end when `length` is
   * undefined), validated: contiguous, decoded from their exact text, and refused
   * fail-closed when of an unknown type.
   */
  async readEvents(id: SessionId, offset: number, length: number | undefined): Promise<SessionEvent[]> {
    const before = length === undefined ? undefined : offset + 1 + length
    let records: EventRecord[]
    try {
      records = await this.readBerthRange(this.berthId(id), offset + 1, before)
    } catch (error) {
      if (error instanceof NotFoundError) throw new SessionPersistenceNotFoundError(id)
      throw error
    }
    return records.map((record) => this.decodeEvent(id, record))
  }

  /** berth events `[from, before)` (to the end when `before` is undefined). */
  readBerthRange(berthId: string, from: number, before: number | undefined): Promise<EventRecord[]> {
    return readEventRange(this.client, berthId, from, before)
  }

  /** The harness event a berth event stores (any form, `vocabulary.ts`), validated. */
  decodeEvent(id: SessionId, record: EventRecord): SessionEvent {
    let event: SessionEvent | undefined
    try {
      event = harnessEvent(record) as SessionEvent | undefined
    } catch (cause) {
      throw new SessionPersistenceCorruptionError(`session "${id}": berth event ${record.seq} does not hold JSON`, { cause })
    }
    if (event === undefined) {
      throw new SessionPersistenceCorruptionError(`session "${id}": berth event ${record.seq} (${record.type}) holds no harness event text: it was not written through this persistence`)
    }
    if (typeof event !== 'object' || event === null || typeof event.type !== 'string' || event.seq !== record.seq - 1 || (record.type !== DSH_EVENT_TYPE && record.type !== event.type)) {
      throw new SessionPersistenceCorruptionError(`session "${id}": berth event ${record.seq} does not hold harness event ${record.seq - 1}`)
    }
    assertKnownEvent(id, event, this.knownEventTypes, this.location(id))
    return deepFreeze(event)
  }

  isPending(id: SessionId): boolean {
    return this.pending.has(id)
  }

  pendingEntry(id: SessionId): PendingSession | undefined {
    return this.pending.get(id)
  }

  /** The created session reached berth: other processes see it from now on. */
  materialized(id: SessionId): void {
    this.pending.delete(id)
  }

  /** A write handle closed: ownership released, and a never-materialized session erased. */
  released(id: SessionId, handle: BerthWriteHandle): void {
    if (this.writers.get(id) === handle) this.writers.delete(id)
    if (handle.neverMaterialized) this.pending.delete(id)
  }

  createBody(header: SessionHeader, headerText: string): Parameters<BerthClient['createSession']>[0] {
    return {
      id: this.berthId(header.id),
      labels: [this.label],
      ...(Buffer.byteLength(headerText) <= TITLE_BYTES_MAX ? { title: headerText } : {}),
      policy: {
        activity_ttl_ms: DSH_ACTIVITY_TTL_MS,
        run_lease_ttl_ms: this.runLeaseTtlMs,
        concurrency: { mode: 'serial' },
      },
    }
  }
}

function revisionOf(record: SessionRecord, nextSeq: number): SessionPersistenceRevision {
  // The record's created_at tells a re-created id apart; the exact next seq changes with
  // every append and with nothing else (runs attaching and detaching leave it alone).
  return SessionPersistenceRevision(`berth:${record.header.created_at}:${nextSeq}`)
}

function decodeHeader(berthId: string, record: EventRecord): SessionHeader {
  if (record.type !== DSH_HEADER_TYPE || typeof record.data !== 'string') {
    throw new SessionPersistenceCorruptionError(`berth session "${berthId}" does not start with a ${DSH_HEADER_TYPE} event`)
  }
  try {
    return deepFreeze(JSON.parse(record.data) as SessionHeader)
  } catch (cause) {
    throw new SessionPersistenceCorruptionError(`berth session "${berthId}": its ${DSH_HEADER_TYPE} does not hold JSON`, { cause })
  }
}

/** What a handle's reads have seen, so that no later read observes an older state. */
class MonotonicReads {
  private observedLength = 0

  check(id: SessionId, offset: number, length: number | undefined, events: readonly SessionEvent[]): void {
    const end = offset + events.length
    const expectedEnd = length === undefined ? this.observedLength : Math.min(this.observedLength, offset + length)
    if (offset < this.observedLength && end < expectedEnd) {
      throw new SessionPersistenceCorruptionError(`session "${id}": the stored log shrank below the ${this.observedLength} events this handle already read`)
    }
    if (events.length > 0) this.observedLength = Math.max(this.observedLength, end)
  }
}

class BerthReadHandle implements SessionHandle {
  readonly access = 'read' as const
  private closed = false
  private readonly reads = new MonotonicReads()

  constructor(
    private readonly persistence: BerthHandlePersistence,
    readonly id: SessionId,
    readonly header: SessionHeader,
    /** Opened while the session was created here and not yet stored. */
    private readonly openedPending: boolean,
  ) {}

  async read(offset = 0, length?: number, options?: SignalOptions): Promise<readonly SessionEvent[]> {
    options?.signal?.throwIfAborted()
    if (this.closed) throw new SessionHandleClosedError(this.id, 'read')
    assertReadArgument('offset', offset)
    if (length !== undefined) assertReadArgument('length', length)
    // Created in this instance and not materialized yet: empty, by definition.
    if (this.persistence.isPending(this.id)) return []
    let events: SessionEvent[]
    try {
      events = await this.persistence.readEvents(this.id, offset, length)
    } catch (error) {
      // Opened on a created session that was then erased (closed unappended): it never existed.
      if (error instanceof SessionPersistenceNotFoundError && this.openedPending) return []
      throw error
    }
    this.reads.check(this.id, offset, length, events)
    return Object.freeze(events)
  }

  async append(): Promise<void> {
    if (this.closed) throw new SessionHandleClosedError(this.id, 'append')
    throw new SessionReadOnlyError(this.id, 'append')
  }

  publish(): void {
    if (this.closed) throw new SessionHandleClosedError(this.id, 'publish')
    throw new SessionReadOnlyError(this.id, 'publish')
  }

  async flush(): Promise<void> {
    if (this.closed) throw new SessionHandleClosedError(this.id, 'flush')
    throw new SessionReadOnlyError(this.id, 'flush')
  }

  async close(): Promise<void> {
    this.closed = true
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close()
  }
}

type WriteHandleOrigin =
  | { readonly kind: 'created' }
  | { readonly kind: 'opened'; readonly runId: string; readonly leaseMs: number; readonly log: SessionEvent[] }

/**
 * The write handle: the only writer of its session. It keeps the log it opened plus
 * everything it appended (nobody else can append while it owns the run), so reads through
 * it cost no round trip; published events wait in the write-behind buffer until drained.
 */
export class BerthWriteHandle implements SessionHandle {
  readonly access = 'write' as const
  private readonly persistence: BerthHandlePersistence
  private readonly berthId: string
  private readonly headerText: string
  /** The harness's next seq as stored on berth (harness seq n is berth seq n + 1). */
  private cursor: number
  /** The next seq a new append or publish must carry (the cursor plus buffered events). */
  private admittedNext: number
  /** The log: events as read at open, then the texts of everything appended (parsed when read). */
  private readonly log: (SessionEvent | string)[]
  private materialized: boolean
  private runId: string | undefined
  private heartbeatTimer: NodeJS.Timeout | undefined
  private ownershipLost: unknown = undefined
  private closed = false
  private closing: Promise<void> | undefined
  /** Serializes every write of this handle. */
  private chain: Promise<void> = Promise.resolve()
  // The write-behind window.
  private buffered: Admitted[] = []
  private bufferedBytes = 0
  /** A batch whose drain failed: retried first, in the same chunks (so with the same idempotency keys). */
  private retained: PersistChunk[] = []
  private timer: NodeJS.Timeout | undefined
  private drainPaused = false
  private draining: Promise<void> | undefined
  /** The idempotency key of the materializing append, the same for every attempt. */
  private readonly materializeKey = `dsh-materialize-${randomUUID()}`

  constructor(persistence: BerthHandlePersistence, readonly id: SessionId, readonly header: SessionHeader, headerText: string, origin: WriteHandleOrigin) {
    this.persistence = persistence
    this.berthId = persistence.berthId(id)
    this.headerText = headerText
    if (origin.kind === 'created') {
      this.log = []
      this.materialized = false
    } else {
      this.log = origin.log
      this.materialized = true
      this.runId = origin.runId
      this.startHeartbeat(origin.leaseMs)
    }
    this.cursor = this.log.length
    this.admittedNext = this.cursor
  }

  /** Whether close found this session never stored (so the instance erases it). */
  get neverMaterialized(): boolean {
    return !this.materialized
  }

  /** The berth run this handle's ownership rests on (once materialized). */
  get run(): string | undefined {
    return this.runId
  }

  static async openExisting(persistence: BerthHandlePersistence, id: SessionId): Promise<BerthWriteHandle> {
    const berthId = persistence.berthId(id)
    const runId = `dsh-${randomUUID()}`
    let attachment
    try {
      attachment = await persistence.client.attachRun(berthId, { run_id: runId, on_busy: 'reject' })
    } catch (error) {
      if (error instanceof BusyError) throw new SessionAlreadyOwnedError(id, { cause: error })
      if (error instanceof NotFoundError) throw new SessionPersistenceNotFoundError(id)
      throw error
    }
    try {
      // The header and the whole log in one read: the write path validates everything it continues.
      const records = await persistence.readBerthRange(berthId, 0, undefined)
      const first = records[0]
      // An empty record (a materialization that crashed before its first append) is no session.
      if (first === undefined) throw new SessionPersistenceNotFoundError(id)
      const header = persistence.validatedHeader(id, decodeHeader(berthId, first))
      const log = records.slice(1).map((record) => persistence.decodeEvent(id, record))
      const leaseMs = Math.max(1, attachment.run.lease_until - attachment.run.attached_at)
      return new BerthWriteHandle(persistence, id, header, JSON.stringify(header), { kind: 'opened', runId, leaseMs, log })
    } catch (error) {
      await persistence.client.detachRun(berthId, runId, { outcome: 'dsh-open-failed' }).catch(() => undefined)
      throw error
    }
  }

  async read(offset = 0, length?: number, options?: SignalOptions): Promise<readonly SessionEvent[]> {
    options?.signal?.throwIfAborted()
    this.assertOpen('read')
    assertReadArgument('offset', offset)
    if (length !== undefined) assertReadArgument('length', length)
    // Displaced: another writer may have appended since, so the kept log is no longer the log.
    if (this.ownershipLost !== undefined) return Object.freeze(await this.persistence.readEvents(this.id, offset, length))
    const end = length === undefined ? this.log.length : Math.min(this.log.length, offset + length)
    const events: SessionEvent[] = []
    for (let index = offset; index < end; index++) {
      let entry = this.log[index] as SessionEvent | string
      if (typeof entry === 'string') {
        entry = deepFreeze(JSON.parse(entry) as SessionEvent)
        this.log[index] = entry
      }
      events.push(entry)
    }
    return Object.freeze(events)
  }

  async append(events: readonly SessionEvent[], options?: SignalOptions): Promise<void> {
    options?.signal?.throwIfAborted()
    this.assertOpen('append')
    this.assertOwned()
    const batch = admitAppendBatch(events)
    if (batch.texts.length === 0) return
    assertContiguousSeqs(this.id, batch.seqs, this.admittedNext)
    const admitted = admittedOf(events, batch)
    this.admittedNext += batch.texts.length
    // Published events before it are drained first, in order, through the same chain.
    const drain = this.buffered.length > 0 || this.retained.length > 0 ? this.drainLive() : Promise.resolve()
    const chunks = chunksOf(admitted)
    try {
      await drain
      await this.enqueue(() => this.persistChunks(chunks))
    } catch (error) {
      this.admittedNext = this.cursor + this.bufferedCount()
      throw error
    }
  }

  publish(event: SessionEvent): void {
    this.assertOpen('publish')
    this.assertOwned()
    const batch = admitAppendBatch([event])
    assertContiguousSeqs(this.id, batch.seqs, this.admittedNext)
    const admitted = admittedOf([event], batch)[0] as Admitted
    this.admittedNext++
    this.buffered.push(admitted)
    this.bufferedBytes += admitted.text.length
    if (this.drainPaused) return
    if (this.bufferedBytes >= LIVE_WRITE_BATCH_MAX_BYTES) {
      this.backgroundDrain()
    } else if (this.timer === undefined) {
      // One timer per idle buffer; later events do not push it back (no debounce).
      this.timer = setTimeout(() => {
        this.timer = undefined
        this.backgroundDrain()
      }, LIVE_WRITE_BATCH_MAX_DELAY_MS)
    }
  }

  async flush(options?: SignalOptions): Promise<void> {
    options?.signal?.throwIfAborted()
    this.assertOpen('flush')
    await this.explicitDrain()
    await this.enqueue(async () => {
      if (!this.materialized) await this.persistChunks([])
    })
  }

  close(): Promise<void> {
    this.closing ??= this.closeOnce()
    return this.closing
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close()
  }

  private async closeOnce(): Promise<void> {
    this.closed = true
    const failures: unknown[] = []
    // Drain until empty: a failing drain is reported, its events are lost with the handle.
    for (let round = 0; round < 100 && (this.buffered.length > 0 || this.retained.length > 0); round++) {
      try {
        await this.explicitDrain()
      } catch (error) {
        failures.push(normalizeError(error))
        break
      }
    }
    await this.chain.catch(() => undefined)
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = undefined
    this.stopHeartbeat()
    if (this.runId !== undefined && this.ownershipLost === undefined) {
      try {
        await this.persistence.client.detachRun(this.berthId, this.runId, { outcome: 'completed' })
      } catch (error) {
        // Already displaced or detached: ownership is gone either way.
        if (!(error instanceof RunNotAttachedError) && !(error instanceof NotFoundError)) failures.push(error)
      }
    }
    this.persistence.released(this.id, this)
    if (failures.length === 1) throw failures[0]
    if (failures.length > 1) throw new AggregateError(failures, `session "${this.id}": close failed`)
  }

  // ---- the write-behind window ----

  private bufferedCount(): number {
    return this.buffered.length + this.retained.reduce((sum, chunk) => sum + chunk.texts.length, 0)
  }

  private backgroundDrain(): void {
    this.drainLive().catch((error: unknown) => {
      this.persistence.warn(`session-persistence: background write for session "${this.id}" failed (buffered events retained)`, error)
    })
  }

  /** An explicit drain (flush, close, the service's flush): retries a retained batch once and reports its failure. */
  private async explicitDrain(): Promise<void> {
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = undefined
    this.drainPaused = false
    await this.drainLive()
  }

  /** Single-flight: concurrent callers share one drain. Events admitted meanwhile form the next batch. */
  private drainLive(): Promise<void> {
    this.draining ??= this.drainLoop().finally(() => {
      this.draining = undefined
    })
    return this.draining
  }

  private async drainLoop(): Promise<void> {
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = undefined
    while (this.retained.length > 0 || this.buffered.length > 0) {
      if (this.retained.length === 0) {
        const batch = this.buffered.splice(0)
        this.bufferedBytes = 0
        this.retained = chunksOf(batch)
      }
      const chunks = this.retained
      try {
        await this.enqueue(() => this.persistChunks(chunks))
        this.retained = []
      } catch (error) {
        // Keep the batch, in order and with its keys; no timer until an explicit drain.
        this.drainPaused = true
        throw normalizeError(error)
      }
    }
  }

  // ---- persisting ----

  private enqueue(operation: () => Promise<void>): Promise<void> {
    const run = this.chain.then(operation)
    this.chain = run.catch(() => undefined)
    return run
  }

  /** Stores chunks one berth append each, materializing the session first when needed. Chunks persisted are dropped from the array. */
  private async persistChunks(chunks: PersistChunk[]): Promise<void> {
    if (!this.materialized) await this.materialize(chunks)
    while (chunks.length > 0) {
      const chunk = chunks[0] as PersistChunk
      const expectedSeq = this.cursor + 1
      await this.appendToBerth([...chunk.bodies], expectedSeq, chunkKey(this.berthId, expectedSeq, chunk.texts))
      this.acknowledge(chunk.texts)
      chunks.shift()
    }
  }

  private acknowledge(texts: readonly string[]): void {
    for (const text of texts) this.log.push(text)
    this.cursor += texts.length
  }

  /**
   * Makes the created session exist on berth: create the record, attach this handle's
   * run, then store the header and the first chunk in one append. A crash between the
   * create and that append leaves an empty record, which every read treats as absent and a
   * later create of the same id reuses.
   */
  private async materialize(chunks: PersistChunk[]): Promise<void> {
    const client = this.persistence.client
    const entry = this.persistence.pendingEntry(this.id)
    const headerText = entry?.headerText ?? this.headerText
    try {
      await client.createSession(this.persistence.createBody(this.header, headerText))
    } catch (error) {
      if (!(error instanceof AlreadyExistsError)) throw error
      // Ours from an earlier attempt, or an empty leftover: usable while empty, or when
      // its first event is our own materializing append (an earlier attempt's unknown outcome).
      if ((await client.nextSeq(this.berthId)) !== 0) {
        const first = (await client.readEvents(this.berthId, { from: 0, limit: 1 })).events[0]
        if (first?.idempotency_key !== this.materializeKey || this.runId === undefined) throw new SessionAlreadyExistsError(this.id)
      }
    }
    const runId = this.runId ?? `dsh-${randomUUID()}`
    if (this.runId === undefined) {
      try {
        const attachment = await client.attachRun(this.berthId, { run_id: runId, on_busy: 'reject' })
        this.runId = runId
        this.startHeartbeat(Math.max(1, attachment.run.lease_until - attachment.run.attached_at))
      } catch (error) {
        if (error instanceof BusyError) throw new SessionAlreadyExistsError(this.id)
        throw error
      }
    }
    const first = chunks[0]
    // Not `ignorable`: berth's own repair refuses the session rather than repair it too.
    const events: NewEvent[] = [{ type: DSH_HEADER_TYPE, data: headerText }]
    if (first !== undefined && first.texts.length < BERTH_BATCH_EVENTS_MAX) events.push(...first.bodies)
    try {
      await this.appendToBerth(events, 0, this.materializeKey)
    } catch (error) {
      // An earlier attempt stored the header alone (a flush) under this key: materialized.
      if (!(error instanceof IdempotencyKeyReusedError) || error.actual !== 0) throw error
      this.materialized = true
      this.persistence.materialized(this.id)
      return
    }
    this.materialized = true
    this.persistence.materialized(this.id)
    if (first !== undefined && events.length > 1) {
      this.acknowledge(first.texts)
      chunks.shift()
    }
  }

  private async appendToBerth(events: NewEvent[], expectedSeq: number, key: string): Promise<AppendOutcome> {
    this.assertOwned()
    try {
      return await this.persistence.client.appendEvents(
        this.berthId,
        { events, expected_seq: expectedSeq, ...(this.runId === undefined ? {} : { run: this.runId }) },
        { idempotencyKey: key },
      )
    } catch (error) {
      // Displaced (another writer attached after our lease lapsed, or took over), or
      // someone appended behind our back: this handle no longer owns the log.
      if (error instanceof RunNotAttachedError || error instanceof SeqConflictError) {
        this.loseOwnership(error)
        throw new SessionOwnershipLostError(this.id, { cause: error })
      }
      throw error
    }
  }

  // ---- ownership ----

  private startHeartbeat(leaseMs: number): void {
    const interval = this.persistence.heartbeatIntervalMs ?? Math.max(50, Math.floor(leaseMs / 3))
    this.heartbeatTimer = setInterval(() => {
      if (this.runId === undefined) return
      this.persistence.client.heartbeatRun(this.berthId, this.runId).catch((error: unknown) => {
        if (error instanceof RunNotAttachedError || error instanceof NotFoundError) this.loseOwnership(error)
        else if (!(error instanceof BerthConnectionError) && !(error instanceof BerthError && error.retryable)) {
          this.persistence.warn(`session-persistence: heartbeat for session "${this.id}" failed`, error)
        }
      })
    }, interval)
    this.heartbeatTimer.unref()
  }

  private stopHeartbeat(): void {
    if (this.heartbeatTimer !== undefined) clearInterval(this.heartbeatTimer)
    this.heartbeatTimer = undefined
  }

  private loseOwnership(cause: unknown): void {
    this.ownershipLost ??= cause
    this.stopHeartbeat()
  }

  private assertOwned(): void {
    if (this.ownershipLost !== undefined) throw new SessionOwnershipLostError(this.id, { cause: this.ownershipLost })
  }

  private assertOpen(operation: string): void {
    if (this.closed) throw new SessionHandleClosedError(this.id, operation)
  }
}

/** The admitted events of a batch: each one's text, and the berth event that stores it (content copied from a caller's mutable objects). */
function admittedOf(events: readonly SessionEvent[], batch: AdmittedBatch): Admitted[] {
  return batch.texts.map((text, index) => ({ text, body: berthEvent(events[index] as SessionEvent, text, batch.times[index], true) }))
}

/** Splits a batch into chunks berth takes in one append each (≤ 999 events, ≤ 7 MiB). */
function chunksOf(items: readonly Admitted[]): PersistChunk[] {
  const chunks: PersistChunk[] = []
  let start = 0
  while (start < items.length) {
    let end = start
    let bytes = 0
    while (end < items.length && end - start < BERTH_BATCH_EVENTS_MAX - 1) {
      const item = items[end] as Admitted
      const size = bodyBytesEstimate(item.body, item.text)
      if (end > start && bytes + size > BERTH_BATCH_BYTES_MAX) break
      bytes += size
      end++
    }
    const chunk = items.slice(start, end)
    chunks.push({ texts: chunk.map((item) => item.text), bodies: chunk.map((item) => item.body) })
    start = end
  }
  return chunks
}

/**
 * A chunk's idempotency key, derived from where it goes and what it holds: every attempt
 * at the same events at the same seq carries the same key — the write-behind retry of a
 * retained batch, and a caller's retry of an `append` whose answer was lost — so berth
 * answers the original outcome instead of storing them twice or refusing a conflict.
 * Different events at that seq get another key (and `seq_conflict`).
 */
export function chunkKey(berthId: string, expectedSeq: number, texts: readonly string[]): string {
  const digest = createHash('sha256').update(`${berthId}\n${expectedSeq}\n`)
  for (const text of texts) digest.update(text).update('\n')
  return `dsh:${digest.digest('base64url')}`
}

function normalizeError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error))
}
