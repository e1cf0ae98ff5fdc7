/**
 * Any berth conversation as DeepSeek Harness history (issue 54): the neutral reading of a
 * session (`conversation`, `../history.ts`) — whichever framework wrote it — as the
 * harness's own event values (`@deepseek-ai/dsh-session`'s `SessionEventMap`, rc.8), a
 * seed a harness app can start a new harness session from (`Session.create(id, events)`,
 * `ctx.sessions.create(id, { seed })`). The way back of `vocabulary.ts`, which maps harness
 * events to berth's vocabulary:
 *
 * | reading | harness events |
 * |---|---|
 * | user `Message` | `turn/end` of the turn before (`completed`), `turn/start`, `user/message` (`source: {kind: 'user'}`) |
 * | assistant `Message` | `step/end` of the step before, `step/start`, `assistant/message` (its text and `tool-call` blocks), one `tool/call` per call |
 * | `ToolResult` | `tool/result` (one `tool-result` block, `isError`), in the step of its call |
 *
 * Every message gets a new id (`berth-<session>-<seq>`, seq of the berth event read) and an
 * assistant message the provenance given (default `{provider: 'berth', model: 'imported'}`).
 * Content: harness blocks berth stored (`text`, `reasoning`, `image` — a harness-written
 * session) are kept as they are; any other content becomes one `text` block of berth's
 * reading of it (parts shown as placeholders are listed in `omitted`). Call arguments
 * become JSON text, as the model wrote them.
 *
 * What does not map (reported in `omitted`, or by construction):
 * - system messages: rc.8 has no `system/message` event (the system prompt is
 *   `request/header`'s `system`, which the app's agent writes itself): their texts are in
 *   `system`, for the app to put into its prompt;
 * - a framework's own records (`openai/item`, `lg/*`, `adk/event`, `smol/step`,
 *   `model/call`) and, for a harness-written session, every event outside the
 *   conversation: `request/header`, `todo/write`, plugin events, usage, chunks, message
 *   ids and provenance, compaction's surface replacements (the reading shows what was
 *   said, not the surface a compaction left);
 * - the original turn and step boundaries and their end reasons: turns are rebuilt, one
 *   per user message, one step per assistant message, every turn `completed`;
 * - a result whose call was never read (it has no step to sit in) and a call without a
 *   result are kept as they are read: the harness's `interruptedTurnClosers` does not
 *   close a closed turn, so an app that wants one answered must append the result itself.
 * Read-only, pure apart from the paging read.
 */
import type { BerthClient, RequestOptions } from '../client.js'
import { conversation, readConversation, type ConversationEvent, type ConversationItem, type Message, type ToolResult } from '../history.js'
import type { SessionEvent } from './types.js'

/** Who an assistant message is attributed to (the harness's `AssistantProvenance`). */
export interface HarnessProvenance {
  readonly provider: string
  readonly model: string
}

export const IMPORTED_PROVENANCE: HarnessProvenance = { provider: 'berth', model: 'imported' }

export interface HarnessHistoryOptions extends RequestOptions {
  /** The provenance of every assistant message (default `IMPORTED_PROVENANCE`). */
  readonly provenance?: HarnessProvenance
  /** The `time` of events (default: the time of the berth event each was read from). */
  readonly timeMs?: number
}

/** A conversation as harness events, and what did not carry over. */
export interface HarnessHistory {
  /** Harness events, seq 0…, turns and steps balanced: a seed. */
  readonly events: SessionEvent[]
  /** The system messages' texts (no harness event holds one). */
  readonly system: string[]
  /** What did not carry over, one line each (`seq N: …`, seq of the berth event). */
  readonly omitted: string[]
}

type Block = Readonly<Record<string, unknown>>

/** Harness blocks berth keeps as they were: a harness-written message's own content. */
function harnessBlocks(content: unknown): Block[] | undefined {
  if (!Array.isArray(content) || content.length === 0) return undefined
  for (const block of content as unknown[]) {
    if (typeof block !== 'object' || block === null) return undefined
    const { type, text, attachment } = block as Block
    const keys = Object.keys(block).length
    const harnessText = (type === 'text' || type === 'reasoning') && typeof text === 'string' && keys === 2
    const harnessImage = type === 'image' && typeof attachment === 'object' && attachment !== null && keys === 2
    if (!harnessText && !harnessImage) return undefined
  }
  return content as Block[]
}

function textBlocks(text: string): Block[] {
  return text === '' ? [] : [{ type: 'text', text }]
}

function argumentsText(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value ?? {})
}

/** Builds the harness log item by item (one instance per history). */
class HarnessLog {
  readonly events: SessionEvent[] = []
  readonly system: string[] = []
  readonly omitted: string[] = []
  private turn = -1
  private step = -1
  /** Call id → the turn and step of the assistant message that asked for it. */
  private readonly callSteps = new Map<string, { turn: number; step: number }>()

  constructor(
    private readonly sessionId: string,
    private readonly options: HarnessHistoryOptions,
  ) {}

  add(item: ConversationItem): void {
    if (item.kind === 'tool-result') return this.result(item)
    if (item.role === 'system') {
      this.system.push(item.text)
      this.omitted.push(`seq ${item.seq}: a system message (rc.8 has no system event): in \`system\``)
      return
    }
    if (item.unmapped.length > 0 && harnessBlocks(item.content) === undefined) {
      this.omitted.push(`seq ${item.seq}: ${item.unmapped.join(', ')} shown as placeholder text`)
    }
    if (item.role === 'user') this.user(item)
    else this.assistant(item)
  }

  finish(): HarnessHistory {
    this.closeTurn()
    return { events: this.events, system: this.system, omitted: this.omitted }
  }

  private push(type: string, data: unknown, timeMs: number, surface = false): void {
    const time = this.options.timeMs ?? timeMs
    const event = { type, seq: this.events.length, time, data, ...(surface ? { surfaceOp: 'append' } : {}) }
    this.events.push(event)
  }

  private messageId(item: Message | ToolResult): string {
    return `berth-${this.sessionId}-${item.seq}`
  }

  private closeStep(timeMs: number): void {
    if (this.step >= 0) this.push('step/end', { turn: this.turn, step: this.step }, timeMs)
    this.step = -1
  }

  private closeTurn(timeMs = this.events.at(-1)?.time ?? 0): void {
    if (this.turn < 0 || this.events.at(-1)?.type === 'turn/end') return
    this.closeStep(timeMs)
    this.push('turn/end', { turn: this.turn, reason: { kind: 'completed' } }, timeMs)
  }

  private openTurn(timeMs: number): void {
    this.closeTurn(timeMs)
    this.turn = this.turn < 0 ? 0 : this.turn + 1
    this.step = -1
    this.push('turn/start', { turn: this.turn }, timeMs)
  }

  private user(item: Message): void {
    this.openTurn(item.timeMs)
    const content = harnessBlocks(item.content) ?? textBlocks(item.text)
    this.push('user/message', { id: this.messageId(item), role: 'user', content, source: { kind: 'user' } }, item.timeMs, true)
  }

  private assistant(item: Message): void {
    if (this.turn < 0 || this.events.at(-1)?.type === 'turn/end') this.openTurn(item.timeMs)
    const nextStep = this.step + 1
    this.closeStep(item.timeMs)
    this.step = nextStep
    this.push('step/start', { turn: this.turn, step: this.step }, item.timeMs)
    const calls = item.toolCalls.map((call) => ({ type: 'tool-call', id: call.callId, name: call.name, arguments: argumentsText(call.arguments) }))
    const content = [...(harnessBlocks(item.content) ?? textBlocks(item.text)), ...calls]
    const provenance = this.options.provenance ?? IMPORTED_PROVENANCE
    const message = { id: this.messageId(item), role: 'assistant', content, source: { kind: 'model', provider: provenance.provider, model: provenance.model } }
    this.push('assistant/message', { turn: this.turn, step: this.step, message }, item.timeMs, true)
    for (const call of calls) {
      this.callSteps.set(call.id, { turn: this.turn, step: this.step })
      this.push('tool/call', { turn: this.turn, step: this.step, callId: call.id, name: call.name, arguments: call.arguments }, item.timeMs)
    }
  }

  private result(item: ToolResult): void {
    const where = this.callSteps.get(item.callId)
    // The harness pairs a result with the call of its own step: one whose call is not in
    // the step still open has nowhere to go.
    if (where === undefined || where.turn !== this.turn || where.step !== this.step) {
      this.omitted.push(`seq ${item.seq}: the result of call ${item.callId}, asked for in no step still open`)
      return
    }
    this.callSteps.delete(item.callId)
    const content = harnessBlocks(item.content) ?? [{ type: 'text', text: item.output }]
    const block = { type: 'tool-result', toolCallId: item.callId, content, ...(item.isError ? { isError: true } : {}) }
    const message = { id: this.messageId(item), role: 'user', content: [block], source: { kind: 'tool', callId: item.callId } }
    this.push('tool/result', { turn: this.turn, step: this.step, message }, item.timeMs, true)
  }
}

/** The harness history of conversation items already read (`conversation`, `readConversation`). */
export function harnessHistoryOf(items: readonly ConversationItem[], sessionId: string, options: HarnessHistoryOptions = {}): HarnessHistory {
  const log = new HarnessLog(sessionId, options)
  for (const item of items) log.add(item)
  return log.finish()
}

/** The harness history of berth events already read (`EventRecord`s). */
export function harnessHistoryOfEvents(events: Iterable<ConversationEvent>, sessionId: string, options: HarnessHistoryOptions = {}): HarnessHistory {
  return harnessHistoryOf(readConversation(events), sessionId, options)
}

/**
 * Session `sessionId`'s conversation — written by any drop-in — as DeepSeek Harness
 * events, read through `client` page by page. Seed a new harness session with `events`.
 */
export async function harnessHistory(client: BerthClient, sessionId: string, options: HarnessHistoryOptions = {}): Promise<HarnessHistory> {
  return harnessHistoryOf(await conversation(client, sessionId, options), sessionId, options)
}
