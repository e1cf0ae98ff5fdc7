/**
 * The rc.8 seam, SIGKILLed while its tool runs (issue 52, item 5; Node 22): a child
 * process's SessionStore writes a live turn up to a durable `tool/call` through
 * `BerthCoordinatorBackend` and dies in the tool. The next process's `load` commits the
 * coordinator's own crash-repair closers; its model input carries the outcome-unknown
 * result in the harness's format; berth stores one `tool/call` for the call, closed by
 * that result, and its own repair refuses the session (no second repair).
 */
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { randomUUID } from 'node:crypto'
import { resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, expect, it, inject } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import { SessionStore, SessionId, deriveEventMessage } from '@deepseek-ai/dsh-session'
import { FormatUnsupportedError } from '../../src/index.js'
import { BerthCoordinatorBackend } from '../../src/dsh-coordinator/index.js'

const contexts: Context[] = []
afterAll(async () => {
  for (const ctx of contexts) await (ctx as unknown as { fiber: { dispose(): Promise<void> } }).fiber.dispose()
})

it("a SIGKILL mid-tool: load closes the turn with the coordinator's outcome-unknown result, the only repair", async () => {
  const namespace = `k${randomUUID().slice(0, 8)}.`
  const config = { baseUrl: inject('berthUrl'), apiKey: inject('berthServiceKey'), namespace }
  const script = resolve(dirname(fileURLToPath(import.meta.url)), '../fixtures/dsh-coordinator-tool-process.mjs')
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, BERTH_URL: config.baseUrl, BERTH_API_KEY: config.apiKey, DSH_NAMESPACE: namespace, DSH_SESSION: 'charge' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const first = await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next()
  if (first.done === true) throw new Error(`the harness process exited: ${stderr}`)
  expect(JSON.parse(first.value)).toEqual({ state: 'tool-running', events: 5 })
  child.kill('SIGKILL')

  const ctx = new Context()
  contexts.push(ctx)
  ctx.plugin(SessionStore)
  await ctx.plugin(BerthCoordinatorBackend, config)
  await new Promise((r) => setTimeout(r, 0))
  const persistence = ctx.get('sessionPersistence') as BerthCoordinatorBackend
  const loaded = await persistence.load(SessionId('charge'))
  expect(loaded.events.map((e) => e.type)).toEqual(['turn/start', 'user/message', 'step/start', 'assistant/message', 'tool/call', 'tool/result', 'step/end', 'turn/end'])
  const history = loaded.events.map((event) => deriveEventMessage(event)).filter((message) => message !== null)
  expect(history.at(-1)?.content[0]).toMatchObject({ type: 'tool-result', toolCallId: 'call-charge', isError: true })
  expect(JSON.stringify(history.at(-1)?.content)).toContain('Its outcome is unknown')

  const berthId = persistence.berthId(SessionId('charge'))
  const stored = (await persistence.client.readEvents(berthId, { from: 0 })).events
  expect(stored.filter((e) => e.type === 'tool/call').length).toBe(1)
  expect(stored.filter((e) => e.type === 'tool/result').map((e) => e.data)).toEqual([
    expect.objectContaining({ call_id: 'call-charge', is_error: true, error: { code: 'TOOL_OUTCOME_UNKNOWN', name: 'ToolOutcomeUnknownError' }, dsh: JSON.stringify(loaded.events[5]) }),
  ])
  expect(stored.at(-1)).toMatchObject({ type: 'turn/end', data: { turn: 1, reason: 'interrupted' } })
  await expect(persistence.client.resumeSession(berthId, { run_id: 'berth-resume' })).rejects.toBeInstanceOf(FormatUnsupportedError)
  expect(await persistence.client.nextSeq(berthId)).toBe(9)
})
