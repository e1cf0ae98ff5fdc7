/**
 * BerthCoordinatorBackend's storage hooks on their own (Node 22, a real `berth serve`):
 * retried batches whose answers were lost are stored once, the first batch included.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, expect, it, inject, vi } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import { SessionStore, type SessionEvent, type SessionHeader, type SessionId } from '@deepseek-ai/dsh-session'
import { BerthCoordinatorBackend } from '../../src/dsh-coordinator/index.js'

const contexts: Context[] = []
afterEach(async () => {
  vi.restoreAllMocks()
  for (const ctx of contexts.splice(0)) await (ctx as unknown as { fiber: { dispose(): Promise<void> } }).fiber.dispose()
})

async function backend(): Promise<BerthCoordinatorBackend> {
  const ctx = new Context()
  contexts.push(ctx)
  ctx.plugin(SessionStore)
  await ctx.plugin(BerthCoordinatorBackend, { baseUrl: inject('berthUrl'), apiKey: inject('berthServiceKey'), namespace: `b${randomUUID().slice(0, 8)}.` })
  await new Promise((r) => setTimeout(r, 0))
  return ctx.get('sessionPersistence') as BerthCoordinatorBackend
}

const meta = { version: 0, id: 'retry' as SessionId, createdAt: 1000 } as SessionHeader
const events = (from: number): SessionEvent[] => [
  { type: 'turn/start', seq: from, time: 1, data: { turn: from + 1 } },
  { type: 'turn/end', seq: from + 1, time: 2, data: { turn: from + 1, reason: { kind: 'completed' } } },
] as SessionEvent[]

it('an appendBatch whose answer was lost is stored once when the coordinator retries it (first and later batches)', async () => {
  const storage = await backend()
  const real = storage.client.appendEvents.bind(storage.client)
  const lose = (): void => {
    vi.spyOn(storage.client, 'appendEvents').mockImplementationOnce(async (id, body, options) => {
      await real(id, body, options)
      throw new Error('connection lost after the server stored the batch')
    })
  }
  lose()
  await expect(storage.appendBatch(meta, events(0), false)).rejects.toThrow('connection lost')
  await storage.appendBatch(meta, events(0), false)
  lose()
  await expect(storage.appendBatch(meta, events(2), true)).rejects.toThrow('connection lost')
  await storage.appendBatch(meta, events(2), true)
  const stored = await storage.loadStored('retry' as SessionId)
  expect(stored?.events.map((e) => e.seq)).toEqual([0, 1, 2, 3])
  expect(stored?.meta).toEqual({ ...meta, delegationDepth: 0 })
  // Other events at a taken seq are refused, not mistaken for a retry.
  await expect(storage.appendBatch(meta, events(2).map((e) => ({ ...e, time: 99 })) as SessionEvent[], true)).rejects.toThrow(/seq_conflict/)
})
