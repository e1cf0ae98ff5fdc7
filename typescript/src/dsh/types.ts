/**
 * The handle seam of DeepSeek Harness session persistence (seed 004), defined here from
 * its public description (`dsh.md` §1): the service, the handle, the header and event
 * envelope, and the revision token. No published package carries these types yet (npm
 * has only the older coordinator seam, rc.8), so they are berth's own, shaped to match.
 */

/** A session id: any non-empty string (berth encodes it into its id grammar). */
export type SessionId = string
/** A position in a session's log (`events[i].seq === i`). */
export type SessionLogOffset = number
export type SessionAccess = 'read' | 'write'

/** Immutable storage metadata, kept outside the event log (dsh `SessionHeader`, format v0). */
export interface SessionHeader {
  readonly version: number
  readonly id: SessionId
  /** Non-negative safe-integer Unix ms. */
  readonly createdAt: number
  readonly cwd?: string
  readonly parentSession?: SessionId
  readonly seedLength?: number
  readonly isSeeded?: boolean
  readonly origin?: 'subagent'
  readonly delegationDepth?: number
  readonly agentPreset?: string
}

/** One event of the harness's log, carried to berth as its exact JSON text. */
export interface SessionEvent {
  readonly type: string
  readonly seq: number
  readonly time: number
  readonly data: unknown
  readonly ignorable?: true
  readonly [extra: string]: unknown
}

declare const revisionBrand: unique symbol
/** Opaque change token: equal means "may treat as unchanged"; ownership churn never changes it. */
export type SessionPersistenceRevision = string & { readonly [revisionBrand]: 'SessionPersistenceRevision' }
export function SessionPersistenceRevision(value: string): SessionPersistenceRevision {
  return value as SessionPersistenceRevision
}

export interface SessionPersistenceSnapshot {
  readonly header: SessionHeader
  readonly revision: SessionPersistenceRevision
  /** Events in the log (exact for sessions this instance writes; from berth's record otherwise). */
  readonly eventCount?: number
}

/** An aborted signal refuses the operation before it starts; once sent, a berth write runs to its end (not cancellable half-way). */
export interface SignalOptions { readonly signal?: AbortSignal }
export type SessionPersistenceCreateOptions = SignalOptions
export type SessionPersistenceOpenOptions = SignalOptions
export type SessionPersistenceStatOptions = SignalOptions
export type SessionPersistenceListOptions = SignalOptions
export type SessionHandleReadOptions = SignalOptions
export type SessionHandleAppendOptions = SignalOptions
export type SessionHandleFlushOptions = SignalOptions

/** One type for both accesses: mutation through a read handle is a runtime `SessionReadOnlyError`. */
export interface SessionHandle {
  readonly id: SessionId
  readonly header: SessionHeader
  readonly access: SessionAccess
  /** A validated contiguous slice of the log; monotonic per handle. */
  read(offset?: number, length?: number, options?: SessionHandleReadOptions): Promise<readonly SessionEvent[]>
  /** The first seq must equal the stored next seq. Durable on berth when it resolves. */
  append(events: readonly SessionEvent[], options?: SessionHandleAppendOptions): Promise<void>
  /**
   * The live write path: admit one event without awaiting it. It is stored within the
   * write-behind window (≤ 200 ms, bounded in bytes); `flush` is the barrier that
   * drains it and surfaces a background failure.
   */
  publish(event: SessionEvent): void
  /** The durability barrier; also materializes an empty created session. */
  flush(options?: SessionHandleFlushOptions): Promise<void>
  /** Idempotent; drains, releases ownership; not cancellable. */
  close(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
}

export interface SessionPersistence {
  create(header: SessionHeader, options?: SessionPersistenceCreateOptions): Promise<SessionHandle>
  open(id: SessionId, access: SessionAccess, options?: SessionPersistenceOpenOptions): Promise<SessionHandle>
  flush(): Promise<void>
  stat(id: SessionId, options?: SessionPersistenceStatOptions): Promise<SessionPersistenceSnapshot | undefined>
  list(options?: SessionPersistenceListOptions): Promise<readonly SessionPersistenceSnapshot[]>
}

/** Where a refusal points (`dsh.md` §1.3): for berth, the session's URL. */
export interface SessionLocation {
  readonly kind: string
  readonly path: string
}
