/**
 * The DeepSeek Harness's own packages, loaded on demand (they are optional peer
 * dependencies: a user of the plain client never needs them), and its JSONL backend
 * mounted the way a harness mounts it: a Cordis `Context` with the harness's
 * `SessionStore`, then `JsonlSessionPersistence` with the root and the compression.
 * Every read and write of a JSONL root goes through that backend — berth never parses
 * the harness's files itself.
 */
import { stat } from 'node:fs/promises'
import * as zlib from 'node:zlib'
import type { Context } from '@deepseek-ai/cordis'
import type { SessionHeader } from '@deepseek-ai/dsh-session'
import type { JsonlSessionPersistence } from '@deepseek-ai/dsh-session-persistence-jsonl'
import { MigrationEnvironmentError, MigrationSourceError } from './errors.js'

/** The harness packages this migration runs on, at the versions it is tested with. */
export const HARNESS_PACKAGES = [
  '@deepseek-ai/dsh-session-persistence-jsonl@0.1.0-rc.8',
  '@deepseek-ai/dsh-session-persistence@0.1.0-rc.8',
  '@deepseek-ai/dsh-session@0.1.0-rc.8',
  '@deepseek-ai/cordis@4.0.4',
] as const

export type JsonlCompression = 'zstd' | 'none'

/** The harness's modules the migration uses. */
export interface Harness {
  readonly cordis: typeof import('@deepseek-ai/cordis')
  readonly session: typeof import('@deepseek-ai/dsh-session')
  readonly persistence: typeof import('@deepseek-ai/dsh-session-persistence')
  readonly jsonl: typeof import('@deepseek-ai/dsh-session-persistence-jsonl')
}

/**
 * Loads the harness's packages, refusing plainly when this Node cannot run them (they use
 * `node:zlib`'s Zstandard, Node ≥ 22.15) or when one is not installed.
 */
export async function loadHarness(): Promise<Harness> {
  if (typeof (zlib as { zstdCompress?: unknown }).zstdCompress !== 'function') {
    throw new MigrationEnvironmentError(
      `the DeepSeek Harness JSONL backend needs Node >= 22.15 (node:zlib Zstandard); this is Node ${process.versions.node}`,
    )
  }
  try {
    const [cordis, session, persistence, jsonl] = await Promise.all([
      import('@deepseek-ai/cordis'),
      import('@deepseek-ai/dsh-session'),
      import('@deepseek-ai/dsh-session-persistence'),
      import('@deepseek-ai/dsh-session-persistence-jsonl'),
    ])
    return { cordis, session, persistence, jsonl }
  } catch (error) {
    if ((error as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new MigrationEnvironmentError(
        `a DeepSeek Harness package is not installed (${(error as Error).message.split('\n')[0]}): ` +
          `npm install ${HARNESS_PACKAGES.join(' ')}`,
      )
    }
    throw error
  }
}

/** A JSONL root mounted through the harness's own backend. */
export interface MountedRoot {
  readonly backend: JsonlSessionPersistence
  readonly compression: JsonlCompression
  /** The headers of its sessions, as the backend's `list()` gave them at mount. */
  readonly headers: readonly SessionHeader[]
  dispose(): Promise<void>
}

interface Mounted {
  readonly backend: JsonlSessionPersistence
  dispose(): Promise<void>
}

async function mountOnce(harness: Harness, root: string, compression: JsonlCompression): Promise<Mounted> {
  const ctx: Context = new harness.cordis.Context()
  const dispose = async (): Promise<void> => {
    await (ctx as unknown as { fiber: { dispose(): Promise<void> } }).fiber.dispose()
  }
  ctx.plugin(harness.session.SessionStore)
  await (ctx.plugin(harness.jsonl.JsonlSessionPersistence, { root, compression }) as unknown as Promise<unknown>)
  await new Promise((resolve) => setTimeout(resolve, 0))
  const backend = ctx.get('sessionPersistence') as JsonlSessionPersistence | undefined
  if (backend === undefined) {
    await dispose()
    throw new MigrationSourceError(`the DeepSeek Harness JSONL backend did not start on ${root}`)
  }
  return { backend, dispose }
}

/** Mounts and lists; a root the backend refuses to list is the source's error, with the backend's reason. */
async function mountListed(harness: Harness, root: string, compression: JsonlCompression): Promise<MountedRoot> {
  const mounted = await mountOnce(harness, root, compression)
  try {
    return { ...mounted, compression, headers: await mounted.backend.list() }
  } catch (error) {
    await mounted.dispose()
    if (typeof (error as { code?: unknown }).code === 'string') throw error // the file system's own (EACCES, …)
    throw new MigrationSourceError(`the DeepSeek Harness JSONL backend refuses ${root}: ${(error as Error).message}`, { cause: error })
  }
}

/**
 * Mounts `root` through the harness's JSONL backend. With no `compression`, the root's
 * own encoding: the backend refuses a root of the other encoding, so the one whose
 * listing it accepts is the root's (an empty or absent root: `zstd`, the harness's default).
 * `mustExist`: a source must be an existing directory; a target may be absent (the backend
 * makes it at its first write), but not a file.
 */
export async function mountRoot(harness: Harness, root: string, compression: JsonlCompression | undefined, mustExist: boolean): Promise<MountedRoot> {
  let kind: 'directory' | 'other' | 'absent'
  try {
    kind = (await stat(root)).isDirectory() ? 'directory' : 'other'
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ENOENT') throw error
    kind = 'absent'
  }
  if (kind === 'absent' && mustExist) throw new MigrationSourceError(`no such DeepSeek Harness JSONL root: ${root} (no such directory)`)
  if (kind === 'other') throw new MigrationSourceError(`not a DeepSeek Harness JSONL root: ${root} is not a directory`)
  if (compression !== undefined) return mountListed(harness, root, compression)
  try {
    return await mountListed(harness, root, 'zstd')
  } catch (zstdError) {
    if (!(zstdError instanceof MigrationSourceError)) throw zstdError
    try {
      return await mountListed(harness, root, 'none')
    } catch {
      throw zstdError
    }
  }
}
