/**
 * `berth-store/dsh`: DeepSeek Harness's handle seam (seed 004) on berth — the seam's
 * types and errors, its storage-contract checks, `BerthHandlePersistence`, and
 * `harnessHistory` (any framework's berth conversation as harness events).
 */
export * from './types.js'
export * from './errors.js'
export * from './storage-contract.js'
export { berthSessionId } from './ids.js'
export { DSH_TEXT_KEY, VOCABULARY_TEXT_MAX, berthEvent, harnessEvent, harnessText, turnEndReason, vocabularyFields, type HarnessEventLike } from './vocabulary.js'
export {
  BerthHandlePersistence,
  BerthWriteHandle,
  DSH_ACTIVITY_TTL_MS,
  DSH_EVENT_TYPE,
  DSH_HEADER_TYPE,
  LIVE_WRITE_BATCH_MAX_BYTES,
  LIVE_WRITE_BATCH_MAX_DELAY_MS,
  type BerthHandlePersistenceOptions,
} from './persistence.js'
export {
  IMPORTED_PROVENANCE,
  harnessHistory,
  harnessHistoryOf,
  harnessHistoryOfEvents,
  type HarnessHistory,
  type HarnessHistoryOptions,
  type HarnessProvenance,
} from './history.js'
