/**
 * `berth-store`: a typed client for berth's `/v1` HTTP API (`BerthClient`), its typed
 * errors, and the live tail. DeepSeek Harness persistence on berth is in `berth-store/dsh`
 * (the handle seam) and `berth-store/dsh-coordinator` (the published rc.8 seam, Node ≥ 22).
 * `conversation` reads any framework's session as neutral messages, calls and results.
 */
export * from './client.js'
export * from './errors.js'
export { parseSse, type SseMessage, type TailOptions } from './tail.js'
export {
  CONTENT_DEPTH_MAX,
  ConversationReader,
  LABEL_CHARS_MAX,
  argumentsValue,
  contentText,
  conversation,
  readConversation,
  resultOutput,
  type ContentText,
  type ConversationEvent,
  type ConversationItem,
  type Message,
  type MessageRole,
  type ToolCall,
  type ToolResult,
} from './history.js'
export type { components, operations, paths } from './generated/openapi.js'
