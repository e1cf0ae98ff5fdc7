/**
 * Harness session ids are arbitrary strings; berth's are `[A-Za-z0-9._~-]{1,128}`. The
 * mapping is injective: ids of safe characters pass through (they never contain `~`),
 * others become `~` + base64url of their UTF-8, and ids too long for either become `~~` +
 * base64url of their SHA-256 (the original is then only in the stored header, which every
 * read checks against the id asked for).
 */
import { createHash } from 'node:crypto'

const BERTH_ID_LENGTH_MAX = 128
const SAFE = /^[A-Za-z0-9._-]+$/

export function berthSessionId(namespace: string, id: string): string {
  if (SAFE.test(id) && namespace.length + id.length <= BERTH_ID_LENGTH_MAX) return namespace + id
  const encoded = `~${Buffer.from(id, 'utf8').toString('base64url')}`
  if (namespace.length + encoded.length <= BERTH_ID_LENGTH_MAX) return namespace + encoded
  return `${namespace}~~${createHash('sha256').update(id, 'utf8').digest('base64url')}`
}

/** Refuses a namespace that could not prefix a berth id (or would break injectivity). */
export function assertNamespace(namespace: string): void {
  if (!/^[A-Za-z0-9._-]*$/.test(namespace) || namespace.length > 64) {
    throw new TypeError(`namespace must be at most 64 characters of [A-Za-z0-9._-], got ${JSON.stringify(namespace)}`)
  }
}
