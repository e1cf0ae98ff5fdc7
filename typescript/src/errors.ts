/**
 * Typed errors for berth's `/v1` error bodies (`{code, message, retryable, …}`), one class
 * per error class of `docs/reference/http.md` "Errors". A code this client does not know is
 * mapped to its HTTP status's class, as the `/v1` compatibility rule asks.
 */
import type { components } from './generated/openapi.js'

export type ErrorBody = components['schemas']['ErrorBody']

/** Every error code of berth's error table (`berth_core::ErrorClass::TABLE`). */
export type BerthErrorCode =
  | 'not_found'
  | 'already_exists'
  | 'busy'
  | 'writer_busy'
  | 'run_not_attached'
  | 'fenced'
  | 'revision_conflict'
  | 'seq_conflict'
  | 'idempotency_key_reused'
  | 'invalid_transition'
  | 'terminal'
  | 'payload_too_large'
  | 'limit_exceeded'
  | 'invalid'
  | 'forbidden'
  | 'unauthenticated'
  | 'rate_limited'
  | 'timeout'
  | 'unavailable'
  | 'format_unsupported'
  | 'corrupt'
  | 'internal'

/** An error answered by the server: its status, its body, and `Retry-After` when sent. */
export class BerthError extends Error {
  override readonly name: string = 'BerthError'
  /** The code as the server sent it (may be one this client does not know). */
  readonly code: string
  readonly status: number
  readonly retryable: boolean
  readonly body: ErrorBody
  /** `Retry-After` in milliseconds, when the answer carried one. */
  readonly retryAfterMs: number | undefined
  /** The request that failed, for diagnostics (`POST /v1/sessions/x/events`). */
  readonly request: string
  /** `revision_conflict`: the revision the caller expected; `seq_conflict`: the log's next seq. */
  readonly expected: number | undefined
  /** `revision_conflict`: the stored revision; `seq_conflict`: the seq the request gave; limits: the actual size or count. */
  readonly actual: number | undefined

  constructor(status: number, body: ErrorBody, request: string, retryAfterMs?: number) {
    super(`${request}: ${status} ${body.code}: ${body.message}`)
    this.code = body.code
    this.status = status
    this.retryable = body.retryable
    this.body = body
    this.retryAfterMs = retryAfterMs
    this.request = request
    this.expected = body.expected ?? undefined
    this.actual = body.actual ?? undefined
  }
}

export class NotFoundError extends BerthError { override readonly name = 'NotFoundError' }
export class AlreadyExistsError extends BerthError { override readonly name = 'AlreadyExistsError' }
export class BusyError extends BerthError { override readonly name: string = 'BusyError' }
/** The session's log is open for writing by another process: transient, unlike a policy's `busy`. */
export class WriterBusyError extends BusyError { override readonly name = 'WriterBusyError' }
export class RunNotAttachedError extends BerthError {
  override readonly name = 'RunNotAttachedError'
  get run(): string | undefined { return this.body.run ?? undefined }
}
export class FencedError extends BerthError { override readonly name = 'FencedError' }
export class RevisionConflictError extends BerthError { override readonly name = 'RevisionConflictError' }
/**
 * 409 `seq_conflict`. `expected` is the seq the log expected (its next seq) and `actual`
 * the seq the request gave, as the schema says: `storedNextSeq` names the first plainly.
 */
export class SeqConflictError extends BerthError {
  override readonly name = 'SeqConflictError'
  get storedNextSeq(): number | undefined { return this.expected }
}
export class IdempotencyKeyReusedError extends BerthError { override readonly name = 'IdempotencyKeyReusedError' }
export class InvalidTransitionError extends BerthError { override readonly name = 'InvalidTransitionError' }
export class TerminalError extends BerthError {
  override readonly name = 'TerminalError'
  get state(): string | undefined { return this.body.state ?? undefined }
}
export class PayloadTooLargeError extends BerthError { override readonly name = 'PayloadTooLargeError' }
export class LimitExceededError extends BerthError { override readonly name = 'LimitExceededError' }
export class InvalidError extends BerthError { override readonly name = 'InvalidError' }
export class ForbiddenError extends BerthError { override readonly name = 'ForbiddenError' }
export class UnauthenticatedError extends BerthError { override readonly name = 'UnauthenticatedError' }
export class RateLimitedError extends BerthError { override readonly name = 'RateLimitedError' }
/** 503 `timeout`: the request did not finish in time and its outcome is unknown. */
export class RequestTimeoutError extends BerthError { override readonly name = 'RequestTimeoutError' }
export class UnavailableError extends BerthError { override readonly name = 'UnavailableError' }
export class FormatUnsupportedError extends BerthError { override readonly name = 'FormatUnsupportedError' }
export class CorruptError extends BerthError { override readonly name = 'CorruptError' }
export class InternalError extends BerthError { override readonly name = 'InternalError' }

type BerthErrorClass = new (status: number, body: ErrorBody, request: string, retryAfterMs?: number) => BerthError

const CLASS_BY_CODE: Record<BerthErrorCode, BerthErrorClass> = {
  not_found: NotFoundError,
  already_exists: AlreadyExistsError,
  busy: BusyError,
  writer_busy: WriterBusyError,
  run_not_attached: RunNotAttachedError,
  fenced: FencedError,
  revision_conflict: RevisionConflictError,
  seq_conflict: SeqConflictError,
  idempotency_key_reused: IdempotencyKeyReusedError,
  invalid_transition: InvalidTransitionError,
  terminal: TerminalError,
  payload_too_large: PayloadTooLargeError,
  limit_exceeded: LimitExceededError,
  invalid: InvalidError,
  forbidden: ForbiddenError,
  unauthenticated: UnauthenticatedError,
  rate_limited: RateLimitedError,
  timeout: RequestTimeoutError,
  unavailable: UnavailableError,
  format_unsupported: FormatUnsupportedError,
  corrupt: CorruptError,
  internal: InternalError,
}

/**
 * The class an unknown code falls back to, by status (`ErrorClass::from_http_status`):
 * `/v1` may add codes, but only within an existing class's status.
 */
const CLASS_BY_STATUS: Record<number, BerthErrorClass> = {
  400: InvalidError,
  401: UnauthenticatedError,
  403: ForbiddenError,
  404: NotFoundError,
  409: InvalidTransitionError,
  412: RevisionConflictError,
  413: PayloadTooLargeError,
  422: InvalidError,
  429: RateLimitedError,
  500: InternalError,
  503: UnavailableError,
}

export function isBerthErrorCode(code: string): code is BerthErrorCode {
  return Object.prototype.hasOwnProperty.call(CLASS_BY_CODE, code)
}

/** Builds the typed error for one answer. A body that is not an error body becomes `internal`. */
export function berthErrorFromResponse(status: number, body: unknown, request: string, retryAfterMs?: number): BerthError {
  const errorBody: ErrorBody = isErrorBody(body)
    ? body
    : { code: status >= 500 ? 'internal' : 'invalid', message: `unexpected answer: ${truncate(body)}`, retryable: false }
  const errorClass = isBerthErrorCode(errorBody.code)
    ? CLASS_BY_CODE[errorBody.code]
    : CLASS_BY_STATUS[status] ?? (status >= 500 ? InternalError : BerthError)
  return new errorClass(status, errorBody, request, retryAfterMs)
}

function isErrorBody(body: unknown): body is ErrorBody {
  if (typeof body !== 'object' || body === null) return false
  const candidate = body as Record<string, unknown>
  return typeof candidate.code === 'string' && typeof candidate.message === 'string' && typeof candidate.retryable === 'boolean'
}

function truncate(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value) ?? String(value)
  return text.length > 200 ? `${text.slice(0, 200)}…` : text
}

/** The server could not be reached, or the connection broke before an answer. */
export class BerthConnectionError extends Error {
  override readonly name = 'BerthConnectionError'
  readonly request: string
  constructor(request: string, cause: unknown) {
    super(`${request}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause })
    this.request = request
  }
}
