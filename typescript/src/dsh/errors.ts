/**
 * The seam's errors (`dsh.md` §1.3), with the messages the harness's own backends use,
 * so callers that match on text or `name` behave the same on berth.
 */
import type { SessionId, SessionLocation } from './types.js'

export class SessionPersistenceNotFoundError extends Error {
  override readonly name = 'SessionPersistenceNotFoundError'
  constructor(readonly sessionId: SessionId) {
    super(`session "${sessionId}" not found`)
  }
}

export class SessionAlreadyExistsError extends Error {
  override readonly name = 'SessionAlreadyExistsError'
  constructor(readonly sessionId: SessionId) {
    super(`session "${sessionId}" already exists`)
  }
}

export class SessionAlreadyOwnedError extends Error {
  override readonly name = 'SessionAlreadyOwnedError'
  constructor(readonly sessionId: SessionId, options?: ErrorOptions) {
    super(`session "${sessionId}" is already owned by an active write handle`, options)
  }
}

export class SessionReadOnlyError extends Error {
  override readonly name = 'SessionReadOnlyError'
  constructor(readonly sessionId: SessionId, readonly operation: string) {
    super(`session "${sessionId}": ${operation} is not available on a read handle`)
  }
}

/** The berth run this handle's ownership rests on was displaced, lapsed or detached. */
export class SessionOwnershipLostError extends Error {
  override readonly name = 'SessionOwnershipLostError'
  constructor(readonly sessionId: SessionId, options?: ErrorOptions) {
    super(`session "${sessionId}": write ownership was lost; close this handle and reopen`, options)
  }
}

export class SessionHandleClosedError extends Error {
  override readonly name = 'SessionHandleClosedError'
  constructor(readonly sessionId: SessionId, readonly operation: string) {
    super(`session "${sessionId}": ${operation} on a closed handle`)
  }
}

export class SessionPersistenceCorruptionError extends Error {
  override readonly name = 'SessionPersistenceCorruptionError'
  constructor(message: string, options?: ErrorOptions) {
    super(message, options)
  }
}

/** An intact log this build cannot interpret (distinct from corruption). */
export class SessionFormatUnsupportedError extends Error {
  override readonly name = 'SessionFormatUnsupportedError'
  constructor(message: string, readonly location?: SessionLocation) {
    super(location === undefined ? message : `${message} (raw log: ${location.path})`)
  }
}

export function sessionFormatVersionRefusal(id: SessionId, version: number, supported: number): string {
  return version > supported
    ? `session "${id}" has format version ${version}, written by a newer harness — upgrade the harness to open it`
    : `session "${id}" has format version ${version}, older than the supported v${supported}, and this build ships no upgrade path for it`
}
