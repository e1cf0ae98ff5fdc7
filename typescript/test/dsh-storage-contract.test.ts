/**
 * The seam's helpers and error vocabulary (`dsh.md` §1.3, §1.5, §3.3): stable names and
 * the harness's messages, lossless-JSON refusal of every non-JSON value, contiguity
 * messages naming the expected seq, the version gate and the revision brand.
 */
import { describe, expect, it } from 'vitest'
import {
  SessionAlreadyExistsError,
  SessionAlreadyOwnedError,
  SessionFormatUnsupportedError,
  SessionHandleClosedError,
  SessionOwnershipLostError,
  SessionPersistenceCorruptionError,
  SessionPersistenceNotFoundError,
  SessionPersistenceRevision,
  SessionReadOnlyError,
  assertContiguous,
  assertKnownEvent,
  assertStoredId,
  assertVersion,
  berthSessionId,
  materializeAppendBatch,
  materializeCreateHeader,
  sessionFormatVersionRefusal,
} from '../src/dsh/index.js'

describe('seam helpers and error vocabulary', () => {
  it('errors carry stable names, the harness messages, and the session id', () => {
    const cases: [Error & { sessionId?: string }, string, string][] = [
      [new SessionPersistenceNotFoundError('s'), 'SessionPersistenceNotFoundError', 'session "s" not found'],
      [new SessionAlreadyExistsError('s'), 'SessionAlreadyExistsError', 'session "s" already exists'],
      [new SessionAlreadyOwnedError('s'), 'SessionAlreadyOwnedError', 'session "s" is already owned by an active write handle'],
      [new SessionReadOnlyError('s', 'append'), 'SessionReadOnlyError', 'session "s": append is not available on a read handle'],
      [new SessionOwnershipLostError('s'), 'SessionOwnershipLostError', 'session "s": write ownership was lost; close this handle and reopen'],
      [new SessionHandleClosedError('s', 'read'), 'SessionHandleClosedError', 'session "s": read on a closed handle'],
    ]
    for (const [error, name, message] of cases) {
      expect(error.name).toBe(name)
      expect(error.message).toBe(message)
      expect(error.sessionId).toBe('s')
      expect(error).toBeInstanceOf(Error)
    }
    expect(new SessionPersistenceCorruptionError('bad', { cause: 1 }).cause).toBe(1)
  })

  it('the version gate states the direction, and names the location when there is one', () => {
    expect(sessionFormatVersionRefusal('s', 3, 0)).toBe('session "s" has format version 3, written by a newer harness — upgrade the harness to open it')
    expect(sessionFormatVersionRefusal('s', -1, 0)).toBe('session "s" has format version -1, older than the supported v0, and this build ships no upgrade path for it')
    expect(() => assertVersion({ version: 0, id: 's', createdAt: 0 }, 0)).not.toThrow()
    const refusal = (() => { try { assertVersion({ version: 1, id: 's', createdAt: 0 }, 0, { kind: 'berth', path: 'http://h/v1/sessions/s' }) } catch (e) { return e } })()
    expect(refusal).toBeInstanceOf(SessionFormatUnsupportedError)
    expect((refusal as SessionFormatUnsupportedError).message).toContain('(raw log: http://h/v1/sessions/s)')
    expect((refusal as SessionFormatUnsupportedError).location?.kind).toBe('berth')
  })

  it('assertStoredId names both ids; assertContiguous names the expected seq', () => {
    expect(() => assertStoredId('a', { version: 0, id: 'b', createdAt: 0 })).toThrow('stored session identity mismatch: requested "a", header contains "b"')
    expect(() => assertContiguous('s', [], 4)).not.toThrow()
    expect(() => assertContiguous('s', [{ type: 't', seq: 4, time: 0, data: null }], 4)).not.toThrow()
    expect(() => assertContiguous('s', [{ type: 't', seq: 3, time: 0, data: null }], 4)).toThrow('append seq mismatch for "s": expected 4 at index 0, got 3')
    expect(() => assertContiguous('s', [{ type: 't', seq: 4, time: 0, data: null }, { type: 't', seq: 6, time: 0, data: null }], 4)).toThrow('append seq mismatch for "s": expected 5 at index 1, got 6')
  })

  it('materializeAppendBatch returns a detached, frozen snapshot with the exact texts, and refuses every non-JSON value', () => {
    const input = { type: 'user/message', seq: 0, time: 1, data: { b: 1, a: [1.5, 'é'] } }
    const batch = materializeAppendBatch([input])
    input.data.b = 2
    expect(batch.events[0]?.data).toEqual({ b: 1, a: [1.5, 'é'] })
    expect(batch.texts[0]).toBe('{"type":"user/message","seq":0,"time":1,"data":{"b":1,"a":[1.5,"é"]}}')
    expect(Object.isFrozen(batch.events[0]?.data)).toBe(true)
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    // eslint-disable-next-line no-sparse-arrays
    for (const data of [1n, undefined, Infinity, NaN, () => 1, Symbol('s'), new Map(), new Set(), new Date(0), cyclic, [1, , 3], { [Symbol('k')]: 1 }]) {
      expect(() => materializeAppendBatch([{ type: 't', seq: 0, time: 0, data }])).toThrow(/losslessly JSON-serializable/)
    }
  })

  it('materializeCreateHeader needs a non-negative safe-integer createdAt', () => {
    expect(materializeCreateHeader({ version: 0, id: 's', createdAt: 5 }).text).toBe('{"version":0,"id":"s","createdAt":5}')
    for (const createdAt of [-1, 1.5, Number.MAX_SAFE_INTEGER + 1, Number.NaN]) {
      expect(() => materializeCreateHeader({ version: 0, id: 's', createdAt })).toThrow(TypeError)
    }
    expect(() => materializeCreateHeader({ version: 0, id: '', createdAt: 1 })).toThrow(TypeError)
  })

  it('the vocabulary rule refuses an unknown type unless it is ignorable', () => {
    const known = new Set(['turn/start'])
    expect(() => assertKnownEvent('s', { type: 'turn/start', seq: 0, time: 0, data: null }, known)).not.toThrow()
    expect(() => assertKnownEvent('s', { type: 'x/y', seq: 0, time: 0, data: null, ignorable: true }, known)).not.toThrow()
    expect(() => assertKnownEvent('s', { type: 'x/y', seq: 2, time: 0, data: null }, known)).toThrow(SessionFormatUnsupportedError)
  })

  it('the revision brand keeps the runtime value; ids map injectively onto the berth grammar', () => {
    expect(SessionPersistenceRevision('berth:1:2')).toBe('berth:1:2')
    expect(berthSessionId('dsh.', 'chat-1')).toBe('dsh.chat-1')
    expect(berthSessionId('dsh.', 'a b')).toBe(`dsh.~${Buffer.from('a b').toString('base64url')}`)
    expect(berthSessionId('dsh.', 'x'.repeat(200))).toMatch(/^dsh\.~~[A-Za-z0-9_-]{43}$/)
    expect(berthSessionId('', '~a')).not.toBe(berthSessionId('', 'a'))
  })
})
