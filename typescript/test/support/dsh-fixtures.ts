/** Fixtures of the handle-seam contract: headers, a one-turn log, persistences over the shared server. */
import { randomUUID } from 'node:crypto'
import { inject } from 'vitest'
import { BerthClient } from '../../src/index.js'
import { BerthHandlePersistence, type BerthHandlePersistenceOptions, type SessionEvent, type SessionHeader } from '../../src/dsh/index.js'

export function meta(id: string, cwd?: string): SessionHeader {
  return { version: 0, id, createdAt: 1000, isSeeded: false, ...(cwd === undefined ? {} : { cwd }) }
}

/** seq 0..5: one complete turn, shaped as the harness writes it (camelCase, reason objects). */
export function oneTurnLog(): SessionEvent[] {
  return [
    { type: 'turn/start', seq: 0, time: 1001, data: { turn: 0 } },
    { type: 'user/message', seq: 1, time: 1002, data: { id: 'm1', source: { kind: 'human' }, content: [{ type: 'text', text: 'hi' }] }, surfaceOp: 'append' },
    { type: 'step/start', seq: 2, time: 1003, data: { turn: 0, step: 0 } },
    { type: 'assistant/message', seq: 3, time: 1004, data: { turn: 0, step: 0, message: { id: 'a1', content: [{ type: 'text', text: 'hello' }] } } },
    { type: 'step/end', seq: 4, time: 1005, data: { turn: 0, step: 0 } },
    { type: 'turn/end', seq: 5, time: 1006, data: { turn: 0, reason: { kind: 'completed' } } },
  ]
}

export function secondTurn(from = 6): SessionEvent[] {
  return [
    { type: 'turn/start', seq: from, time: 2001, data: { turn: 1 } },
    { type: 'turn/end', seq: from + 1, time: 2002, data: { turn: 1, reason: { kind: 'aborted', reason: { kind: 'user' } } } },
  ]
}

export function event(seq: number, type = 'turn/start'): SessionEvent {
  return { type, seq, time: 5000 + seq, data: { turn: seq } }
}

export function serverClient(): BerthClient {
  return new BerthClient({ baseUrl: inject('berthUrl'), apiKey: inject('berthServiceKey') })
}

/** A namespace of its own per test, so tests share one server without seeing each other. */
export function freshNamespace(): string {
  return `t${randomUUID().slice(0, 8)}.`
}

export function makePersistence(namespace: string, options: Partial<BerthHandlePersistenceOptions> = {}): BerthHandlePersistence {
  return new BerthHandlePersistence({ client: serverClient(), namespace, runLeaseTtlMs: 2_000, ...options })
}

export function seqs(events: readonly SessionEvent[]): number[] {
  return events.map((e) => e.seq)
}
