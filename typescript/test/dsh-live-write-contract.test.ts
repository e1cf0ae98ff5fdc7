/**
 * The live write path of the handle seam (`dsh.md` §3.2, 11 clauses) as berth's own
 * contract bodies, run against `BerthHandlePersistence` over a real `berth serve`. The
 * harness routes `session/event` into the owning handle; here that is `handle.publish`,
 * `session/flush` is `handle.flush`, `session/disposed` is `handle.close`, backend
 * teardown is `persistence.close`. Failures are injected by spying on the client's append,
 * so the server itself stays real.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import {
  BerthHandlePersistence,
  LIVE_WRITE_BATCH_MAX_BYTES,
  LIVE_WRITE_BATCH_MAX_DELAY_MS,
  SessionHandleClosedError,
  SessionReadOnlyError,
  type SessionHandle,
} from '../src/dsh/index.js'
import { event, freshNamespace, makePersistence, meta, seqs } from './support/dsh-fixtures.js'

let namespace: string
let persistence: BerthHandlePersistence
let warnings: { message: string; error: unknown }[]
const opened: BerthHandlePersistence[] = []

function fresh(): BerthHandlePersistence {
  const instance = makePersistence(namespace)
  opened.push(instance)
  return instance
}

async function storedSeqs(id: string): Promise<number[]> {
  const reader = fresh()
  if ((await reader.stat(id)) === undefined) return []
  return seqs(await (await reader.open(id, 'read')).read())
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

beforeEach(() => {
  namespace = freshNamespace()
  warnings = []
  persistence = makePersistence(namespace, { warn: (message, error) => warnings.push({ message, error }) })
  opened.push(persistence)
})

afterEach(async () => {
  vi.restoreAllMocks()
  await Promise.allSettled(opened.splice(0).map((p) => p.close()))
})

/** A flushed session with a handle, so the events below need no materialization. */
async function materializedHandle(id: string): Promise<SessionHandle> {
  const handle = await persistence.create(meta(id))
  await handle.flush()
  return handle
}

describe('live write path contract (dsh.md §3.2) on berth', () => {
  it('1 routes published events into the active write handle within one batching window', async () => {
    const handle = await materializedHandle('w1')
    // The moment the drain starts writing, seen at the client (the server stays real).
    const calledAt: number[] = []
    const real = persistence.client.appendEvents.bind(persistence.client)
    vi.spyOn(persistence.client, 'appendEvents').mockImplementation((id, body, options) => {
      calledAt.push(Date.now())
      return real(id, body, options)
    })
    const published = Date.now()
    handle.publish({ type: 'turn/start', seq: 0, time: 1, data: { turn: 0 } })
    handle.publish({ type: 'turn/end', seq: 1, time: 2, data: { turn: 0, reason: { kind: 'completed' } } })
    await vi.waitFor(async () => expect(await storedSeqs('w1')).toEqual([0, 1]), { timeout: 5_000, interval: 20 })
    // One batch for both events, written once the window (not earlier) had passed.
    expect(calledAt).toHaveLength(1)
    expect((calledAt[0] as number) - published).toBeGreaterThanOrEqual(LIVE_WRITE_BATCH_MAX_DELAY_MS - 2)
    const events = await (await fresh().open('w1', 'read')).read()
    expect(events.map((e) => [e.type, e.seq])).toEqual([['turn/start', 0], ['turn/end', 1]])
  })

  it('2 a session without an active write handle persists nothing', async () => {
    const handle = await persistence.create(meta('w2'))
    await handle.close()
    expect(() => handle.publish(event(0))).toThrow(SessionHandleClosedError)
    await persistence.flush()
    expect(await persistence.stat('w2')).toBeUndefined()
    // A read handle is no write path either.
    const other = await persistence.create(meta('w2b'))
    await other.append([event(0)])
    const reader = await persistence.open('w2b', 'read')
    expect(() => reader.publish(event(1))).toThrow(SessionReadOnlyError)
    await persistence.flush()
    expect(await storedSeqs('w2b')).toEqual([0])
  })

  it('3 flush drains immediately and surfaces a retained background failure', async () => {
    const handle = await materializedHandle('w3')
    const append = vi.spyOn(persistence.client, 'appendEvents').mockRejectedValue(new Error('injected write failure'))
    handle.publish(event(0))
    await vi.waitFor(() => expect(warnings.map((w) => w.message)).toContain('session-persistence: background write for session "w3" failed (buffered events retained)'), { timeout: 3_000 })
    await expect(handle.flush()).rejects.toThrow('injected write failure')
    append.mockRestore()
    await handle.flush()
    expect(await storedSeqs('w3')).toEqual([0])
  })

  it('3b a drain stored by berth whose answer was lost is stored exactly once by the retry', async () => {
    const handle = await materializedHandle('w3b')
    const real = persistence.client.appendEvents.bind(persistence.client)
    const append = vi.spyOn(persistence.client, 'appendEvents').mockImplementationOnce(async (id, body, options) => {
      await real(id, body, options)
      throw new Error('connection lost after the server stored the batch')
    })
    handle.publish(event(0))
    handle.publish(event(1))
    await vi.waitFor(() => expect(warnings).toHaveLength(1), { timeout: 3_000 })
    await handle.flush()
    expect(await storedSeqs('w3b')).toEqual([0, 1])
    // The retry carried the first attempt's idempotency key.
    const keys = append.mock.calls.map((call) => call[2]?.idempotencyKey)
    expect(keys).toHaveLength(2)
    expect(keys[0]).toBe(keys[1])
  })

  it('3c a direct append whose answer was lost, retried by the caller, is stored once', async () => {
    const handle = await materializedHandle('w3c')
    const real = persistence.client.appendEvents.bind(persistence.client)
    vi.spyOn(persistence.client, 'appendEvents').mockImplementationOnce(async (id, body, options) => {
      await real(id, body, options)
      throw new Error('connection lost after the server stored the batch')
    })
    await expect(handle.append([event(0), event(1)])).rejects.toThrow('connection lost')
    await handle.append([event(0), event(1)])
    await handle.append([event(2)])
    expect(await storedSeqs('w3c')).toEqual([0, 1, 2])
    expect(seqs(await handle.read())).toEqual([0, 1, 2])
  })

  it('4 service-level flush drains every active handle and aggregates the failures', async () => {
    const healthy = await materializedHandle('w4a')
    const failing = await materializedHandle('w4b')
    const real = persistence.client.appendEvents.bind(persistence.client)
    const append = vi.spyOn(persistence.client, 'appendEvents').mockImplementation((id, body, options) =>
      id.endsWith('w4b') ? Promise.reject(new Error('injected for w4b')) : real(id, body, options))
    healthy.publish(event(0))
    failing.publish(event(0))
    // No window elapsed: the service flush does the draining.
    const failure = await persistence.flush().then(() => undefined, (error: unknown) => error)
    expect(failure).toBeInstanceOf(AggregateError)
    expect((failure as AggregateError).errors).toHaveLength(1)
    expect(await storedSeqs('w4a')).toEqual([0])
    append.mockRestore()
    await persistence.flush()
    expect(await storedSeqs('w4b')).toEqual([0])
  })

  it('5 close (session disposal) drains buffered events and closes the handle', async () => {
    const handle = await materializedHandle('w5')
    handle.publish(event(0))
    await handle.close()
    expect(await storedSeqs('w5')).toEqual([0])
    await expect(handle.append([])).rejects.toThrow(/closed handle/)
  })

  it('6 a failing final drain on close is reported, and ownership is released anyway', async () => {
    const handle = await materializedHandle('w6')
    vi.spyOn(persistence.client, 'appendEvents').mockRejectedValue(new Error('final drain failed'))
    handle.publish(event(0))
    await expect(handle.close()).rejects.toThrow('final drain failed')
    vi.restoreAllMocks()
    const next = await persistence.open('w6', 'write')
    expect(await next.read()).toEqual([])
  })

  it('7 backend teardown drains buffered events through the close sweep', async () => {
    const handle = await materializedHandle('w7')
    handle.publish(event(0))
    await persistence.close()
    await expect(handle.read()).rejects.toBeInstanceOf(SessionHandleClosedError)
    expect(await storedSeqs('w7')).toEqual([0])
  })

  it('8 close itself surfaces a failing drain and still releases write ownership', async () => {
    const handle = await persistence.create(meta('w8'))
    vi.spyOn(persistence.client, 'appendEvents').mockRejectedValue(new Error('drain failed at close'))
    handle.publish(event(0))
    await expect(handle.close()).rejects.toThrow('drain failed at close')
    vi.restoreAllMocks()
    // Never materialized: the id is free again, with the same header.
    const again = await persistence.create(meta('w8'))
    await again.append([event(0)])
    expect(await storedSeqs('w8')).toEqual([0])
  })

  it('9 close normalizes a non-Error drain failure', async () => {
    const handle = await materializedHandle('w9')
    vi.spyOn(persistence.client, 'appendEvents').mockImplementation(() => Promise.reject('a bare string'))
    handle.publish(event(0))
    const failure = await handle.close().then(() => undefined, (error: unknown) => error)
    expect(failure).toBeInstanceOf(Error)
    expect((failure as Error).message).toBe('a bare string')
  })

  it('10 a failed drain retains order, quiets the timer, and recovers exactly once', async () => {
    const handle = await materializedHandle('w10')
    const append = vi.spyOn(persistence.client, 'appendEvents').mockRejectedValue(new Error('first drain fails'))
    handle.publish(event(0))
    await vi.waitFor(() => expect(append).toHaveBeenCalledTimes(1), { timeout: 3_000 })
    await vi.waitFor(() => expect(warnings).toHaveLength(1))
    handle.publish(event(1))
    handle.publish(event(2))
    handle.publish(event(3))
    await sleep(4 * LIVE_WRITE_BATCH_MAX_DELAY_MS)
    expect(append).toHaveBeenCalledTimes(1)
    append.mockRestore()
    const counting = vi.spyOn(persistence.client, 'appendEvents')
    await handle.flush()
    expect(await storedSeqs('w10')).toEqual([0, 1, 2, 3])
    // The retained batch went first, with its own key, then the rest: two appends.
    expect(counting).toHaveBeenCalledTimes(2)
  })

  it('11 a second write handle after close routes subsequent events', async () => {
    const first = await persistence.create(meta('w11'))
    first.publish(event(0))
    await first.flush()
    await first.close()
    const second = await persistence.open('w11', 'write')
    second.publish(event(1))
    await second.flush()
    expect(await storedSeqs('w11')).toEqual([0, 1])
  })

  it('the window is bounded in bytes: a full buffer drains before the window ends', async () => {
    const handle = await materializedHandle('wb')
    const append = vi.spyOn(persistence.client, 'appendEvents')
    const big = 'x'.repeat(64 * 1024)
    const count = Math.ceil(LIVE_WRITE_BATCH_MAX_BYTES / big.length) + 1
    const started = Date.now()
    for (let seq = 0; seq < count; seq++) handle.publish({ type: 'user/message', seq, time: 1, data: { text: big } })
    await vi.waitFor(() => expect(append).toHaveBeenCalled(), { timeout: 1_000, interval: 5 })
    expect(Date.now() - started).toBeLessThan(LIVE_WRITE_BATCH_MAX_DELAY_MS)
    await handle.flush()
    expect((await storedSeqs('wb')).length).toBe(count)
  })

  it('an append after published events stores them first, in order', async () => {
    const handle = await materializedHandle('wo')
    handle.publish(event(0))
    handle.publish(event(1))
    await handle.append([event(2)])
    expect(await storedSeqs('wo')).toEqual([0, 1, 2])
    expect(() => handle.publish(event(5))).toThrow(/expected 3/)
  })
})
