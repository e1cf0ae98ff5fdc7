/**
 * The mapping of harness events to berth's vocabulary (`src/dsh/vocabulary.ts`), table
 * tested. The inputs are harness events captured from the real packages (rc.8:
 * `Session.append`, `createUserMessage` / `createAssistantMessage` /
 * `createToolResultMessage`, `interruptedTurnClosers`, the coordinator's crash repair) in
 * `fixtures/dsh-fixtures.expected.json`, plus a few shapes the packages can make that no
 * run here made (a later harness's `system/message`, `max-tokens`, oversize events). Every
 * row also checks the round trip: the berth event gives back the exact text.
 */
import { readFileSync } from 'node:fs'
import { resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { KNOWN_SESSION_EVENT_TYPES, Session, SessionId, interruptedTurnClosers, type SessionEvent as HarnessEvent } from '@deepseek-ai/dsh-session'
import { CallId, createAssistantMessage, createToolResultMessage, createUserMessage } from '@deepseek-ai/dsh-llm'
import type { EventRecord } from '../src/client.js'
import type { SessionEvent } from '../src/dsh/index.js'
import { DSH_TEXT_KEY, VOCABULARY_TEXT_MAX, berthEvent, harnessEvent, harnessText, turnEndReason } from '../src/dsh/index.js'
import { freshNamespace, makePersistence, meta, serverClient } from './support/dsh-fixtures.js'

const fixtures = resolve(dirname(fileURLToPath(import.meta.url)), 'fixtures')
const captured = JSON.parse(readFileSync(resolve(fixtures, 'dsh-fixtures.expected.json'), 'utf8')) as Record<string, { events: string[] }>
const handleLog = (captured['dsh-handle.jsonl'] as { events: string[] }).events
const coordinatorLog = (captured['dsh-coordinator.jsonl'] as { events: string[] }).events

/** A captured harness event, by the log it is in and its seq. */
function at(log: readonly string[], seq: number): { text: string; event: HarnessEvent } {
  const text = log[seq] as string
  return { text, event: JSON.parse(text) as HarnessEvent }
}

/**
 * The berth event as stored: type, data without the text, and whether the text is there
 * (`dsh`) or the event is a boundary its fields reproduce exactly (`rebuilt`).
 */
function mapped(text: string, event: HarnessEvent): { type: string; fields: unknown; text?: 'dsh' | 'rebuilt'; ignorable?: boolean } {
  const body = berthEvent(event, text, event.time)
  expect(body.time).toBe(event.time)
  // The round trip: whatever the form, the stored event gives back the exact text, and the
  // parsed event the adapters hand the harness is that text's (key order included).
  const record = { seq: event.seq + 1, type: body.type, time: event.time, data: body.data } as EventRecord
  expect(harnessText(record)).toBe(text)
  expect(JSON.stringify(harnessEvent(record))).toBe(text)
  if (typeof body.data === 'string') return { type: body.type, fields: 'the exact text', ignorable: body.ignorable }
  const { [DSH_TEXT_KEY]: kept, ...fields } = body.data as Record<string, unknown>
  if (kept !== undefined) expect(kept).toBe(text)
  return { type: body.type, fields, text: kept === undefined ? 'rebuilt' : 'dsh', ...(body.ignorable === undefined ? {} : { ignorable: body.ignorable }) }
}

const OPAQUE = (ignorable = true) => ({ type: 'dsh/event', fields: 'the exact text', ignorable })
const UNKNOWN_RESULT = 'The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.'

describe('harness events captured from the real packages map to berth vocabulary, one event each', () => {
  const rows: [string, readonly string[], number, unknown][] = [
    ['turn/start (the harness numbers its turns): its fields are the whole event, no copy', handleLog, 0, { type: 'turn/start', fields: { turn: 0 }, text: 'rebuilt' }],
    ['request/header stays the harness\'s own', handleLog, 1, OPAQUE()],
    ['user/message: the harness message\'s content parts', handleLog, 2, { type: 'user/message', fields: { content: [{ type: 'text', text: "What's the weather in Paris?" }] }, text: 'dsh' }],
    ['step/start', handleLog, 3, { type: 'step/start', fields: { turn: 0, step: 0 }, text: 'rebuilt' }],
    ['assistant/message: tool-call blocks become tool_calls (arguments parsed), the rest stays content', handleLog, 4, {
      type: 'assistant/message',
      fields: { content: [{ type: 'reasoning', text: 'The user wants the weather: ask the tool.' }], tool_calls: [{ call_id: 'call-1', name: 'get_weather', arguments: { city: 'Paris' } }] },
      text: 'dsh',
    }],
    ['tool/call: the tool started', handleLog, 5, { type: 'tool/call', fields: { call_id: 'call-1', name: 'get_weather', arguments: { city: 'Paris' } }, text: 'dsh' }],
    ['tool/result: the tool-result block\'s own content', handleLog, 6, { type: 'tool/result', fields: { call_id: 'call-1', content: [{ type: 'text', text: 'sunny and 21 °C in Paris' }] }, text: 'dsh' }],
    ['step/end', handleLog, 7, { type: 'step/end', fields: { turn: 0, step: 0 }, text: 'rebuilt' }],
    ['assistant/message with text only', handleLog, 9, { type: 'assistant/message', fields: { content: [{ type: 'text', text: 'It is sunny and 21 °C in Paris.' }] }, text: 'dsh' }],
    ['turn/end completed: the reason object {kind} is the reason', handleLog, 11, { type: 'turn/end', fields: { turn: 0, reason: 'completed' }, text: 'rebuilt' }],
    ['user/message with quotes, backslashes and emoji', handleLog, 13, { type: 'user/message', fields: { content: [{ type: 'text', text: 'And in Tokyo? 🗼 "quoted" \\ back' }] }, text: 'dsh' }],
    ['assistant/message with a tool call only: empty content', handleLog, 15, { type: 'assistant/message', fields: { content: [], tool_calls: [{ call_id: 'call-2', name: 'get_weather', arguments: { city: 'Tokyo' } }] }, text: 'dsh' }],
    ['the harness\'s repair closer (interruptedTurnClosers): an outcome-unknown tool/result', handleLog, 17, {
      type: 'tool/result',
      fields: { call_id: 'call-2', content: [{ type: 'text', text: UNKNOWN_RESULT }], is_error: true, error: { code: 'TOOL_OUTCOME_UNKNOWN', name: 'ToolOutcomeUnknownError' } },
      text: 'dsh',
    }],
    ['its step/end closer', handleLog, 18, { type: 'step/end', fields: { turn: 1, step: 0 }, text: 'rebuilt' }],
    ['its turn/end closer: interrupted', handleLog, 19, { type: 'turn/end', fields: { turn: 1, reason: 'interrupted' }, text: 'rebuilt' }],
    ['user/message with an image part (readers show a placeholder)', handleLog, 21, {
      type: 'user/message',
      fields: { content: [{ type: 'text', text: 'What is in this picture?' }, { type: 'image', attachment: { attachmentId: 'att-1', mediaType: 'image/png', bytes: 1234, width: 64, height: 48, name: 'cat.png' } }] },
      text: 'dsh',
    }],
    ['todo/write stays the harness\'s own', handleLog, 22, OPAQUE()],
    ['a plugin\'s ignorable event stays the harness\'s own', handleLog, 23, OPAQUE()],
    ['turn/end aborted (by the user): the kind is the reason, the text keeps who aborted', handleLog, 24, { type: 'turn/end', fields: { turn: 2, reason: 'aborted' }, text: 'dsh' }],
    ['the coordinator\'s repair closer for a started tool', coordinatorLog, 16, {
      type: 'tool/result',
      fields: { call_id: 'call-rm', content: [{ type: 'text', text: UNKNOWN_RESULT }], is_error: true, error: { code: 'TOOL_OUTCOME_UNKNOWN', name: 'ToolOutcomeUnknownError' } },
      text: 'dsh',
    }],
    ['session/end-seed (the harness\'s seed boundary, not berth\'s fork marker) stays the harness\'s own', coordinatorLog, 19, OPAQUE()],
    ['a turn numbered from 1 keeps its number', coordinatorLog, 20, { type: 'turn/start', fields: { turn: 3 }, text: 'rebuilt' }],
  ]
  it.each(rows)('%s', (_name, log, seq, expected) => {
    const { text, event } = at(log, seq)
    expect(mapped(text, event)).toEqual(expected)
  })
})

describe('shapes no captured run made', () => {
  const event = (type: string, data: unknown, extra: Record<string, unknown> = {}): HarnessEvent => ({ type, seq: 3, time: 100, data, ...extra }) as unknown as HarnessEvent
  const rows: [string, HarnessEvent, unknown][] = [
    ['system/message of later harness versions: {turn, step, message}', event('system/message', { turn: 0, step: 0, message: { id: 's', role: 'system', content: [{ type: 'text', text: 'Be brief.' }], source: { kind: 'plugin', plugin: 'prompt' } } }, { surfaceOp: 'append' }),
      { type: 'system/message', fields: { content: [{ type: 'text', text: 'Be brief.' }] }, text: 'dsh' }],
    ['turn/end max-tokens (berth takes the hyphenated spelling)', event('turn/end', { turn: 4, reason: { kind: 'max-tokens' } }), { type: 'turn/end', fields: { turn: 4, reason: 'max-tokens' }, text: 'rebuilt' }],
    ['turn/end error: the failure stays in the text', event('turn/end', { turn: 4, reason: { kind: 'error', error: { message: 'boom', code: 'UNKNOWN' } } }), { type: 'turn/end', fields: { turn: 4, reason: 'error' }, text: 'dsh' }],
    ['a boundary with more than its fields (an envelope flag) keeps its text', event('turn/start', { turn: 2 }, { ignorable: true }), { type: 'turn/start', fields: { turn: 2 }, text: 'dsh' }],
    ['a boundary whose data has more than its fields keeps its text', event('step/start', { step: 1, turn: 2 }), { type: 'step/start', fields: { turn: 2, step: 1 }, text: 'dsh' }],
    ['a turn that is not a non-negative integer stays the harness\'s own', event('turn/start', { turn: -1 }), OPAQUE()],
    ['a step without a number stays the harness\'s own', event('step/start', { turn: 1 }), OPAQUE()],
    ['a tool/call without a call id stays the harness\'s own', event('tool/call', { turn: 1, step: 1, name: 'ls', arguments: '{}' }), OPAQUE()],
    ['a tool call whose arguments are not JSON keeps their text', event('tool/call', { turn: 1, step: 1, callId: 'c', name: 'ls', arguments: '{not json' }), { type: 'tool/call', fields: { call_id: 'c', name: 'ls', arguments: '{not json' }, text: 'dsh' }],
    ['a tool-call block without an id is left out of tool_calls', event('assistant/message', { turn: 1, step: 1, message: { id: 'a', role: 'assistant', content: [{ type: 'tool-call', name: 'ls', arguments: '{}' }] } }),
      { type: 'assistant/message', fields: { content: [] }, text: 'dsh' }],
    ['a tool result without the error fields', event('tool/result', { turn: 1, step: 1, message: { id: 'r', role: 'user', source: { kind: 'tool', callId: 'c' }, content: [{ type: 'tool-result', toolCallId: 'c', isError: true, content: [{ type: 'text', text: 'denied' }] }] } }),
      { type: 'tool/result', fields: { call_id: 'c', content: [{ type: 'text', text: 'denied' }], is_error: true }, text: 'dsh' }],
    ['an assistant chunk stays the harness\'s own', event('assistant/chunk', { turn: 1, step: 1, chunk: { type: 'text-delta', index: 0, text: 'h' } }), OPAQUE()],
    ['a required event of an unknown type stays the harness\'s own (its ignorable flag is the harness\'s, inside the text)', event('mystery/event', {}), OPAQUE()],
    ['a tool call whose arguments nest deeper than berth takes keeps only its text', event('tool/call', { turn: 1, step: 1, callId: 'c', name: 'deep', arguments: `${'['.repeat(120)}${']'.repeat(120)}` }), OPAQUE()],
    ['a message holding a lone surrogate (berth\'s strict JSON refuses one outside the text) keeps only its text', event('user/message', { id: 'u', role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text: 'cut \ud83d' }] }), OPAQUE()],
  ]
  it.each(rows)('%s', (_name, harness, expected) => {
    expect(mapped(JSON.stringify(harness), harness)).toEqual(expected)
  })

  it('a boundary is rebuilt from its berth event: harness seq = berth seq − 1, the berth time', () => {
    const record = { seq: 8, type: 'turn/end', time: 1234, data: { turn: 3, reason: 'completed' } } as EventRecord
    expect(harnessText(record)).toBe('{"type":"turn/end","seq":7,"time":1234,"data":{"turn":3,"reason":{"kind":"completed"}}}')
  })

  it(`an event over ${VOCABULARY_TEXT_MAX} characters keeps its content once, in the text; a note stands in`, () => {
    const long = 'x'.repeat(VOCABULARY_TEXT_MAX)
    const harness = event('user/message', { id: 'u', role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text: long }] }, { surfaceOp: 'append' })
    const text = JSON.stringify(harness)
    const result = mapped(text, harness)
    expect(result).toEqual({ type: 'user/message', fields: { content: `[user/message: ${text.length} characters, kept whole in the harness event]` }, text: 'dsh' })
  })

  it("a caller's mutable content is copied at admission; the harness's frozen content is kept by reference", () => {
    const content = [{ type: 'text', text: 'before' }]
    const harness = event('user/message', { id: 'u', role: 'user', source: { kind: 'user' }, content })
    const copied = berthEvent(harness, JSON.stringify(harness), 100, true)
    content[0] = { type: 'text', text: 'after' }
    expect((copied.data as { content: unknown }).content).toEqual([{ type: 'text', text: 'before' }])
    const frozen = Object.freeze([Object.freeze({ type: 'text', text: 'kept' })])
    const kept = berthEvent(event('user/message', { content: frozen }), '{}', 100, true)
    expect((kept.data as { content: unknown }).content).toBe(frozen)
  })

  it('reasons: the kind of a reason object, a string as it is, anything else "unknown"', () => {
    expect(turnEndReason({ kind: 'blocked' })).toBe('blocked')
    expect(turnEndReason({ kind: 'max-tokens' })).toBe('max-tokens')
    expect(turnEndReason('completed')).toBe('completed')
    expect(turnEndReason({})).toBe('unknown')
    expect(turnEndReason(undefined)).toBe('unknown')
  })

  it('a berth event no adapter wrote holds no harness text', () => {
    const record = (type: string, data: unknown): EventRecord => ({ seq: 5, type, time: 1, data }) as EventRecord
    expect(harnessText(record('tool/result', { call_id: 'c', content: 'x', is_error: true }))).toBeUndefined() // berth's own closer
    expect(harnessText(record('turn/end', { turn: 1 }))).toBeUndefined()
    expect(harnessText(record('session/end-seed', {}))).toBeUndefined() // a berth fork's marker
    expect(harnessText(record('dsh/event', { json: '{}' }))).toBeUndefined()
    expect(harnessText(record('dsh/event', '{"type":"x"}'))).toBe('{"type":"x"}') // the old layout
  })
})

it('every message, tool, turn and step event the real packages make today maps to the vocabulary (no fallback)', () => {
  // Made afresh on each run, so a change in the pinned packages' shapes shows here.
  const session = Session.create(SessionId('live-shapes'))
  const model = { provider: 'p', model: 'm' }
  session.append('turn/start', { turn: 0 })
  session.append('user/message', createUserMessage({ content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } }), { surfaceOp: 'append' })
  session.append('step/start', { turn: 0, step: 0 })
  session.append('assistant/message', { turn: 0, step: 0, message: createAssistantMessage({ content: [{ type: 'tool-call', id: CallId('c1'), name: 'ls', arguments: '{}' }, { type: 'tool-call', id: CallId('c2'), name: 'cat', arguments: '{"path":"a"}' }], source: model }) }, { surfaceOp: 'append' })
  session.append('tool/call', { turn: 0, step: 0, callId: CallId('c1'), name: 'ls', arguments: '{}' })
  session.append('tool/result', { turn: 0, step: 0, message: createToolResultMessage({ callId: CallId('c1'), content: [{ type: 'text', text: 'a' }], isError: false }) }, { surfaceOp: 'append' })
  session.append('tool/call', { turn: 0, step: 0, callId: CallId('c2'), name: 'cat', arguments: '{"path":"a"}' })
  const events = [...session.events, ...interruptedTurnClosers(session.events)]
  expect(events.map((e) => e.type)).toEqual([
    'turn/start', 'user/message', 'step/start', 'assistant/message', 'tool/call', 'tool/result', 'tool/call',
    'tool/result', 'step/end', 'turn/end', // the harness's closers: c2 started, outcome unknown
  ])
  for (const harness of events) {
    expect(KNOWN_SESSION_EVENT_TYPES.has(harness.type)).toBe(true)
    const text = JSON.stringify(harness)
    const body = berthEvent(harness, text, harness.time)
    expect(body.type).toBe(harness.type)
    expect(body.ignorable).toBeUndefined()
    // Boundaries are stored as their fields alone (the harness's envelope order is what they rebuild); the rest keep their text.
    const boundary = /^(turn|step)\//.test(harness.type)
    expect((body.data as Record<string, unknown>)[DSH_TEXT_KEY]).toBe(boundary ? undefined : text)
    expect(harnessText({ seq: harness.seq + 1, type: body.type, time: harness.time, data: body.data } as EventRecord)).toBe(text)
  }
  const closer = berthEvent(events[7] as HarnessEvent, JSON.stringify(events[7]), 1).data as Record<string, unknown>
  expect(closer).toMatchObject({ call_id: 'c2', is_error: true, error: { code: 'TOOL_OUTCOME_UNKNOWN', name: 'ToolOutcomeUnknownError' } })
})

it('stored on berth and read back: every form, the lone surrogate too, gives the harness exactly its events', async () => {
  const persistence = makePersistence(freshNamespace(), { knownEventTypes: KNOWN_SESSION_EVENT_TYPES })
  const events = handleLog.map((text) => JSON.parse(text) as HarnessEvent)
  const odd = { type: 'user/message', seq: events.length, time: 5, surfaceOp: 'append', data: { id: 'u', role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text: 'cut \ud83d' }] } }
  const all = [...events, odd] as unknown as SessionEvent[]
  const writer = await persistence.create(meta('forms'))
  await writer.append(all.slice(0, 10))
  for (const event of all.slice(10)) writer.publish(event)
  await writer.close()
  const reader = await persistence.open('forms', 'read')
  expect((await reader.read(0)).map((e) => JSON.stringify(e))).toEqual(all.map((e) => JSON.stringify(e)))
  await reader.close()
  await persistence.close()
  const stored = (await serverClient().readEvents(persistence.berthId('forms'), { from: 0 })).events
  expect(stored.map((e) => e.type)).toEqual(['dsh/header', ...all.slice(0, -1).map((e) => (['request/header', 'todo/write', 'plugin/note'].includes(e.type) ? 'dsh/event' : e.type)), 'dsh/event'])
})
