// DeepSeek Harness session persistence on berth (`berth-store/dsh`, the handle seam).
//
// A harness session is an append-only log of harness events; BerthHandlePersistence keeps
// it in a berth session, one writer at a time across processes. This program plays the
// harness's agent loop for one turn, offline: a scripted model asks for a tool, the tool
// runs, the model answers. Every event goes through the write handle, in the harness's own
// vocabulary (@deepseek-ai/dsh-session). Run it again with the same id: the handle is
// reopened, the earlier turns are read back from berth, and the new turn follows them.
// berth stores each harness event as its own conversation vocabulary (turns, steps,
// messages, tool calls and results), the harness's exact event kept with it: see it with
// `berth sessions cat dsh.dsh-demo --transcript`, or on the inspector's page of the session.
//
//   BERTH_URL=http://127.0.0.1:7420 BERTH_API_KEY=… node dsh.mjs [SESSION_ID]   (a service key)
import { BerthHandlePersistence, SessionPersistenceNotFoundError } from 'berth-store/dsh'
import { KNOWN_SESSION_EVENT_TYPES, deriveEventMessage, interruptedTurnClosers } from '@deepseek-ai/dsh-session'

const sessionId = process.argv[2] ?? 'dsh-demo'
const persistence = new BerthHandlePersistence({
  client: { baseUrl: process.env.BERTH_URL, apiKey: process.env.BERTH_API_KEY },
  knownEventTypes: KNOWN_SESSION_EVENT_TYPES, // the harness's fail-closed vocabulary
  runLeaseTtlMs: 30_000,                      // a crashed writer frees the session after this
})

// Open for write (one writer across processes), or create the session on its first run.
let handle
try {
  handle = await persistence.open(sessionId, 'write')
} catch (error) {
  if (!(error instanceof SessionPersistenceNotFoundError)) throw error
  handle = await persistence.create({ version: 0, id: sessionId, createdAt: Date.now(), cwd: process.cwd() })
}
const earlier = await handle.read(0)
console.log(`session '${sessionId}': ${earlier.length} events restored from berth`)
// A turn a crashed process left open is closed by the harness's own repair.
const closers = interruptedTurnClosers(earlier)
if (closers.length > 0) await handle.append(closers)

const getWeather = ({ city }) => `sunny and 21 °C in ${city}`

/** Stands in for the LLM: asks for the tool, then answers from the tool's result. */
function scriptedModel(messages, callId) {
  const last = messages.at(-1)?.content[0]
  if (last?.type === 'tool-result') return [{ type: 'text', text: `It is ${last.content[0].text}.` }]
  return [{ type: 'tool-call', id: callId, name: 'get_weather', arguments: JSON.stringify({ city: 'Paris' }) }]
}

// The harness's loop for one turn, writing each event through the handle.
const log = [...earlier, ...closers]
const turn = log.filter((event) => event.type === 'turn/start').length
const model = { kind: 'model', provider: 'scripted', model: 'scripted' }
function record(type, data, extra = {}) {
  const event = { type, seq: log.length, time: Date.now(), data, ...extra }
  log.push(event)
  handle.publish(event) // write-behind: stored within 200 ms, or at the next flush
}

record('turn/start', { turn })
record('user/message', { id: `u${turn}`, role: 'user', source: { kind: 'user' },
  content: [{ type: 'text', text: "What's the weather in Paris?" }] }, { surfaceOp: 'append' })
await handle.flush() // the user's message is durable before the model is asked
for (let step = 0; ; step++) {
  record('step/start', { turn, step })
  const messages = log.map(deriveEventMessage).filter((message) => message !== null)
  const content = scriptedModel(messages, `call-${turn}-${step}`)
  record('assistant/message', { turn, step, message: { id: `a${turn}.${step}`, role: 'assistant', source: model, content } },
    { surfaceOp: 'append' })
  const calls = content.filter((block) => block.type === 'tool-call')
  for (const call of calls) {
    record('tool/call', { turn, step, callId: call.id, name: call.name, arguments: call.arguments })
    await handle.flush() // the call is durable before the tool runs
    const text = getWeather(JSON.parse(call.arguments))
    record('tool/result', { turn, step, message: { id: `r${turn}.${step}`, role: 'user', source: { kind: 'tool', callId: call.id },
      content: [{ type: 'tool-result', toolCallId: call.id, content: [{ type: 'text', text }] }] } }, { surfaceOp: 'append' })
  }
  record('step/end', { turn, step })
  if (calls.length === 0) break
}
record('turn/end', { turn, reason: { kind: 'completed' } })
await handle.close() // drains the write-behind window and releases the session

// The conversation, as the harness derives it from the stored log.
const reader = await persistence.open(sessionId, 'read')
const stored = await reader.read(0)
await reader.close()
await persistence.close()
const lines = stored.map(deriveEventMessage).filter((message) => message !== null).map((message) => {
  const block = message.content[0]
  if (block.type === 'tool-call') return `tool call: ${block.name}(${block.arguments})`
  if (block.type === 'tool-result') return `tool result: ${block.content[0].text}`
  return `${message.role}: ${block.text}`
})
console.log(`conversation '${sessionId}', ${lines.length} messages:`)
for (const line of lines) console.log(`  ${line}`)
