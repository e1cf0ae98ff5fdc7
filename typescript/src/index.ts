/**
 * `berth-store`: a typed client for berth's `/v1` HTTP API (`BerthClient`), its typed
 * errors, and the live tail. DeepSeek Harness persistence on berth is in `berth-store/dsh`
 * (the handle seam) and `berth-store/dsh-coordinator` (the published rc.8 seam, Node ≥ 22).
 */
export * from './client.js'
export * from './errors.js'
export { parseSse, type SseMessage, type TailOptions } from './tail.js'
export type { components, operations, paths } from './generated/openapi.js'
