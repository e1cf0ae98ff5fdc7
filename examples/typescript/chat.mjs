// The TypeScript client (`berth-store`): a conversation kept in a berth session.
//
// Creates the session (or reopens it if it exists), appends a user message and the
// assistant's answer as one durable batch, and prints the whole history. Run it again
// with the same id and the history grows: every earlier exchange is read back from berth.
//
//   BERTH_URL=http://127.0.0.1:7420 BERTH_API_KEY=… node chat.mjs [SESSION_ID]
import { AlreadyExistsError, BerthClient } from 'berth-store'

const MESSAGES = new Set(['user/message', 'assistant/message'])
const sessionId = process.argv[2] ?? 'chat-demo'
const berth = new BerthClient({ baseUrl: process.env.BERTH_URL, apiKey: process.env.BERTH_API_KEY })

try {
  await berth.createSession({ id: sessionId, title: 'chat example' })
  console.log(`created session '${sessionId}'`)
} catch (error) {
  if (!(error instanceof AlreadyExistsError)) throw error
  console.log(`reopened session '${sessionId}'`)
}

/** The session's messages, oldest first (readAllEvents follows the pages of a long log). */
async function history() {
  const messages = []
  for await (const event of berth.readAllEvents(sessionId)) if (MESSAGES.has(event.type)) messages.push(event)
  return messages
}

const before = await history()
const exchange = before.length / 2 + 1
// One atomic, durable append: both messages are stored, or neither is. The client sends
// an idempotency key, so its own retries never store the batch twice. (A real app would
// ask its model here, with `before` as the context.)
const outcome = await berth.appendEvents(sessionId, {
  events: [
    { type: 'user/message', data: { content: `question ${exchange}: what do you remember?` } },
    { type: 'assistant/message', data: { content: `answer ${exchange}: the ${before.length} messages before this one.` } },
  ],
})
console.log(`stored at seqs ${outcome.first_seq}..${outcome.next_seq - 1}`)

const messages = await history()
console.log(`conversation '${sessionId}', ${messages.length} messages:`)
for (const event of messages) console.log(`  ${event.type.split('/')[0]}: ${event.data.content}`)
