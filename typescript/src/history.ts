/**
 * Any berth conversation, read neutrally (issue 54): every drop-in — the OpenAI Agents
 * SDK's, LangGraph's, ADK's, smolagents' and DeepSeek Harness's — writes berth's
 * conversation vocabulary beside its framework's own record, so one framework can read
 * what another wrote. `conversation(client, sessionId)` is that reading, in log order:
 * `Message`s (user, system, assistant with its `ToolCall`s) and `ToolResult`s. It is the
 * same reading as the Python package's `berth.history.conversation`
 * (`python/berth/history/_read.py`), so both sides agree on a session:
 *
 * | event | reading |
 * |---|---|
 * | `user/message`, `system/message` | a `Message` of that role, its `content` as text |
 * | `assistant/message {content, tool_calls?}` | an assistant `Message` with its calls |
 * | `tool/call {call_id, name, arguments}` | a call of the assistant message just before it, else of a new assistant message without text, which the model's message takes as its own when it comes next (a call recorded before its step's message: the OpenAI SDK's run hooks); nothing when its `call_id` was read already in this turn |
 * | `tool/result {call_id, content, is_error?}` | a `ToolResult` (once per call) |
 * | `dsh/event` holding a harness message, call or result | as the vocabulary event the harness mapping makes of it (harness sessions written before that mapping) |
 * | a harness event over `VOCABULARY_TEXT_MAX` (its fields hold a note) | as the vocabulary event of its exact text, under `dsh` |
 * | `turn/*`, `step/*`, framework records, anything else | nothing (`turn/start` begins a new scope of call ids) |
 *
 * A call's `arguments` are a JSON value: a string holding a JSON object or array (the
 * OpenAI SDK's, the harness's) is parsed. A result's `output` is its content's text, and
 * ADK's `{"result": s}` / `{"error": s}` wrapping gives `s`. Text follows berth's one
 * reading of `content` (`crates/berth-core/src/content.rs`): a string is itself, typed
 * parts give their text, images, files and audio a placeholder (named in `unmapped`).
 * Read-only, and pure apart from the paging read.
 */
import type { BerthClient, RequestOptions } from './client.js'
import { DSH_EVENT_TYPE, DSH_TEXT_KEY, VOCABULARY_TEXT_MAX, vocabularyFields } from './dsh/vocabulary.js'

/** A tool call the assistant asked for: `arguments` is a JSON value. */
export interface ToolCall {
  readonly callId: string
  readonly name: string
  readonly arguments: unknown
}

export type MessageRole = 'user' | 'system' | 'assistant'

/**
 * A text message. `text` is berth's reading of `content` (kept raw beside it); `unmapped`
 * names the parts shown only as placeholders (`image`, `file`, `audio`, `refusal`, an
 * unknown part's type). `seq` and `timeMs` are the berth event it was read from.
 */
export interface Message {
  readonly kind: 'message'
  readonly role: MessageRole
  text: string
  readonly toolCalls: ToolCall[]
  content: unknown
  unmapped: string[]
  readonly seq: number
  readonly timeMs: number
}

/** A tool's result: `output` is its text; `name` is its call's tool name when the call was read. */
export interface ToolResult {
  readonly kind: 'tool-result'
  readonly callId: string
  readonly output: string
  readonly isError: boolean
  readonly name: string | undefined
  readonly content: unknown
  readonly seq: number
  readonly timeMs: number
}

export type ConversationItem = Message | ToolResult

/** The event fields the reader uses (an `EventRecord`, or one built by hand). */
export interface ConversationEvent {
  readonly type: string
  readonly data: unknown
  readonly seq?: number
  readonly time?: number
}

/** Nesting of content parts followed; deeper is shown as `[…]` (as berth-core's reader). */
export const CONTENT_DEPTH_MAX = 16
/** Characters of a name shown in a placeholder (`[file: …]`). */
export const LABEL_CHARS_MAX = 64

const ROLES: Readonly<Record<string, MessageRole>> = { 'user/message': 'user', 'system/message': 'system', 'assistant/message': 'assistant' }
/** The harness event types the vocabulary mapping turns into conversation events. */
const HARNESS_CONVERSATION_TYPES: ReadonlySet<string> = new Set(['user/message', 'system/message', 'assistant/message', 'tool/call', 'tool/result'])

type Fields = Record<string, unknown>

function isObject(value: unknown): value is Fields {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

// ---- content as text (berth-core `content::content_text`) ----

/** The text of one content value and the kinds of parts shown only as placeholders. */
export interface ContentText {
  readonly text: string
  readonly unmapped: string[]
}

/** The readable text of `content` — a string, typed parts, one part, any JSON value — by berth's rules. */
export function contentText(content: unknown): ContentText {
  const writer = new TextWriter()
  writer.value(content, 0)
  return { text: writer.lines.join('\n'), unmapped: writer.unmapped }
}

function oneLine(text: string, charsMax = LABEL_CHARS_MAX): string {
  // Whitespace runs become one space; control characters go (as berth-core's `one_line`).
  // eslint-disable-next-line no-control-regex
  const line = text.split(/\s+/u).filter((word) => word !== '').join(' ').replace(/[\u0000-\u001f\u007f-\u009f]/gu, '')
  const characters = [...line]
  return characters.length <= charsMax ? line : `${characters.slice(0, charsMax).join('')}…`
}

function fileName(part: Fields): string | undefined {
  const own = (value: Fields): string | undefined => {
    for (const key of ['filename', 'file_name', 'display_name', 'displayName', 'title']) {
      if (typeof value[key] === 'string') return value[key]
    }
    return undefined
  }
  return own(part) ?? (isObject(part.file) ? own(part.file) : undefined)
}

function uriName(data: Fields): string | undefined {
  const uri = data.file_uri ?? data.fileUri
  if (typeof uri !== 'string') return undefined
  const name = uri.slice(uri.lastIndexOf('/') + 1)
  return name === '' ? undefined : name
}

class TextWriter {
  readonly lines: string[] = []
  readonly unmapped: string[] = []

  push(text: string): void {
    if (text !== '') this.lines.push(text)
  }

  placeholder(kind: string, name: string | undefined): void {
    this.unmapped.push(kind)
    const label = name === undefined ? '' : oneLine(name)
    this.push(label === '' ? `[${kind}]` : `[${kind}: ${label}]`)
  }

  value(value: unknown, depth: number): void {
    if (depth > CONTENT_DEPTH_MAX) return this.push('[…]')
    if (value === null || value === undefined) return
    if (typeof value === 'string') return this.push(value)
    if (typeof value === 'boolean' || typeof value === 'number') return this.push(JSON.stringify(value))
    if (Array.isArray(value)) {
      for (const item of value) this.value(item, depth + 1)
      return
    }
    if (!isObject(value)) return
    if (typeof value.type === 'string') this.typedPart(value.type, value, depth)
    else this.untypedPart(value, depth)
  }

  typedPart(kind: string, part: Fields, depth: number): void {
    switch (kind) {
      case 'text':
      case 'input_text':
      case 'output_text': {
        const text = part.text
        // The Assistants API's `{value, annotations}`.
        return this.value(isObject(text) && 'value' in text ? text.value : text, depth + 1)
      }
      case 'refusal': {
        const reason = typeof part.refusal === 'string' ? part.refusal.trim() : ''
        this.unmapped.push('refusal')
        return this.push(reason === '' ? '[refusal]' : `[refusal] ${reason}`)
      }
      case 'input_image':
      case 'image_url':
      case 'image':
        return this.placeholder('image', fileName(part))
      case 'input_file':
      case 'file':
      case 'document':
        return this.placeholder('file', fileName(part))
      case 'input_audio':
      case 'audio':
        return this.placeholder('audio', fileName(part))
      default:
        return this.unknownPart(kind, part, depth)
    }
  }

  unknownPart(kind: string, part: Fields, depth: number): void {
    if (typeof part.text === 'string') return this.value(part.text, depth + 1)
    const nested = part.content ?? part.parts
    if (nested !== undefined && nested !== null) return this.value(nested, depth + 1)
    this.placeholder(oneLine(kind), typeof part.name === 'string' ? part.name : fileName(part))
  }

  untypedPart(part: Fields, depth: number): void {
    const field = (snake: string, camel: string): unknown => part[snake] ?? part[camel]
    if ('text' in part) return this.value(part.text, depth + 1)
    const data = field('inline_data', 'inlineData') ?? field('file_data', 'fileData')
    if (isObject(data)) {
      const mimeField = data.mime_type ?? data.mimeType
      const mime = typeof mimeField === 'string' ? mimeField : ''
      const name = fileName(data) ?? uriName(data)
      const kind = mime.split('/')[0] ?? ''
      if (kind === 'image' || kind === 'audio' || kind === 'video') return this.placeholder(kind, name)
      return this.placeholder('file', name ?? mime)
    }
    const call = field('function_call', 'functionCall')
    if (call !== undefined) return this.placeholder('function call', isObject(call) && typeof call.name === 'string' ? call.name : undefined)
    const response = field('function_response', 'functionResponse')
    if (response !== undefined) {
      return this.placeholder('function response', isObject(response) && typeof response.name === 'string' ? response.name : undefined)
    }
    const nested = part.parts ?? part.content
    if (nested !== undefined && nested !== null) return this.value(nested, depth + 1)
    if (Object.keys(part).length > 0) this.push(JSON.stringify(part))
  }
}

// ---- calls and results ----

/**
 * A call's arguments as a JSON value: a string holding a JSON object or array is parsed
 * (the OpenAI SDK and the harness keep the model's JSON text); anything else is itself.
 */
export function argumentsValue(raw: unknown): unknown {
  if (typeof raw === 'string' && /^\s*[[{]/u.test(raw)) {
    try {
      return JSON.parse(raw) as unknown
    } catch {
      return raw
    }
  }
  return raw === undefined ? null : raw
}

function looksLikeParts(content: unknown): boolean {
  const items = Array.isArray(content) ? content : [content]
  return items.length > 0 && items.every((item) => isObject(item) && ('type' in item || 'text' in item))
}

/** A result's text: a string itself; ADK's `{"result": s}` / `{"error": s}` as `s`; parts by berth's rules; other JSON as compact JSON. */
export function resultOutput(content: unknown): string {
  if (typeof content === 'string') return content
  if (isObject(content)) {
    const keys = Object.keys(content)
    const only = keys.length === 1 ? keys[0] : undefined
    if ((only === 'result' || only === 'error') && typeof content[only] === 'string') return content[only]
  }
  if (typeof content === 'object' && content !== null && !looksLikeParts(content)) return JSON.stringify(content)
  return contentText(content).text
}

function callOf(data: unknown): ToolCall | undefined {
  if (!isObject(data)) return undefined
  const { call_id: callId, name } = data
  if (typeof callId !== 'string' || callId === '' || typeof name !== 'string') return undefined
  return { callId, name, arguments: argumentsValue(data.arguments) }
}

// ---- the reader ----

/** Folds events into the conversation, one at a time, in log order (`items` so far). Pure. */
export class ConversationReader {
  readonly items: ConversationItem[] = []
  /** Call id → the message whose `toolCalls` hold it (this turn). */
  private calls = new Map<string, Message>()
  /** Messages made for a `tool/call` no message listed yet: the model's message that lists it (or none) fills them in. */
  private made = new Set<Message>()
  /** Call ids answered this turn. */
  private answered = new Set<string>()

  feed(event: ConversationEvent): void {
    const seq = event.seq ?? -1
    const timeMs = event.time ?? 0
    if (event.type === 'turn/start') return this.newTurn()
    if (event.type === DSH_EVENT_TYPE) return this.feedHarness(event.data, seq, timeMs)
    const data = event.data
    if (!isObject(data)) return
    // A harness event too big to repeat in its fields (a note stands in): read its exact text.
    const text = data[DSH_TEXT_KEY]
    if (typeof text === 'string' && text.length > VOCABULARY_TEXT_MAX && HARNESS_CONVERSATION_TYPES.has(event.type)) return this.feedHarness(text, seq, timeMs)
    const role = ROLES[event.type]
    if (role !== undefined) this.message(role, data, seq, timeMs)
    else if (event.type === 'tool/call') this.toolCall(data, seq, timeMs)
    else if (event.type === 'tool/result') this.toolResult(data, seq, timeMs)
  }

  /**
   * A new turn: call ids read before it no longer make a later call a repeat (a drop-in
   * may number calls per turn: smolagents' `call-1` in every turn).
   */
  private newTurn(): void {
    this.calls = new Map()
    this.made = new Set()
    this.answered = new Set()
  }

  /** A harness event berth kept whole (`dsh/event`): read as the vocabulary event the harness mapping makes of it. */
  private feedHarness(text: unknown, seq: number, timeMs: number): void {
    if (typeof text !== 'string') return
    let event: unknown
    try {
      event = JSON.parse(text)
    } catch {
      return
    }
    if (!isObject(event) || typeof event.type !== 'string') return
    if (event.type === 'turn/start') return this.newTurn()
    if (!HARNESS_CONVERSATION_TYPES.has(event.type)) return
    const fields = vocabularyFields({ type: event.type, data: event.data })
    if (fields !== undefined) this.feed({ type: event.type, data: fields, seq, time: timeMs })
  }

  private message(role: MessageRole, data: Fields, seq: number, timeMs: number): void {
    const read = contentText(data.content)
    const listed = role === 'assistant' && Array.isArray(data.tool_calls) ? data.tool_calls.map(callOf).filter((call) => call !== undefined) : []
    const made = role === 'assistant' ? this.madeFor(listed) : undefined
    if (made !== undefined) {
      // Its calls were read first, as a message without text: this is that message.
      made.text = read.text
      made.content = data.content
      made.unmapped = read.unmapped
      this.made.delete(made)
      this.addCalls(made, listed.filter((call) => !this.calls.has(call.callId)))
      return
    }
    const message: Message = { kind: 'message', role, text: read.text, toolCalls: [], content: data.content, unmapped: read.unmapped, seq, timeMs }
    this.addCalls(message, listed.filter((call) => !this.calls.has(call.callId)))
    const empty = data.content === undefined || data.content === null || data.content === '' || (Array.isArray(data.content) && data.content.length === 0)
    if (message.text !== '' || message.toolCalls.length > 0 || role !== 'assistant' || !empty) this.items.push(message)
  }

  /**
   * The message made for calls read before the model's message that asks for them, if
   * this is that message: one holding any of `calls`, or — a message listing none (the
   * OpenAI SDK's: its calls are items of their own) — the last item.
   */
  private madeFor(calls: readonly ToolCall[]): Message | undefined {
    for (const call of calls) {
      const holder = this.calls.get(call.callId)
      if (holder !== undefined && this.made.has(holder)) return holder
    }
    const last = this.items.at(-1)
    if (calls.length === 0 && last?.kind === 'message' && this.made.has(last)) return last
    return undefined
  }

  private addCalls(message: Message, calls: readonly ToolCall[]): void {
    for (const call of calls) {
      message.toolCalls.push(call)
      this.calls.set(call.callId, message)
    }
  }

  private toolCall(data: Fields, seq: number, timeMs: number): void {
    const call = callOf(data)
    if (call === undefined || this.calls.has(call.callId)) return
    const last = this.items.at(-1)
    if (last?.kind === 'message' && last.role === 'assistant') return this.addCalls(last, [call])
    const message: Message = { kind: 'message', role: 'assistant', text: '', toolCalls: [], content: null, unmapped: [], seq, timeMs }
    this.made.add(message)
    this.addCalls(message, [call])
    this.items.push(message)
  }

  private toolResult(data: Fields, seq: number, timeMs: number): void {
    const callId = data.call_id
    if (typeof callId !== 'string' || this.answered.has(callId)) return
    this.answered.add(callId)
    const holder = this.calls.get(callId)
    let name = holder?.toolCalls.find((call) => call.callId === callId)?.name
    if (name === undefined && typeof data.name === 'string' && data.name !== '') name = data.name
    this.items.push({
      kind: 'tool-result',
      callId,
      output: resultOutput(data.content),
      isError: data.is_error === true,
      name,
      content: data.content,
      seq,
      timeMs,
    })
  }
}

/** The conversation of events already read (`EventRecord`s, or `{type, data}` built by hand). */
export function readConversation(events: Iterable<ConversationEvent>): ConversationItem[] {
  const reader = new ConversationReader()
  for (const event of events) reader.feed(event)
  return reader.items
}

/**
 * The conversation of session `sessionId`, read through `client` page by page
 * (`readAllEvents`: pages of at most `READ_PAGE_MAX` events, never one unbounded read).
 */
export async function conversation(client: BerthClient, sessionId: string, options?: RequestOptions): Promise<ConversationItem[]> {
  const reader = new ConversationReader()
  for await (const record of client.readAllEvents(sessionId, {}, options)) reader.feed(record)
  return reader.items
}
