/**
 * The checks every handle applies before anything reaches berth, and to everything read
 * back: lossless JSON (an event that `JSON.stringify` would change is refused, so the
 * stored text *is* the event), contiguity, the header's format version, and the
 * fail-closed vocabulary rule (an unknown event type refuses the read unless the event
 * says `ignorable: true`). These are the harness's rules (`dsh.md` §1.5), run here on the
 * client: berth validates only its own vocabulary's fields (`vocabulary.ts`), never the
 * harness's event, which it keeps as text.
 */
import { SessionFormatUnsupportedError, SessionPersistenceCorruptionError, sessionFormatVersionRefusal } from './errors.js'
import type { SessionEvent, SessionHeader, SessionId, SessionLocation } from './types.js'

/** The session format version this build reads and writes (dsh `SESSION_FORMAT_VERSION` of seed 004: 0). */
export const SESSION_FORMAT_VERSION = 0

/**
 * The core event types of the harness's log (`dsh.md` §5.3, both iterations). A harness
 * passes its own generated `KNOWN_SESSION_EVENT_TYPES` (from `@deepseek-ai/dsh-session`)
 * as the `knownEventTypes` option; this set is the default for callers that have none.
 */
export const CORE_SESSION_EVENT_TYPES: ReadonlySet<string> = new Set([
  'turn/start', 'turn/end', 'step/start', 'step/end',
  'user/message', 'assistant/message', 'assistant/chunk', 'assistant/attempt', 'system/message',
  'tool/call', 'tool/result', 'todo/write',
  'request/header', 'request/context', 'session/end-seed',
])

/** Refuses what is not a non-negative safe integer (read offsets and lengths). */
export function assertReadArgument(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${name} must be a non-negative safe integer, got ${String(value)}`)
  }
}

/** Why `value` would not survive `JSON.stringify` → `JSON.parse` unchanged, or `undefined`. */
function losslessJsonProblem(value: unknown, path: string, ancestors: Set<object>): string | undefined {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return undefined
    case 'number':
      return Number.isFinite(value) ? undefined : `${path} is ${String(value)}`
    case 'bigint':
      return `${path} is a BigInt`
    case 'undefined':
      return `${path} is undefined`
    case 'function':
      return `${path} is a function`
    case 'symbol':
      return `${path} is a Symbol`
    case 'object': {
      if (value === null) return undefined
      if (ancestors.has(value)) return `${path} is cyclic`
      ancestors.add(value)
      try {
        if (Array.isArray(value)) {
          for (let index = 0; index < value.length; index++) {
            if (!(index in value)) return `${path}[${index}] is a hole`
            const problem = losslessJsonProblem(value[index], `${path}[${index}]`, ancestors)
            if (problem !== undefined) return problem
          }
          return undefined
        }
        const prototype = Object.getPrototypeOf(value) as unknown
        if (prototype !== Object.prototype && prototype !== null) {
          return `${path} is a ${(value as { constructor?: { name?: string } }).constructor?.name ?? 'non-plain object'}`
        }
        if (Object.getOwnPropertySymbols(value).length > 0) return `${path} has Symbol keys`
        for (const [key, item] of Object.entries(value)) {
          const problem = losslessJsonProblem(item, `${path}.${key}`, ancestors)
          if (problem !== undefined) return problem
        }
        return undefined
      } finally {
        ancestors.delete(value)
      }
    }
    default:
      return `${path} is not JSON`
  }
}

/** A batch as it travels: each event's exact JSON text beside its detached copy. */
export interface MaterializedBatch {
  readonly events: readonly SessionEvent[]
  readonly texts: readonly string[]
}

/**
 * Snapshots a batch losslessly: refuses (TypeError) any event whose JSON text would not
 * read back as the same value, and returns detached, frozen copies with their texts.
 */
export function materializeAppendBatch(events: readonly SessionEvent[]): MaterializedBatch {
  const texts: string[] = []
  const copies: SessionEvent[] = []
  events.forEach((event, index) => {
    const problem = losslessJsonProblem(event, 'event', new Set())
    if (problem !== undefined) {
      throw new TypeError(`session event at index ${index} (type "${String((event as { type?: unknown })?.type)}") is not losslessly JSON-serializable: ${problem}`)
    }
    const text = JSON.stringify(event)
    texts.push(text)
    copies.push(deepFreeze(JSON.parse(text) as SessionEvent))
  })
  return { events: copies, texts }
}

/** A batch admitted by a write handle: each event's exact JSON text, with the seq and time it carries. */
export interface AdmittedBatch {
  readonly texts: readonly string[]
  readonly seqs: readonly number[]
  readonly times: readonly (number | undefined)[]
}

/**
 * The write path's admission: the same lossless-JSON refusal as `materializeAppendBatch`,
 * but keeping only the texts (the detached snapshot *is* the text; reads parse it when
 * they need objects), which halves the cost of admitting an event.
 */
export function admitAppendBatch(events: readonly SessionEvent[]): AdmittedBatch {
  const texts: string[] = []
  const seqs: number[] = []
  const times: (number | undefined)[] = []
  events.forEach((event, index) => {
    const problem = losslessJsonProblem(event, 'event', new Set())
    if (problem !== undefined) {
      throw new TypeError(`session event at index ${index} (type "${String((event as { type?: unknown })?.type)}") is not losslessly JSON-serializable: ${problem}`)
    }
    texts.push(JSON.stringify(event))
    seqs.push(event.seq)
    times.push(Number.isSafeInteger(event.time) && event.time >= 0 ? event.time : undefined)
  })
  return { texts, seqs, times }
}

/** Refuses seqs that do not continue `cursor` one by one (the seqs of an admitted batch). */
export function assertContiguousSeqs(id: SessionId, seqs: readonly number[], cursor: number): void {
  seqs.forEach((seq, index) => {
    if (seq !== cursor + index) {
      throw new RangeError(`append seq mismatch for "${id}": expected ${cursor + index} at index ${index}, got ${String(seq)}`)
    }
  })
}

/** Snapshots a header losslessly; `createdAt` must be a non-negative safe integer. */
export function materializeCreateHeader(header: SessionHeader): { header: SessionHeader; text: string } {
  if (!Number.isSafeInteger(header.createdAt) || header.createdAt < 0) {
    throw new TypeError(`session header createdAt must be a non-negative safe integer, got ${String(header.createdAt)}`)
  }
  if (typeof header.id !== 'string' || header.id === '') throw new TypeError('session header id must be a non-empty string')
  const problem = losslessJsonProblem(header, 'header', new Set())
  if (problem !== undefined) throw new TypeError(`session header is not losslessly JSON-serializable: ${problem}`)
  const text = JSON.stringify(header)
  return { header: deepFreeze(JSON.parse(text) as SessionHeader), text }
}

export function assertContiguous(id: SessionId, events: readonly SessionEvent[], cursor: number): void {
  events.forEach((event, index) => {
    if (event.seq !== cursor + index) {
      throw new RangeError(`append seq mismatch for "${id}": expected ${cursor + index} at index ${index}, got ${String(event.seq)}`)
    }
  })
}

export function assertStoredId(id: SessionId, header: SessionHeader): void {
  if (header.id !== id) {
    throw new SessionPersistenceCorruptionError(`stored session identity mismatch: requested "${id}", header contains "${header.id}"`)
  }
}

export function assertVersion(header: SessionHeader, supported: number, location?: SessionLocation): void {
  if (header.version !== supported) {
    throw new SessionFormatUnsupportedError(sessionFormatVersionRefusal(header.id, header.version, supported), location)
  }
}

/** The fail-closed vocabulary rule: an unknown type refuses unless its writer marked it ignorable. */
export function assertKnownEvent(id: SessionId, event: SessionEvent, known: ReadonlySet<string>, location?: SessionLocation): void {
  if (known.has(event.type) || event.ignorable === true) return
  throw new SessionFormatUnsupportedError(
    `session "${id}": stored event type "${event.type}" at seq ${event.seq} is unknown to this build and not ignorable (likely written by a newer harness)`,
    location,
  )
}

export function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const item of Object.values(value)) deepFreeze(item)
  }
  return value
}
