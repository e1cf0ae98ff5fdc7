/**
 * The live tail (`GET /v1/sessions/{id}/events/stream`) as an async iterator. It parses
 * Server-Sent Events itself (the framing docs/reference/http.md "Live tail" fixes: `id`, `event`,
 * `data`, `:` comments), and when the connection breaks it reconnects from the seq after
 * the last event it delivered, so no event is lost or delivered twice.
 */
import type { BerthClient, EventRecord, TailEnd } from './client.js'
import { sleep } from './client.js'
import { BerthConnectionError, BerthError, berthErrorFromResponse } from './errors.js'

export interface TailOptions {
  /** First seq to deliver (default 0). */
  readonly from?: number
  /** End after this many events in all (the server's `max_events`, re-asked on each reconnect). */
  readonly maxEvents?: number
  /** End after this long without an event (ms, the server's `idle_timeout_ms`). */
  readonly idleTimeoutMs?: number
  readonly signal?: AbortSignal
  /** Reconnections in a row without an event before giving up (default 10). */
  readonly reconnectAttempts?: number
  /** Wait between reconnections (ms, default 200). */
  readonly reconnectDelayMs?: number
}

export interface SseMessage {
  readonly event: string
  readonly data: string
  readonly id: string | undefined
}

/** Splits a byte stream into SSE messages (WHATWG "event stream interpretation", the parts berth uses). */
export async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder()
  let buffered = ''
  let event = ''
  let data: string[] = []
  let id: string | undefined
  const reader = body.getReader()
  try {
    for (;;) {
      const chunk = await reader.read()
      if (chunk.done) return
      buffered += decoder.decode(chunk.value, { stream: true })
      for (;;) {
        const newline = buffered.search(/\r\n|\r|\n/)
        if (newline < 0) break
        const line = buffered.slice(0, newline)
        buffered = buffered.slice(newline + (buffered.startsWith('\r\n', newline) ? 2 : 1))
        if (line === '') {
          if (data.length > 0 || event !== '') yield { event: event === '' ? 'message' : event, data: data.join('\n'), id }
          event = ''
          data = []
          id = undefined
          continue
        }
        if (line.startsWith(':')) continue
        const colon = line.indexOf(':')
        const field = colon < 0 ? line : line.slice(0, colon)
        let value = colon < 0 ? '' : line.slice(colon + 1)
        if (value.startsWith(' ')) value = value.slice(1)
        if (field === 'event') event = value
        else if (field === 'data') data.push(value)
        else if (field === 'id') id = value
      }
    }
  } finally {
    reader.releaseLock()
    await body.cancel().catch(() => undefined)
  }
}

export async function* tailEvents(client: BerthClient, id: string, options: TailOptions): AsyncGenerator<EventRecord, TailEnd | undefined> {
  let next = options.from ?? 0
  let delivered = 0
  let failuresInARow = 0
  const attempts = options.reconnectAttempts ?? 10
  const path = `/v1/sessions/${encodeURIComponent(id)}/events/stream`
  for (;;) {
    const query: Record<string, number> = { from: next }
    if (options.maxEvents !== undefined) query.max_events = options.maxEvents - delivered
    if (options.idleTimeoutMs !== undefined) query.idle_timeout_ms = options.idleTimeoutMs
    try {
      const response = await client.openStream(path, query, {}, options.signal)
      if (response.body === null) throw new BerthConnectionError(`GET ${path}`, new Error('no body'))
      for await (const message of parseSse(response.body)) {
        if (message.event === 'event') {
          const record = JSON.parse(message.data) as EventRecord
          // A resumed stream starts at `next`; anything older is not delivered twice.
          if (record.seq < next) continue
          next = record.seq + 1
          delivered++
          failuresInARow = 0
          yield record
        } else if (message.event === 'error') {
          const body: unknown = JSON.parse(message.data)
          throw berthErrorFromResponse(statusOf(body), body, `GET ${path}`)
        } else if (message.event === 'end') {
          return JSON.parse(message.data) as TailEnd
        }
      }
      // The server ended the stream without `end` (a restart, a proxy): resume.
      throw new BerthConnectionError(`GET ${path}`, new Error('stream ended'))
    } catch (error) {
      if (options.signal?.aborted) return undefined
      const resumable = error instanceof BerthConnectionError || (error instanceof BerthError && error.retryable) || isNetworkError(error)
      if (!resumable) throw error
      failuresInARow++
      if (failuresInARow > attempts) throw error
      await sleep(options.reconnectDelayMs ?? 200, options.signal).catch(() => undefined)
      if (options.signal?.aborted) return undefined
    }
  }
}

function isNetworkError(error: unknown): boolean {
  return error instanceof TypeError && /terminated|fetch failed|network|socket/i.test(error.message)
}

/** The status of an error that arrived inside the stream, from its code (for the typed class). */
function statusOf(body: unknown): number {
  const code = typeof body === 'object' && body !== null ? (body as { code?: unknown }).code : undefined
  switch (code) {
    case 'not_found': return 404
    case 'unauthenticated': return 401
    case 'forbidden': return 403
    case 'rate_limited': return 429
    case 'timeout':
    case 'unavailable': return 503
    default: return 500
  }
}
