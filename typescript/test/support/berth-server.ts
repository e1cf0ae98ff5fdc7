/**
 * Starts a real `berth serve` (never a mock) on a free loopback port with a scratch data
 * directory, and stops it. The binary is `BERTH_BIN`, else the debug build that
 * `scripts/test` makes: `${CARGO_TARGET_DIR:-<repo>/target}/debug/berth`.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'

const repositoryRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')

export function berthBinary(): string {
  const binary = process.env.BERTH_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(repositoryRoot, 'target'), 'debug', 'berth')
  if (!existsSync(binary)) throw new Error(`no berth binary at ${binary}: build it (cargo build -p berth --bin berth) or set BERTH_BIN`)
  return binary
}

export interface BerthServer {
  readonly url: string
  readonly dataDir: string
  /** Creates an API key in the server's key file (keys are read per request, so this works while it runs). */
  createKey(tenant: string, user: string, role: 'service' | 'admin' | 'user'): string
  /** Stops the process, leaving the data directory in place (for a restart on it). */
  stopProcess(): Promise<void>
  /** Stops the process and removes a scratch data directory. */
  stop(): Promise<void>
}

export interface StartOptions {
  /** Serve this existing data directory (a restart); it is then left in place on stop. */
  readonly dataDir?: string
}

export async function startBerthServer(extraArgs: readonly string[] = [], options: StartOptions = {}): Promise<BerthServer> {
  const binary = berthBinary()
  const scratch = options.dataDir === undefined ? mkdtempSync(join(tmpdir(), 'berth-ts-')) : undefined
  const dataDir = options.dataDir ?? join(scratch as string, 'data')
  const createKey = (tenant: string, user: string, role: string): string =>
    execFileSync(binary, ['--data', dataDir, 'keys', 'create', '--tenant', tenant, '--user', user, '--role', role], { encoding: 'utf8' }).trim()
  // A key before the first start, so the server prints no bootstrap admin key.
  if (options.dataDir === undefined) createKey('bootstrap', 'admin', 'admin')
  const child: ChildProcess = spawn(binary, ['serve', '--data', dataDir, '--listen', '127.0.0.1:0', ...extraArgs], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString()
    if (stderr.length > 100_000) stderr = stderr.slice(-50_000)
  })
  const url = await new Promise<string>((resolveUrl, reject) => {
    let stdout = ''
    const timer = setTimeout(() => reject(new Error(`berth serve did not start in 30 s: ${stderr}`)), 30_000)
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
      const match = /berth serve: listening on (http:\/\/\S+)/.exec(stdout)
      if (match?.[1] !== undefined) {
        clearTimeout(timer)
        resolveUrl(match[1])
      }
    })
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`berth serve exited with ${String(code)}: ${stderr}`))
    })
  })
  for (let attempt = 0; attempt < 100; attempt++) {
    try {
      if ((await fetch(`${url}/readyz`)).ok) break
    } catch {
      // Not accepting yet.
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  return {
    url,
    dataDir,
    createKey: (tenant, user, role) => createKey(tenant, user, role),
    stopProcess,
    async stop() {
      await stopProcess()
      if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true })
    },
  }

  async function stopProcess(): Promise<void> {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r))
        child.kill('SIGTERM')
        const timer = setTimeout(() => child.kill('SIGKILL'), 15_000)
        await exited
        clearTimeout(timer)
      }
  }
}
