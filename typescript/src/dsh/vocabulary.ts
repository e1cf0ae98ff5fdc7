/**
 * A harness event as berth stores it (issue 52): ONE berth event per harness event. The
 * harness's message, tool, turn and step events become berth's conversation vocabulary —
 * `user/message`, `system/message`, `assistant/message` (with `tool_calls`), `tool/call`,
 * `tool/result`, `turn/*`, `step/*` — whose `data` holds the fields berth's readers use
 * beside the harness event's exact JSON text under `dsh`; every other harness event (and
 * one whose shape berth's vocabulary cannot take) stays a `dsh/event` envelope holding
 * that text, marked `ignorable`. A turn or step boundary whose text is exactly what its
 * vocabulary event says (`{"type":"turn/start","seq":S,"time":T,"data":{"turn":N}}`, the
 * harness's own shape; checked when it is written) is stored without `dsh`: its text is
 * rebuilt from the berth event (seq − 1, time, fields), so the boundaries, most of a log's
 * events, cost berth no more than the fields its readers need. Reading back takes the text
 * and nothing else, so the harness gets exactly what it wrote, whichever form stored it
 * (sessions written before the mapping, all `dsh/event`, read the same way).
 *
 * The vocabulary fields are a view for berth's readers (inspector, `berth sessions cat`,
 * listings); the text is the record. Pure: no I/O.
 */
import type { EventRecord, NewEvent } from '../client.js'

/** berth seq 0 of a harness session: the header's exact JSON text. */
export const DSH_HEADER_TYPE = 'dsh/header'
/** A harness event berth's vocabulary does not take: its exact JSON text, `ignorable`. */
export const DSH_EVENT_TYPE = 'dsh/event'
/** The key of a vocabulary event's `data` that holds the harness event's exact JSON text. */
export const DSH_TEXT_KEY = 'dsh'
/**
 * Above this many characters of text a harness event's content (or a call's arguments) is
 * not repeated in its vocabulary fields — a short note stands in — so that the event,
 * which holds the text too, stays within berth's 1 MiB per event.
 */
export const VOCABULARY_TEXT_MAX = 128 * 1024

/** How `JSON.stringify` writes a lone surrogate (a false positive, a string holding `\\ud8…` literally, only costs that event its fields). */
const LONE_SURROGATE = /\\ud[89a-f]/

/** The deepest vocabulary fields kept (berth refuses data over 128 levels; `data` and `dsh` add theirs). */
const FIELDS_DEPTH_MAX = 100

function deeperThan(value: unknown, levels: number): boolean {
  if (typeof value !== 'object' || value === null) return false
  if (levels === 0) return true
  if (Array.isArray(value)) {
    for (const item of value) if (deeperThan(item, levels - 1)) return true
  } else {
    for (const key in value) if (deeperThan((value as Fields)[key], levels - 1)) return true
  }
  return false
}

/** The types whose fields hold the harness's own nested values (content, arguments): the only ones a depth check concerns. */
const NESTED_TYPES: ReadonlySet<string> = new Set(['user/message', 'system/message', 'assistant/message', 'tool/call', 'tool/result'])

/** The harness's envelope, as far as the mapping reads it. */
export interface HarnessEventLike {
  readonly type: string
  readonly data: unknown
}

type Fields = Record<string, unknown>

function isObject(value: unknown): value is Readonly<Fields> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0
}

function isName(value: unknown): value is string {
  return typeof value === 'string' && value !== ''
}

/**
 * A value the body may hold until it is sent: the harness's events are deep-frozen
 * (`Session.append`), so theirs are kept by reference; a caller's mutable object is copied,
 * so a change after `publish` cannot reach berth (the text was taken at admission too).
 * The event passed the lossless-JSON check, so a plain copy of arrays and objects is exact.
 */
function detached(value: unknown, copy: boolean): unknown {
  if (!copy || typeof value !== 'object' || value === null || Object.isFrozen(value)) return value
  return plainCopy(value)
}

function plainCopy(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value
  if (Array.isArray(value)) return value.map(plainCopy)
  const copy: Fields = {}
  for (const key in value) copy[key] = plainCopy((value as Fields)[key])
  return copy
}

/** A tool call's `arguments`: the harness keeps the model's raw JSON text; berth's readers show parsed JSON best. */
function argumentsOf(raw: unknown, copy: boolean): unknown {
  if (typeof raw !== 'string') return detached(raw ?? null, copy)
  try {
    return JSON.parse(raw) as unknown
  } catch {
    return raw
  }
}

/**
 * berth's `turn/end.reason` (a string) from the harness's `{kind, …}`: the kind as it is
 * (`completed`, `aborted`, `error`, `interrupted`, `blocked`, `max-tokens` — berth takes
 * the hyphenated spelling too — or a plugin's own).
 */
export function turnEndReason(reason: unknown): string {
  const kind = isObject(reason) ? reason.kind : reason
  return isName(kind) ? kind : 'unknown'
}

interface MapOptions {
  /** Copy mutable content (the write handle's admission). */
  readonly copy: boolean
  /** The event's text is over `VOCABULARY_TEXT_MAX`: a note stands in for content and arguments. */
  readonly big: boolean
  readonly length: number
}

function note(type: string, options: MapOptions): string {
  return `[${type}: ${options.length} characters, kept whole in the harness event]`
}

function messageContent(message: unknown): unknown {
  return isObject(message) ? message.content : undefined
}

/**
 * The vocabulary fields of a harness event (without the text), or `undefined` when the
 * event stays a `dsh/event`: not a message, tool, turn or step event, or shaped so that
 * berth's required fields cannot be filled (a turn number that is not a non-negative
 * integer, a tool call without an id).
 */
export function vocabularyFields(event: HarnessEventLike, options: MapOptions = { copy: false, big: false, length: 0 }): Fields | undefined {
  const data = event.data
  if (!isObject(data)) return undefined
  const content = (value: unknown): unknown => (options.big ? note(event.type, options) : detached(value, options.copy))
  switch (event.type) {
    case 'turn/start':
      return isCount(data.turn) ? { turn: data.turn } : undefined
    case 'turn/end':
      return isCount(data.turn) ? { turn: data.turn, reason: turnEndReason(data.reason) } : undefined
    case 'step/start':
    case 'step/end':
      return isCount(data.turn) && isCount(data.step) ? { turn: data.turn, step: data.step } : undefined
    case 'user/message':
      // A user message is the harness's `Message` itself: `{id, role, content, source}`.
      return data.content === undefined ? undefined : { content: content(data.content) }
    case 'system/message': {
      // Later harness versions: `{turn, step, message}` (the system prompt as surface node 0).
      const text = messageContent(data.message) ?? data.content
      return text === undefined ? undefined : { content: content(text) }
    }
    case 'assistant/message': {
      const blocks = messageContent(data.message)
      if (!Array.isArray(blocks)) return undefined
      const shown: unknown[] = []
      const calls: Fields[] = []
      for (const block of blocks as unknown[]) {
        if (isObject(block) && block.type === 'tool-call') {
          if (isName(block.id) && typeof block.name === 'string') {
            calls.push({ call_id: block.id, name: block.name, arguments: options.big ? note('arguments', options) : argumentsOf(block.arguments, options.copy) })
          }
        } else {
          shown.push(block)
        }
      }
      // `shown` is a new array: copy it only when the blocks are a caller's mutable ones.
      const fields: Fields = { content: options.big ? note(event.type, options) : detached(shown, options.copy && !Object.isFrozen(blocks)) }
      if (calls.length > 0) fields.tool_calls = calls
      return fields
    }
    case 'tool/call':
      if (!isName(data.callId) || !isName(data.name)) return undefined
      return { call_id: data.callId, name: data.name, arguments: options.big ? note('arguments', options) : argumentsOf(data.arguments, options.copy) }
    case 'tool/result': {
      const message = data.message
      if (!isObject(message)) return undefined
      const blocks = message.content
      // A tool result message holds one `tool-result` block; its own content is what the tool returned.
      const block = Array.isArray(blocks) && blocks.length === 1 && isObject(blocks[0]) && blocks[0].type === 'tool-result' ? blocks[0] : undefined
      const source = message.source
      const callId = isObject(source) && isName(source.callId) ? source.callId : block?.toolCallId
      if (!isName(callId)) return undefined
      const fields: Fields = { call_id: callId, content: content(block?.content ?? blocks ?? '') }
      if (block?.isError === true) fields.is_error = true
      const error = data.error
      if (isObject(error) && typeof error.code === 'string' && typeof error.name === 'string') fields.error = { code: error.code, name: error.name }
      return fields
    }
    default:
      return undefined
  }
}

/**
 * The berth event that stores one harness event: the vocabulary event with the exact text
 * under `dsh`, or the `dsh/event` envelope. `text` is `JSON.stringify(event)`, taken by the
 * caller (it is also what idempotency keys and reads are made of).
 */
export function berthEvent(event: HarnessEventLike, text: string, time: number | undefined, copy = false): NewEvent {
  const when = time === undefined ? {} : { time }
  // A lone surrogate (JSON.stringify writes it `\udXXX`) would reach berth's strict JSON
  // unescaped through the fields: such an event keeps only its text.
  const fields = LONE_SURROGATE.test(text) ? undefined : vocabularyFields(event, { copy, big: text.length > VOCABULARY_TEXT_MAX, length: text.length })
  // berth takes data at most 128 levels deep; the text, a string, has no depth of its own.
  if (fields === undefined || (NESTED_TYPES.has(event.type) && deeperThan(fields, FIELDS_DEPTH_MAX))) return { type: DSH_EVENT_TYPE, data: text, ignorable: true, ...when }
  const seq = (event as { seq?: unknown }).seq
  // A boundary its vocabulary event reproduces exactly needs no copy of its text.
  if (time === undefined || !isCount(seq) || boundaryText(event.type, seq, time, fields) !== text) fields[DSH_TEXT_KEY] = text
  return { type: event.type, data: fields, ...when }
}

/**
 * The text of the harness boundary event a vocabulary boundary event stands for — the
 * harness's envelope order, `{"type","seq","time","data"}` — or `undefined` for any other
 * type or fields (a `turn/end` reason stands for `{"kind": reason}`).
 */
function boundaryText(type: string, seq: number, time: number, fields: Readonly<Fields>): string | undefined {
  const head = `{"type":"${type}","seq":${seq},"time":${time},"data":{"turn":${String(fields.turn)}`
  switch (type) {
    case 'turn/start':
      return isCount(fields.turn) ? `${head}}}` : undefined
    case 'step/start':
    case 'step/end':
      return isCount(fields.turn) && isCount(fields.step) ? `${head},"step":${fields.step}}}` : undefined
    case 'turn/end':
      return isCount(fields.turn) && isName(fields.reason) ? `${head},"reason":{"kind":${JSON.stringify(fields.reason)}}}}` : undefined
    default:
      return undefined
  }
}

/**
 * A stored harness event's exact text, from any form (`dsh/event` with the text as its
 * `data`, a vocabulary event with it under `dsh`, a boundary without it: rebuilt, harness
 * seq = berth seq − 1); `undefined` when the berth event holds none (a berth event nobody
 * wrote through the adapters: a tool result of berth's own repair, a fork's
 * `session/end-seed`, another writer's).
 */
export function harnessText(record: EventRecord): string | undefined {
  const data = record.data as unknown
  if (record.type === DSH_EVENT_TYPE) return typeof data === 'string' ? data : undefined
  if (!isObject(data)) return undefined
  const text = data[DSH_TEXT_KEY]
  if (typeof text === 'string') return text
  return record.seq >= 1 ? boundaryText(record.type, record.seq - 1, record.time, data) : undefined
}

/**
 * The harness event a stored berth event holds, parsed afresh (callers freeze or hand it
 * on): `JSON.parse` of its text, or — for a boundary without `dsh` — built directly, in the
 * harness's key order, as that parse would build it. `undefined` as for `harnessText`;
 * a text that is not JSON throws (`SyntaxError`).
 */
export function harnessEvent(record: EventRecord): unknown {
  const data = record.data as unknown
  if (record.type !== DSH_EVENT_TYPE && isObject(data) && data[DSH_TEXT_KEY] === undefined && record.seq >= 1) {
    const base = { type: record.type, seq: record.seq - 1, time: record.time }
    switch (record.type) {
      case 'turn/start':
        if (isCount(data.turn)) return { ...base, data: { turn: data.turn } }
        return undefined
      case 'step/start':
      case 'step/end':
        if (isCount(data.turn) && isCount(data.step)) return { ...base, data: { turn: data.turn, step: data.step } }
        return undefined
      case 'turn/end':
        if (isCount(data.turn) && isName(data.reason)) return { ...base, data: { turn: data.turn, reason: { kind: data.reason } } }
        return undefined
      default:
        return undefined
    }
  }
  const text = harnessText(record)
  return text === undefined ? undefined : (JSON.parse(text) as unknown)
}

/** How big a body is on the wire, roughly (for splitting batches under berth's 8 MiB). */
export function bodyBytesEstimate(body: NewEvent, text: string): number {
  return (body.type === DSH_EVENT_TYPE ? text.length : 2 * text.length) + 64
}
