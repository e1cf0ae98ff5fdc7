/**
 * The typed client against a real `berth serve`: every `/v1` operation, the typed errors,
 * safe retries (the same idempotency key on every attempt; 429 with `Retry-After`), the
 * live tail resuming from the last seq, and the generated types' drift check.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inject } from 'vitest'
import {
  AlreadyExistsError,
  BerthClient,
  BerthError,
  BusyError,
  ForbiddenError,
  IdempotencyKeyReusedError,
  InvalidError,
  NotFoundError,
  RateLimitedError,
  RevisionConflictError,
  RunNotAttachedError,
  SeqConflictError,
  TerminalError,
  UnauthenticatedError,
  berthErrorFromResponse,
  parseRetryAfter,
  parseSse,
} from '../src/index.js'
import { berthBinary, startBerthServer, type BerthServer } from './support/berth-server.js'

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..')
let service: BerthClient
let admin: BerthClient

beforeAll(() => {
  const url = inject('berthUrl')
  service = new BerthClient({ baseUrl: url, apiKey: inject('berthServiceKey') })
  const adminKey = execFileSync(berthBinary(), ['--data', inject('berthDataDir'), 'keys', 'create', '--tenant', 'dsh', '--user', 'root', '--role', 'admin'], { encoding: 'utf8' }).trim()
  admin = new BerthClient({ baseUrl: url, apiKey: adminKey })
})

const freshId = (): string => `c-${randomUUID()}`

describe('generated types', () => {
  it('src/generated/openapi.ts is what openapi-typescript makes of the committed openapi.json (drift check)', () => {
    const scratch = mkdtempSync(join(tmpdir(), 'berth-openapi-'))
    try {
      const output = join(scratch, 'openapi.ts')
      execFileSync(process.execPath, [join(packageRoot, 'node_modules/openapi-typescript/bin/cli.js'), join(packageRoot, '../crates/berth-api/openapi.json'), '-o', output], { stdio: 'pipe' })
      const regenerated = readFileSync(output, 'utf8')
      const committed = readFileSync(join(packageRoot, 'src/generated/openapi.ts'), 'utf8')
      expect(committed === regenerated, 'src/generated/openapi.ts is stale: run `npm run generate` in typescript/').toBe(true)
    } finally {
      rmSync(scratch, { recursive: true, force: true })
    }
  })

  it('the client covers every operation of the document', () => {
    const document = JSON.parse(readFileSync(join(packageRoot, '../crates/berth-api/openapi.json'), 'utf8')) as { paths: Record<string, Record<string, { operationId: string }>> }
    const operations = Object.values(document.paths).flatMap((methods) => Object.values(methods).map((o) => o.operationId))
    const covered: Record<string, keyof BerthClient> = {
      audit_log: 'auditLog', verify_audit: 'verifyAudit', import_sessions: 'importSessions', set_retention: 'setRetention',
      list_sessions: 'listSessions', create_session: 'createSession', get_session: 'getSession', delete_session: 'deleteSession',
      update_session: 'updateSession', close_session: 'closeSession', read_events: 'readEvents', append_events: 'appendEvents',
      tail_events: 'tail', export_session: 'exportSession', fork_session: 'forkSession', reopen_session: 'reopenSession',
      resume_session: 'resumeSession', attach_run: 'attachRun', detach_run: 'detachRun', heartbeat_run: 'heartbeatRun', whoami: 'whoami',
      count_sessions: 'countSessions', search_audit: 'auditSearch',
      put_memory: 'memoryPut', get_memory: 'memoryGet', delete_memory: 'memoryDelete', search_memory: 'memorySearch',
      list_namespaces: 'memoryNamespaces', forget_memory: 'memoryForget', memory_usage: 'memoryUsage',
      export_memory: 'memoryExport', import_memory: 'memoryImport',
      delete_memory_items: 'memoryDeleteMany', set_memory_quota: 'memorySetQuota', take_backup: 'takeBackup',
      session_usage: 'sessionUsage', tenant_usage: 'usage',
    }
    expect(operations.sort()).toEqual(Object.keys(covered).sort())
    for (const method of Object.values(covered)) expect(typeof service[method]).toBe('function')
  })
})

describe('every /v1 operation', () => {
  it('sessions: whoami, create, get, list, update, fork, close, reopen, delete', async () => {
    expect(await service.whoami()).toMatchObject({ tenant: 'dsh', user: 'agent', role: 'service' })
    const id = freshId()
    const created = await service.createSession({ id, title: 'first', labels: ['client-test'] })
    expect(created.header.id).toBe(id)
    expect(['idle', 'active']).toContain(created.status)
    expect((await service.getSession(id)).title).toBe('first')
    const updated = await service.updateSession(id, { title: 'second', expected_revision: created.revision })
    expect(updated.title).toBe('second')
    await expect(service.updateSession(id, { title: 'x', expected_revision: created.revision })).rejects.toBeInstanceOf(RevisionConflictError)
    const listed = []
    for await (const record of service.listAllSessions({ label: 'client-test', include_blank: true, limit: 1 })) listed.push(record.header.id)
    expect(listed).toContain(id)
    await service.appendEvents(id, { events: [{ type: 'user/message', data: { content: 'hi' } }] })
    const forkId = freshId()
    const fork = await service.forkSession(id, { new_id: forkId })
    expect(fork.header.parent?.session).toBe(id)
    const closed = await service.closeSession(id)
    expect(closed.status).toBe('closed')
    await expect(service.appendEvents(id, { events: [{ type: 'note/x', data: 1 }] })).rejects.toBeInstanceOf(TerminalError)
    await expect(service.reopenSession(id)).rejects.toBeInstanceOf(ForbiddenError)
    expect(['idle', 'active']).toContain((await admin.reopenSession(id)).status)
    await admin.deleteSession(forkId)
    await expect(service.getSession(forkId)).rejects.toBeInstanceOf(NotFoundError)
  })

  it('events: append (durable, keyed), read by position forward and backward, exact data', async () => {
    const id = freshId()
    await service.createSession({ id })
    const events = Array.from({ length: 1500 }, (_, i) => ({ type: 'note/n', data: { i } }))
    await service.appendEvents(id, { events: events.slice(0, 1000), expected_seq: 0 })
    const outcome = await service.appendEvents(id, { events: events.slice(1000), expected_seq: 1000 })
    expect(outcome).toEqual({ first_seq: 1000, next_seq: 1500, duplicate: false })
    expect(await service.nextSeq(id)).toBe(1500)
    const forward = await service.readEvents(id, { from: 10, limit: 5 })
    expect(forward.events.map((e) => e.seq)).toEqual([10, 11, 12, 13, 14])
    expect(forward.next_seq).toBe(15)
    const backward = await service.readEvents(id, { before: 10, limit: 3 })
    expect(backward.events.map((e) => e.seq)).toEqual([7, 8, 9])
    expect(backward.first_seq).toBe(7)
    const typedEvents = Array.from({ length: 30 }, (_, i) => (i % 10 === 0 ? { type: 'user/message', data: { content: 'm', i } } : { type: 'note/n', data: { i } }))
    const typed = freshId()
    await service.createSession({ id: typed })
    await service.appendEvents(typed, { events: typedEvents })
    const messages = await service.readEvents(typed, { types: 'user/message', from: 1 })
    expect(messages.events.map((e) => e.seq)).toEqual([10, 20])
    expect([messages.first_seq, messages.next_seq]).toEqual([1, 30])
    let count = 0
    for await (const event of service.readAllEvents(id)) {
      expect(event.seq).toBe(count)
      count++
    }
    expect(count).toBe(1500)
    // data comes back byte for byte, key order kept (a raw body: JSON.stringify would reorder nothing here).
    const exact = freshId()
    await service.createSession({ id: exact })
    await service.send({
      method: 'POST', path: `/v1/sessions/${exact}/events`, repeatable: 'unsafe',
      rawBody: '{"events":[{"type":"note/x","data":{"b":1.0,"a":[1e2,"\\u00e9"]}}]}', contentType: 'application/json',
    })
    const raw = await (await service.send({ method: 'GET', path: `/v1/sessions/${exact}/events`, repeatable: 'safe' })).text()
    expect(raw).toContain('"data":{"b":1.0,"a":[1e2,"\\u00e9"]}')
  })

  it('runs: attach, heartbeat, a second attach is busy, detach, resume', async () => {
    const id = freshId()
    await service.createSession({ id })
    const attachment = await service.attachRun(id, { run_id: 'r1', on_busy: 'reject' })
    expect(attachment.run.run_id).toBe('r1')
    expect((await service.heartbeatRun(id, 'r1')).status).toBe('attached')
    await expect(service.attachRun(id, { run_id: 'r2', on_busy: 'reject' })).rejects.toBeInstanceOf(BusyError)
    await service.appendEvents(id, { run: 'r1', events: [{ type: 'turn/start', data: { turn: 0 } }, { type: 'user/message', data: { content: 'hi' } }] })
    await service.detachRun(id, 'r1', { outcome: 'crashed' })
    await expect(service.heartbeatRun(id, 'r1')).rejects.toBeInstanceOf(RunNotAttachedError)
    const resumed = await service.resumeSession(id, { run_id: 'r3' })
    expect(resumed.attachment.run.run_id).toBe('r3')
    expect(resumed.repaired.map((e) => e.type)).toContain('turn/end')
    await service.detachRun(id, 'r3')
  })

  it('export and import (JSONL and ZIP), audit, audit verification, retention', async () => {
    const id = freshId()
    await service.createSession({ id })
    await service.appendEvents(id, { events: [{ type: 'note/x', data: { v: 1 } }] })
    const jsonl = await service.exportSession(id, 'jsonl')
    expect(jsonl.split('\n').filter(Boolean).length).toBe(2)
    const zip = await service.exportSession(id, 'zip')
    expect([zip[0], zip[1]]).toEqual([0x50, 0x4b])
    await admin.deleteSession(id)
    const imported = await service.importSessions(jsonl)
    expect(imported.sessions.map((s) => s.header.id)).toEqual([id])
    await expect(service.importSessions(jsonl)).rejects.toBeInstanceOf(AlreadyExistsError)
    await admin.deleteSession(id)
    expect((await service.importSessions(zip)).sessions.map((s) => s.header.id)).toEqual([id])
    const audit = await admin.auditLog({ from: 0, limit: 5 })
    expect(audit.length).toBeGreaterThan(0)
    expect(await admin.verifyAudit()).toMatchObject({})
    const found = await admin.auditSearch({ session: id })
    expect(found.entries.length).toBeGreaterThan(0)
    expect(found.entries.every((entry) => entry.session === id)).toBe(true)
    const counts = await service.countSessions()
    expect(counts.counts.map((count) => count.status)).toContain('active')
    await admin.setRetention({ delete_terminal_after_ms: 365 * 24 * 3600 * 1000 })
    await expect(service.setRetention({})).rejects.toBeInstanceOf(ForbiddenError)
  })

  it('usage: a session\'s model calls and tool time, the caller\'s totals over a range, a bad range', async () => {
    const id = freshId()
    const model = `ts-model-${randomUUID()}`
    await service.createSession({ id })
    const t0 = Date.now()
    await service.appendEvents(id, {
      events: [
        { type: 'model/call', time: t0, ignorable: true, data: { model, provider: 'test', input_tokens: 100, output_tokens: 7, latency_ms: 250.5 } },
        { type: 'tool/call', time: t0 + 1, data: { call_id: 'c1', name: 'ls', arguments: {} } },
        { type: 'tool/result', time: t0 + 21, data: { call_id: 'c1', content: 'a' } },
        { type: 'model/call', time: t0 + 30, ignorable: true, data: { model, provider: 'test', error: { code: 'timeout', name: 'Timeout' } } },
      ],
    })
    const usage = await service.sessionUsage(id)
    expect(usage).toMatchObject({ session: id, calls: 2, errors: 1, input_tokens: 100, output_tokens: 7, model_ms: 250.5, tool_calls: 1, tool_ms: 20 })
    expect(usage.by_model).toEqual([{ provider: 'test', model, calls: 2, errors: 1, input_tokens: 100, output_tokens: 7, cached_tokens: 0, model_ms: 250.5 }])
    const totals = await admin.usage({ since: new Date(t0), before: t0 + 60_000 })
    expect(totals.since).toBe(t0)
    expect(totals.by_model.find((row) => row.model === model)).toMatchObject({ calls: 2, errors: 1 })
    await expect(service.sessionUsage(freshId())).rejects.toBeInstanceOf(NotFoundError)
    await expect(service.usage({ since: t0, before: t0 })).rejects.toBeInstanceOf(InvalidError)
  })

  it('memory: put, get, search, namespaces, delete, forget, usage, export and import', async () => {
    const ns = `user/${freshId()}`
    const item = await service.memoryPut({ namespace: `${ns}/prefs`, key: 'tone', value: { style: 'terse', n: 3 } })
    expect(item).toMatchObject({ revision: 1, value: { style: 'terse', n: 3 } })
    expect(await service.memoryGet(`${ns}/prefs`, 'tone')).toEqual(item)
    await expect(service.memoryPut({ namespace: `${ns}/prefs`, key: 'tone', value: 2, expected_revision: 0 })).rejects.toMatchObject({ code: 'revision_conflict', status: 412 })
    await service.memoryPut({ namespace: `${ns}/notes`, key: 'a', value: { text: 'Green tea', n: 5 } })
    const found = await service.memorySearch({ prefix: ns, query: 'TEA', order: 'relevance' })
    expect(found.items.map((i) => i.key)).toEqual(['a'])
    const filtered = await service.memorySearch({ prefix: ns, filter: [{ field: 'n', op: 'gt', value: 3 }] })
    expect(filtered.items.map((i) => i.key)).toEqual(['a'])
    expect((await service.memoryNamespaces({ prefix: ns })).namespaces).toEqual([`${ns}/notes`, `${ns}/prefs`])
    const exported = await service.memoryExport({ prefix: ns })
    expect(exported.split('\n').filter(Boolean).length).toBe(3)
    expect(await service.memoryDelete(`${ns}/notes`, 'a', { expected_revision: 1 })).toMatchObject({ key: 'a' })
    const report = await service.memoryForget(ns)
    expect(report).toMatchObject({ prefix: ns, items: 1 })
    expect((await service.memoryImport(exported)).imported).toBe(2)
    expect(await service.memoryExport({ prefix: ns })).toBe(exported)
    expect((await service.memoryUsage()).items).toBeGreaterThan(0)
    await expect(service.memoryPut({ namespace: 'user/x/../y', key: 'k', value: 1 })).rejects.toBeInstanceOf(InvalidError)
  })
})

describe('typed errors', () => {
  it('carry code, status, retryable and the conflict fields', async () => {
    const id = freshId()
    await service.createSession({ id })
    await service.appendEvents(id, { events: [{ type: 'note/x', data: 1 }] })
    const conflict = await service.appendEvents(id, { events: [{ type: 'note/x', data: 2 }], expected_seq: 0 }).catch((e: unknown) => e)
    expect(conflict).toBeInstanceOf(SeqConflictError)
    // For seq_conflict berth answers `expected` = the log's next seq, `actual` = the seq asked
    // for (the schema's wording says the reverse; revision_conflict follows the wording).
    expect(conflict).toMatchObject({ code: 'seq_conflict', status: 409, retryable: false, expected: 1, actual: 0 })
    expect((conflict as SeqConflictError).storedNextSeq).toBe(1)
    await expect(service.createSession({ id })).rejects.toBeInstanceOf(AlreadyExistsError)
    await expect(service.getSession('no-such-session')).rejects.toMatchObject({ name: 'NotFoundError', code: 'not_found', status: 404 })
    await expect(service.createSession({ id: 'bad id!' } as never)).rejects.toBeInstanceOf(InvalidError)
    const stranger = new BerthClient({ baseUrl: inject('berthUrl'), apiKey: 'berth_0000000000000000_00' })
    await expect(stranger.whoami()).rejects.toBeInstanceOf(UnauthenticatedError)
    await service.appendEvents(id, { events: [{ type: 'note/k', data: 1 }] }, { idempotencyKey: 'k-1' })
    await expect(service.appendEvents(id, { events: [{ type: 'note/k', data: 2 }] }, { idempotencyKey: 'k-1' })).rejects.toBeInstanceOf(IdempotencyKeyReusedError)
  })

  it('an unknown code falls back to its status class; a non-error body is reported as unexpected', () => {
    const unknown = berthErrorFromResponse(409, { code: 'brand_new_conflict', message: 'm', retryable: false }, 'POST /v1/x')
    expect(unknown).toBeInstanceOf(BerthError)
    expect(unknown.code).toBe('brand_new_conflict')
    expect(unknown.name).toBe('InvalidTransitionError')
    const proxy = berthErrorFromResponse(502, '<html>bad gateway</html>', 'GET /v1/x')
    expect(proxy.code).toBe('internal')
    expect(proxy.message).toContain('bad gateway')
    expect(parseRetryAfter('2')).toBe(2000)
    expect(parseRetryAfter(null)).toBeUndefined()
  })
})

describe('safe retries', () => {
  it('an append whose answer is lost is retried with the same Idempotency-Key and stored once', async () => {
    const id = freshId()
    await service.createSession({ id })
    const keys: (string | null)[] = []
    let dropped = false
    const flaky = new BerthClient({
      baseUrl: inject('berthUrl'),
      apiKey: inject('berthServiceKey'),
      retry: { initialDelayMs: 10 },
      fetch: async (input, init) => {
        const response = await fetch(input, init)
        if (init?.method === 'POST') {
          keys.push(new Headers(init.headers).get('idempotency-key'))
          if (!dropped) {
            dropped = true
            await response.arrayBuffer()
            throw new TypeError('fetch failed: socket hang up (injected after the server answered)')
          }
        }
        return response
      },
    })
    const outcome = await flaky.appendEvents(id, { events: [{ type: 'note/x', data: { once: true } }] })
    expect(outcome.duplicate).toBe(true)
    expect(keys).toHaveLength(2)
    expect(keys[0]).not.toBeNull()
    expect(keys[0]).toBe(keys[1])
    expect(await service.nextSeq(id)).toBe(1)
  })

  it('a keyless append is not repeated after an unknown outcome', async () => {
    const id = freshId()
    await service.createSession({ id })
    let attempts = 0
    const flaky = new BerthClient({
      baseUrl: inject('berthUrl'), apiKey: inject('berthServiceKey'), retry: { initialDelayMs: 10 },
      fetch: async (input, init) => {
        attempts++
        await (await fetch(input, init)).arrayBuffer()
        throw new TypeError('fetch failed')
      },
    })
    await expect(flaky.appendEvents(id, { events: [{ type: 'note/x', data: 1 }] }, { idempotencyKey: false })).rejects.toThrow(/fetch failed/)
    expect(attempts).toBe(1)
  })

  describe('429 with Retry-After', () => {
    let limited: BerthServer
    beforeAll(async () => { limited = await startBerthServer(['--rate-per-tenant', '1', '--rate-burst', '1']) })
    afterAll(async () => { await limited.stop() })

    it('waits as told and succeeds; gives up with RateLimitedError after its attempts', async () => {
      const key = limited.createKey('limited', 'agent', 'service')
      const seen: { status: number; retryAfter: string | null }[] = []
      const client = new BerthClient({
        baseUrl: limited.url, apiKey: key, retry: { attempts: 4, maxDelayMs: 3_000 },
        fetch: async (input, init) => {
          const response = await fetch(input, init)
          seen.push({ status: response.status, retryAfter: response.headers.get('retry-after') })
          return response
        },
      })
      await client.whoami()
      const started = Date.now()
      await client.whoami()
      const limitedAnswers = seen.filter((s) => s.status === 429)
      expect(limitedAnswers.length).toBeGreaterThan(0)
      expect(limitedAnswers[0]?.retryAfter).not.toBeNull()
      expect(seen.at(-1)?.status).toBe(200)
      expect(Date.now() - started).toBeGreaterThanOrEqual(Math.min(3_000, (parseRetryAfter(limitedAnswers[0]?.retryAfter ?? null) ?? 0)) - 50)
      const impatient = new BerthClient({ baseUrl: limited.url, apiKey: key, retry: { attempts: 1 } })
      await impatient.whoami().catch(() => undefined)
      await expect(impatient.whoami()).rejects.toBeInstanceOf(RateLimitedError)
    })
  })
})

describe('live tail', () => {
  it('iterates events as they are appended and ends on max_events', async () => {
    const id = freshId()
    await service.createSession({ id })
    await service.appendEvents(id, { events: [{ type: 'note/a', data: 0 }] })
    const seen: number[] = []
    const tail = (async () => {
      const iterator = service.tail(id, { from: 0, maxEvents: 3 })
      for (;;) {
        const step = await iterator.next()
        if (step.done === true) return step.value
        seen.push(step.value.seq)
      }
    })()
    await new Promise((r) => setTimeout(r, 100))
    await service.appendEvents(id, { events: [{ type: 'note/a', data: 1 }, { type: 'note/a', data: 2 }] })
    expect(await tail).toEqual({ reason: 'max_events', next_seq: 3 })
    expect(seen).toEqual([0, 1, 2])
  })

  it('resumes from the last seq after a broken connection, without loss or repeats', async () => {
    const id = freshId()
    await service.createSession({ id })
    await service.appendEvents(id, { events: Array.from({ length: 5 }, (_, i) => ({ type: 'note/a', data: i })) })
    const froms: string[] = []
    let broken = false
    const cutting = new BerthClient({
      baseUrl: inject('berthUrl'), apiKey: inject('berthServiceKey'),
      fetch: async (input, init) => {
        const url = new URL(String(input))
        const response = await fetch(input, init)
        if (!url.pathname.endsWith('/stream')) return response
        froms.push(url.searchParams.get('from') ?? '')
        if (broken || response.body === null) return response
        broken = true
        // Pass the first two events through, then break the connection.
        const reader = response.body.getReader()
        let text = ''
        const cut = new ReadableStream<Uint8Array>({
          async pull(controller) {
            const chunk = await reader.read()
            if (chunk.done) return controller.close()
            text += new TextDecoder().decode(chunk.value)
            const messages = text.split('\n\n')
            if (messages.length > 2) {
              // Deliver exactly two whole messages, then break mid-stream.
              controller.enqueue(new TextEncoder().encode(`${messages.slice(0, 2).join('\n\n')}\n\n`))
              await reader.cancel()
              controller.error(new TypeError('terminated'))
            }
          },
        })
        return new Response(cut, { status: response.status, headers: response.headers })
      },
    })
    const seqsSeen: number[] = []
    for await (const event of cutting.tail(id, { from: 0, maxEvents: 5, reconnectDelayMs: 10 })) seqsSeen.push(event.seq)
    expect(seqsSeen).toEqual([0, 1, 2, 3, 4])
    expect(froms.length).toBe(2)
    expect(froms).toEqual(['0', '2'])
  })

  it('ends on idle_timeout and throws the typed error of event: error', async () => {
    const id = freshId()
    await service.createSession({ id })
    const iterator = service.tail(id, { from: 0, idleTimeoutMs: 200 })
    const ended = await iterator.next()
    expect(ended).toEqual({ done: true, value: { reason: 'idle_timeout', next_seq: 0 } })
    const gone = service.tail(id, { from: 0 })
    const first = gone.next()
    await new Promise((r) => setTimeout(r, 200))
    await admin.deleteSession(id)
    await expect(first).rejects.toBeInstanceOf(NotFoundError)
  })

  it('parses the SSE framing: comments, multi-line data, CRLF, ids', async () => {
    const text = ': heartbeat\r\nid: 4\r\nevent: event\r\ndata: {"a":\r\ndata: 1}\r\n\r\nevent: end\ndata: {"reason":"max_events","next_seq":5}\n\n'
    const messages = []
    for await (const message of parseSse(new Response(text).body as ReadableStream<Uint8Array>)) messages.push(message)
    expect(messages).toEqual([
      { event: 'event', id: '4', data: '{"a":\n1}' },
      { event: 'end', id: undefined, data: '{"reason":"max_events","next_seq":5}' },
    ])
  })
})
