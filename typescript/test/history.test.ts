/**
 * Reading other frameworks' sessions (issue 54, items 3 and 4): sessions the Python
 * drop-ins wrote (their committed exports), imported into a fresh `berth serve`, read by
 * `conversation()` — the neutral reading, the same as Python's `berth.history` — and by
 * `harnessHistory()` as DeepSeek Harness events, which the harness's own `Session` must
 * take as a seed and derive the same conversation from. A harness-written session (both
 * layouts) is read the same way, and the matrix's harness fixture
 * (`scripts/dropins/matrix/fixtures/dsh.jsonl`, by `fixtures/capture-matrix-dsh.mjs`)
 * agrees with the matrix's expectation as every other framework's does.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { KNOWN_SESSION_EVENT_TYPES, Session, SessionId, type SessionEvent as HarnessEvent } from '@deepseek-ai/dsh-session'
import type { Message as HarnessMessage } from '@deepseek-ai/dsh-llm'
import { BerthClient, READ_PAGE_MAX, argumentsValue, contentText, conversation, readConversation, type ConversationItem } from '../src/index.js'
import { BerthHandlePersistence, VOCABULARY_TEXT_MAX, berthEvent, harnessHistory, harnessHistoryOfEvents, type HarnessHistory } from '../src/dsh/index.js'
import { startBerthServer, type BerthServer } from './support/berth-server.js'

const here = dirname(fileURLToPath(import.meta.url))
const dropins = resolve(here, '../../scripts/dropins')
const matrixFixtures = resolve(dropins, 'matrix/fixtures')

/** The matrix's neutral form (`scripts/dropins/matrix/scenario.py`'s `expectation`). */
type Neutral = Array<
  | { role: string; text: string; tool_calls: Array<{ call_id: string; name: string; arguments: unknown }> }
  | { result: { call_id: string; name: string | null; output: string; is_error: boolean } }
>
interface Expectation { framework: string; session_id: string; conversation: Neutral }

function neutral(items: readonly ConversationItem[]): Neutral {
  return items.map((item) =>
    item.kind === 'tool-result'
      ? { result: { call_id: item.callId, name: item.name ?? null, output: item.output, is_error: item.isError } }
      : { role: item.role, text: item.text, tool_calls: item.toolCalls.map((call) => ({ call_id: call.callId, name: call.name, arguments: call.arguments })) },
  )
}

/**
 * The conversation the harness derives from a seed (`Session.create` validates it, as a
 * harness app's `ctx.sessions.create(id, { seed })` does), in the neutral form.
 */
function harnessNeutral(history: HarnessHistory, id: string): Neutral {
  const session = Session.create(SessionId(id), history.events as unknown as HarnessEvent[])
  const names = new Map<string, string>()
  const out: Neutral = []
  for (const message of session.deriveMessages() as HarnessMessage[]) {
    const first = message.content[0]
    if (first?.type === 'tool-result') {
      out.push({ result: { call_id: first.toolCallId, name: names.get(first.toolCallId) ?? null, output: contentText(first.content).text, is_error: first.isError === true } })
      continue
    }
    const calls = message.content.flatMap((block) => (block.type === 'tool-call' ? [block] : []))
    for (const call of calls) names.set(call.id, call.name)
    out.push({
      role: message.role,
      text: contentText(message.content.filter((block) => block.type !== 'tool-call')).text,
      tool_calls: calls.map((call) => ({ call_id: call.id, name: call.name, arguments: argumentsValue(call.arguments) })),
    })
  }
  return out
}

/** A Python drop-in's export, imported under the key's tenant (the exports name `acme`). */
async function importExport(client: BerthClient, path: string): Promise<string> {
  const imported = await client.importSessions(readFileSync(path, 'utf8'))
  expect(imported.sessions).toHaveLength(1)
  return (imported.sessions[0] as { header: { id: string } }).header.id
}

let server: BerthServer
let acme: BerthClient
let dsh: BerthClient
const MATRIX = ['openai', 'langgraph', 'adk', 'smolagents', 'dsh'] as const
/** The berth id each matrix fixture was imported as. */
const matrixIds = new Map<string, string>()

beforeAll(async () => {
  server = await startBerthServer(['--rate-per-tenant', '0'])
  // The tenants and users the fixtures were written by.
  acme = new BerthClient({ baseUrl: server.url, apiKey: server.createKey('acme', 'alice', 'service') })
  dsh = new BerthClient({ baseUrl: server.url, apiKey: server.createKey('dsh', 'agent', 'service') })
  for (const framework of MATRIX) matrixIds.set(framework, await importExport(acme, resolve(matrixFixtures, `${framework}.jsonl`)))
})

afterAll(async () => {
  await server?.stop()
})

describe('the matrix: one conversation written by every drop-in', () => {
  const expectations = Object.fromEntries(
    MATRIX.map((framework) => [framework, JSON.parse(readFileSync(resolve(matrixFixtures, `${framework}.expect.json`), 'utf8')) as Expectation]),
  )

  it('the harness fixture expects what every framework expects', () => {
    for (const framework of MATRIX) expect(expectations[framework]?.conversation).toEqual(expectations.openai?.conversation)
  })

  it.each(MATRIX)('%s: conversation() and harnessHistory() read the expected texts, calls, arguments and outputs', async (framework) => {
    const want = expectations[framework] as Expectation
    const id = matrixIds.get(framework) as string
    expect(id).toBe(want.session_id)
    expect(neutral(await conversation(acme, id))).toEqual(want.conversation)

    const history = await harnessHistory(acme, id)
    expect(history.system).toEqual([])
    expect(history.omitted).toEqual([])
    expect(harnessNeutral(history, `seeded-${framework}`)).toEqual(want.conversation)
    // Two calls, each a `tool/call` in the step of the message that asked for it.
    const calls = history.events.filter((event) => event.type === 'tool/call').map((event) => event.data)
    expect(calls).toEqual([
      { turn: 0, step: 0, callId: 'call-paris', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { turn: 0, step: 1, callId: 'call-rome', name: 'get_weather', arguments: '{"city":"Rome"}' },
    ])
  })

  it.each(MATRIX)('%s: the harness history, written as a new harness session on berth, reads back the same', async (framework) => {
    const want = expectations[framework] as Expectation
    const history = await harnessHistory(acme, want.session_id)
    const persistence = new BerthHandlePersistence({ client: acme, knownEventTypes: KNOWN_SESSION_EVENT_TYPES, runLeaseTtlMs: 5_000 })
    try {
      const handle = await persistence.create({ version: 0, id: `continued-${framework}`, createdAt: 1_796_650_000_000 })
      await handle.append(history.events)
      await handle.close()
      expect(neutral(await conversation(acme, persistence.berthId(`continued-${framework}`)))).toEqual(want.conversation)
    } finally {
      await persistence.close()
    }
  })
})

describe("the Python drop-ins' own example sessions", () => {
  const user = (text: string) => ({ role: 'user', text, tool_calls: [] })
  const assistant = (text: string, calls: Array<[string, string, unknown]> = []) => ({
    role: 'assistant',
    text,
    tool_calls: calls.map(([call_id, name, args]) => ({ call_id, name, arguments: args })),
  })
  const result = (call_id: string, name: string, output: string, is_error = false) => ({ result: { call_id, name, output, is_error } })
  const PARIS = "What's the weather in Paris?"
  const SUNNY = 'sunny and 21 °C in Paris'
  const ANSWER = 'It is sunny and 21 °C in Paris.'

  it('OpenAI Agents SDK, run hooks (example-hooks): JSON-text arguments parsed, a call written twice read once', async () => {
    const id = await importExport(acme, resolve(dropins, 'openai/fixtures/example-hooks.jsonl'))
    const turn = (call: string) => [user(PARIS), assistant('', [[call, 'get_weather', { city: 'Paris' }]]), result(call, 'get_weather', SUNNY), assistant(ANSWER)]
    expect(neutral(await conversation(acme, id))).toEqual([...turn('call-0'), ...turn('call-1')])
    const history = await harnessHistory(acme, id)
    expect(harnessNeutral(history, 'seeded-openai-hooks')).toEqual([...turn('call-0'), ...turn('call-1')])
    // Two turns, one per user message, each closed.
    expect(history.events.filter((event) => event.type === 'turn/end').map((event) => event.data)).toEqual([
      { turn: 0, reason: { kind: 'completed' } },
      { turn: 1, reason: { kind: 'completed' } },
    ])
  })

  it("ADK, the runner (example-runner): object arguments, ADK's {result} wrapping unwrapped", async () => {
    const id = await importExport(acme, resolve(dropins, 'adk/fixtures/example-runner.jsonl'))
    const turn = (call: string) => [user(PARIS), assistant('', [[call, 'get_weather', { city: 'Paris' }]]), result(call, 'get_weather', SUNNY), assistant(ANSWER)]
    const want = [...turn('adk-f63ec7d3-389f-43c0-9ec2-86c9d687f268'), ...turn('adk-7d13d7d2-63dc-4919-bc2e-08c9f6dcda0c')]
    expect(neutral(await conversation(acme, id))).toEqual(want)
    expect(harnessNeutral(await harnessHistory(acme, id), 'seeded-adk-runner')).toEqual(want)
  })

  it('smolagents (v2-weather-job): a call id reused in the next turn is a new call', async () => {
    const id = await importExport(acme, resolve(dropins, 'smolagents/fixtures/vocabulary/v2-weather-job.jsonl'))
    const turn = [user(PARIS), assistant('', [['call-1', 'get_weather', { city: 'Paris' }]]), result('call-1', 'get_weather', SUNNY), assistant(ANSWER)]
    expect(neutral(await conversation(acme, id))).toEqual([...turn, ...turn])
    expect(harnessNeutral(await harnessHistory(acme, id), 'seeded-smol-weather')).toEqual([...turn, ...turn])
  })

  it('LangGraph before the vocabulary (weather.jsonl: lg/* records only) holds no conversation to read', async () => {
    const id = await importExport(acme, resolve(dropins, 'langgraph/fixtures/weather.jsonl'))
    expect(await conversation(acme, id)).toEqual([])
    const history = await harnessHistory(acme, id)
    expect(history.events).toEqual([])
  })
})

describe('a harness-written session', () => {
  it('in the old layout (dsh-handle.jsonl, every event a dsh/event) reads through the harness mapping', async () => {
    const id = await importExport(dsh, resolve(here, 'fixtures/dsh-handle.jsonl'))
    expect(id).toBe('dsh.fixture-handle')
    const items = await conversation(dsh, id)
    const interrupted = (items[6] as { output: string }).output
    expect(interrupted).toMatch(/^The tool call was interrupted after it was recorded/u)
    expect(neutral(items)).toEqual([
      { role: 'user', text: "What's the weather in Paris?", tool_calls: [] },
      // The reasoning block is text to berth's readers (berth-core's content rules).
      { role: 'assistant', text: 'The user wants the weather: ask the tool.', tool_calls: [{ call_id: 'call-1', name: 'get_weather', arguments: { city: 'Paris' } }] },
      { result: { call_id: 'call-1', name: 'get_weather', output: 'sunny and 21 °C in Paris', is_error: false } },
      { role: 'assistant', text: 'It is sunny and 21 °C in Paris.', tool_calls: [] },
      { role: 'user', text: 'And in Tokyo? 🗼 "quoted" \\ back', tool_calls: [] },
      { role: 'assistant', text: '', tool_calls: [{ call_id: 'call-2', name: 'get_weather', arguments: { city: 'Tokyo' } }] },
      { result: { call_id: 'call-2', name: 'get_weather', output: interrupted, is_error: true } },
      { role: 'user', text: 'What is in this picture?\n[image]', tool_calls: [] },
    ])
    expect(items[7]?.kind === 'message' && items[7].unmapped).toEqual(['image'])

    // As harness history: the harness's own blocks (reasoning, the image) are kept as they were.
    const history = await harnessHistory(dsh, id)
    expect(history.omitted).toEqual([])
    const messages = Session.create(SessionId('seeded-handle'), history.events as unknown as HarnessEvent[]).deriveMessages() as HarnessMessage[]
    expect(messages.map((message) => message.content.map((block) => block.type))).toEqual([
      ['text'],
      ['reasoning', 'tool-call'],
      ['tool-result'],
      ['text'],
      ['text'],
      ['tool-call'],
      ['tool-result'],
      ['text', 'image'],
    ])
    expect(messages[7]?.content[1]).toEqual({ type: 'image', attachment: { attachmentId: 'att-1', mediaType: 'image/png', bytes: 1234, width: 64, height: 48, name: 'cat.png' } })
  })

  it('in the vocabulary layout (the matrix fixture) reads its own values back: text, calls, results', async () => {
    // Imported with the matrix's fixtures; here: the exact harness shapes of the seed.
    const history = await harnessHistory(acme, 'dsh.matrix-dsh')
    expect(history.events.map((event) => event.type)).toEqual([
      'turn/start', 'user/message',
      'step/start', 'assistant/message', 'tool/call', 'tool/result',
      'step/end', 'step/start', 'assistant/message', 'tool/call', 'tool/result',
      'step/end', 'step/start', 'assistant/message',
      'step/end', 'turn/end',
    ])
    expect(history.events[5]?.data).toEqual({
      turn: 0,
      step: 0,
      message: {
        id: 'berth-dsh.matrix-dsh-7',
        role: 'user',
        content: [{ type: 'tool-result', toolCallId: 'call-paris', content: [{ type: 'text', text: 'sunny, 21 °C at Paris-Orly' }] }],
        source: { kind: 'tool', callId: 'call-paris' },
      },
    })
  })
})

describe('the reading itself (events built by hand)', () => {
  it('a system message, an error result, unparseable arguments, a result with no call: what maps and what does not', () => {
    const events = [
      { type: 'system/message', data: { content: 'Be brief.' }, seq: 0 },
      { type: 'turn/start', data: { turn: 0 }, seq: 1 },
      { type: 'user/message', data: { content: [{ type: 'input_text', text: 'Hi' }, { type: 'input_image', filename: 'a.png' }] }, seq: 2 },
      { type: 'openai/item', data: { anything: true }, seq: 3 },
      { type: 'assistant/message', data: { content: '', tool_calls: [{ call_id: 'c1', name: 'run', arguments: 'not json' }] }, seq: 4 },
      { type: 'tool/call', data: { call_id: 'c1', name: 'run', arguments: 'not json' }, seq: 5 },
      { type: 'tool/result', data: { call_id: 'c1', content: { error: 'boom' }, is_error: true }, seq: 6 },
      { type: 'tool/result', data: { call_id: 'c1', content: 'again' }, seq: 7 },
      { type: 'tool/result', data: { call_id: 'nobody', content: [1, 2] }, seq: 8 },
    ]
    const items = readConversation(events)
    expect(neutral(items)).toEqual([
      { role: 'system', text: 'Be brief.', tool_calls: [] },
      { role: 'user', text: 'Hi\n[image: a.png]', tool_calls: [] },
      { role: 'assistant', text: '', tool_calls: [{ call_id: 'c1', name: 'run', arguments: 'not json' }] },
      { result: { call_id: 'c1', name: 'run', output: 'boom', is_error: true } },
      { result: { call_id: 'nobody', name: null, output: '[1,2]', is_error: false } },
    ])
    const history = harnessHistoryOfEvents(events, 's')
    expect(history.system).toEqual(['Be brief.'])
    expect(history.omitted).toEqual([
      'seq 0: a system message (rc.8 has no system event): in `system`',
      'seq 2: image shown as placeholder text',
      'seq 8: the result of call nobody, asked for in no step still open',
    ])
    // Arguments that were never JSON stay the model's text (the harness keeps text).
    expect(harnessNeutral(history, 'seeded-by-hand')).toEqual([
      { role: 'user', text: 'Hi\n[image: a.png]', tool_calls: [] },
      { role: 'assistant', text: '', tool_calls: [{ call_id: 'c1', name: 'run', arguments: 'not json' }] },
      { result: { call_id: 'c1', name: 'run', output: 'boom', is_error: true } },
    ])
  })

  it('a harness message too big for its fields (a note stands in) is read from its exact text', () => {
    const long = 'x'.repeat(VOCABULARY_TEXT_MAX + 10)
    const harness = { type: 'user/message', seq: 0, time: 1, data: { id: 'u', role: 'user', content: [{ type: 'text', text: long }], source: { kind: 'user' } } }
    const stored = berthEvent(harness, JSON.stringify(harness), 1)
    expect(stored.type).toBe('user/message')
    expect((stored.data as { content: unknown }).content).toMatch(/^\[user\/message: \d+ characters, kept whole in the harness event\]$/u)
    const items = readConversation([{ type: stored.type, data: stored.data, seq: 1 }])
    expect(neutral(items)).toEqual([{ role: 'user', text: long, tool_calls: [] }])
  })

  it('reads a long log page by page, never asking for more than a page', async () => {
    const id = (await acme.createSession({ id: 'long-conversation' })).header.id
    const total = READ_PAGE_MAX + 250
    for (let from = 0; from < total; from += 500) {
      const events = Array.from({ length: Math.min(500, total - from) }, (_, index) => ({ type: 'user/message', data: { content: `message ${from + index}` } }))
      await acme.appendEvents(id, { events })
    }
    const limits: number[] = []
    const counting = new BerthClient({
      baseUrl: server.url,
      apiKey: server.createKey('acme', 'alice', 'service'),
      fetch: (input, init) => {
        const url = new URL(input instanceof Request ? input.url : String(input))
        if (url.pathname.endsWith('/events')) limits.push(Number(url.searchParams.get('limit')))
        return fetch(input, init)
      },
    })
    const items = await conversation(counting, id)
    expect(items).toHaveLength(total)
    expect(items.at(-1)).toMatchObject({ role: 'user', text: `message ${total - 1}` })
    expect(limits.length).toBeGreaterThan(1)
    expect(Math.max(...limits)).toBeLessThanOrEqual(READ_PAGE_MAX)
  })
})

describe("the README's section on reading other frameworks' sessions", () => {
  it('its example runs as written (imports pointed at the sources) on the imported OpenAI session', async () => {
    const packageRoot = resolve(here, '..')
    const readme = readFileSync(join(packageRoot, 'README.md'), 'utf8')
    // `typescript` fences: this section's (test/readme.test.ts runs the `ts` ones).
    const blocks = [...readme.matchAll(/```typescript\n([\s\S]*?)```/g)].map((match) => match[1] as string)
    expect(blocks).toHaveLength(1)
    const source = (blocks[0] as string)
      .replaceAll("'berth-store/dsh'", `'${resolve(packageRoot, 'src/dsh/index.ts')}'`)
      .replaceAll("'berth-store'", `'${resolve(packageRoot, 'src/index.ts')}'`)
    const scratch = mkdtempSync(join(packageRoot, 'test', '.readme-history-'))
    try {
      writeFileSync(join(scratch, 'snippet.ts'), `${source}\nexport {}\n`)
      vi.stubEnv('BERTH_URL', server.url)
      vi.stubEnv('BERTH_API_KEY', server.createKey('acme', 'alice', 'service'))
      const log = vi.spyOn(console, 'log').mockImplementation(() => undefined)
      await import(pathToFileURL(join(scratch, 'snippet.ts')).href)
      const lines = log.mock.calls.map((call) => call.map((part) => (typeof part === 'string' ? part : JSON.stringify(part))).join(' '))
      log.mockRestore()
      expect(lines).toEqual([
        "user: What's the weather in Paris and in Rome? []",
        'assistant: Checking Paris first. ["get_weather({\\"city\\":\\"Paris\\"})"]',
        '  get_weather → sunny, 21 °C at Paris-Orly',
        'assistant:  ["get_weather({\\"city\\":\\"Rome\\"})"]',
        '  get_weather → cloudy, 18 °C at Roma-Fiumicino',
        'assistant: Paris is sunny, 21 °C; Rome is cloudy, 18 °C. []',
        '16 harness events; system prompts: 0; not carried: 0',
      ])
    } finally {
      vi.unstubAllEnvs()
      rmSync(scratch, { recursive: true, force: true })
    }
  })
})
