/**
 * Ownership across processes: a write handle is a berth run attached `serial` with
 * `on_busy: reject`. Real child processes (the built package), a real `berth serve`.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { createInterface } from 'node:readline'
import { resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { inject } from 'vitest'
import { SessionAlreadyOwnedError, SessionOwnershipLostError, type BerthHandlePersistence } from '../src/dsh/index.js'
import { freshNamespace, makePersistence, meta, oneTurnLog, serverClient, event } from './support/dsh-fixtures.js'

const writerScript = resolve(dirname(fileURLToPath(import.meta.url)), 'fixtures/writer-process.mjs')
const LEASE_MS = 1_500

interface Writer {
  readonly child: ChildProcessWithoutNullStreams
  next(): Promise<Record<string, unknown>>
  send(line: string): void
}

const children: ChildProcessWithoutNullStreams[] = []

function startWriter(namespace: string, id: string): Writer {
  const child = spawn(process.execPath, [writerScript], {
    env: { ...process.env, BERTH_URL: inject('berthUrl'), BERTH_API_KEY: inject('berthServiceKey'), DSH_NAMESPACE: namespace, DSH_SESSION: id, DSH_LEASE_MS: String(LEASE_MS) },
  })
  children.push(child)
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  return {
    child,
    async next() {
      const line = await lines.next()
      if (line.done === true) throw new Error(`writer exited: ${stderr}`)
      return JSON.parse(line.value) as Record<string, unknown>
    },
    send(line) {
      child.stdin.write(`${line}\n`)
    },
  }
}

let namespace: string
let persistence: BerthHandlePersistence

beforeEach(async () => {
  namespace = freshNamespace()
  persistence = makePersistence(namespace, { runLeaseTtlMs: LEASE_MS })
  const handle = await persistence.create(meta('shared'))
  await handle.append(oneTurnLog())
  await handle.close()
})

afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT')
      child.kill('SIGKILL')
    }
  }
  await persistence.close().catch(() => undefined)
})

describe('write ownership across processes', () => {
  it('two processes racing for one write handle: exactly one owns it, the other gets SessionAlreadyOwnedError', async () => {
    for (let round = 0; round < 3; round++) {
      const racers = [startWriter(namespace, 'shared'), startWriter(namespace, 'shared')]
      const outcomes = await Promise.all(racers.map((r) => r.next()))
      const owners = outcomes.filter((o) => o.state === 'owned')
      const refused = outcomes.filter((o) => o.state === 'refused')
      expect(owners).toHaveLength(1)
      expect(refused).toHaveLength(1)
      expect(refused[0]?.error).toBe('SessionAlreadyOwnedError')
      // In this process too, while the winner holds it.
      await expect(persistence.open('shared', 'write')).rejects.toBeInstanceOf(SessionAlreadyOwnedError)
      // close releases at once: the next writer needs no lease to lapse.
      const winner = racers[outcomes.indexOf(owners[0] as Record<string, unknown>)] as Writer
      winner.send('close')
      expect((await winner.next()).state).toBe('closed')
      const next = await persistence.open('shared', 'write')
      await next.close()
      for (const racer of racers) racer.send('exit')
    }
  })

  it('a SIGKILLed owner frees the session for the next writer once its run lease lapses', async () => {
    const owner = startWriter(namespace, 'shared')
    expect((await owner.next()).state).toBe('owned')
    owner.child.kill('SIGKILL')
    const killedAt = Date.now()
    await expect(persistence.open('shared', 'write')).rejects.toBeInstanceOf(SessionAlreadyOwnedError)
    let handle
    for (;;) {
      try {
        handle = await persistence.open('shared', 'write')
        break
      } catch (error) {
        if (!(error instanceof SessionAlreadyOwnedError)) throw error
        if (Date.now() - killedAt > LEASE_MS + 5_000) throw error
        await new Promise((r) => setTimeout(r, 100))
      }
    }
    const freedAfter = Date.now() - killedAt
    // Worst case: the full lease after the last heartbeat (heartbeats every lease/3).
    expect(freedAfter).toBeLessThanOrEqual(LEASE_MS + 2_500)
    expect((await handle.read()).length).toBe(6)
    await handle.append([event(6)])
    await handle.close()
  })

  it('a displaced owner fails with SessionOwnershipLostError, and the new owner is unharmed', async () => {
    const owner = startWriter(namespace, 'shared')
    expect((await owner.next()).state).toBe('owned')
    owner.send('append 6')
    expect((await owner.next()).state).toBe('appended')
    // Pause the owner past its lease (no heartbeats), then take the session over.
    owner.child.kill('SIGSTOP')
    await new Promise((r) => setTimeout(r, LEASE_MS + 600))
    const successor = await persistence.open('shared', 'write')
    await successor.append([event(7)])
    owner.child.kill('SIGCONT')
    owner.send('append 7')
    const outcome = await owner.next()
    expect(outcome).toMatchObject({ state: 'failed', error: 'SessionOwnershipLostError' })
    // The displaced writer stays out: every later append fails the same way.
    owner.send('append 8')
    expect(await owner.next()).toMatchObject({ state: 'failed', error: 'SessionOwnershipLostError' })
    await successor.append([event(8)])
    const log = await (await makePersistence(namespace).open('shared', 'read')).read()
    expect(log.map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8])
    expect((log[7]?.data as { turn: number }).turn).toBe(7)
    await successor.close()
  })

  it('a takeover through berth (attach with on_busy: interrupt) displaces an owner in this process', async () => {
    const handle = await persistence.open('shared', 'write')
    const client = serverClient()
    const takeover = await client.attachRun(persistence.berthId('shared'), { run_id: 'operator-takeover', on_busy: 'interrupt' })
    expect(takeover.displaced.map((r) => r.status)).toEqual(['interrupted'])
    await expect(handle.append([event(6)])).rejects.toBeInstanceOf(SessionOwnershipLostError)
    await expect(handle.append([event(6)])).rejects.toBeInstanceOf(SessionOwnershipLostError)
    expect(() => handle.publish(event(6))).toThrow(SessionOwnershipLostError)
    // The operator's run appends; the displaced handle reads the log as it now is.
    await client.appendEvents(persistence.berthId('shared'), {
      run: 'operator-takeover', expected_seq: 7,
      events: [{ type: 'dsh/event', ignorable: true, data: JSON.stringify(event(6)) }],
    })
    expect((await handle.read()).map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5, 6])
    // close still releases this instance's claim.
    await handle.close()
    await client.detachRun(persistence.berthId('shared'), 'operator-takeover')
    const next = await persistence.open('shared', 'write')
    expect((await next.read()).length).toBe(7)
    await next.close()
  })
})
