/**
 * vitest global setup: builds the package (the multi-process tests run its `dist/` in
 * child processes), starts one `berth serve` for the run, and stops it afterwards.
 */
import { execFileSync } from 'node:child_process'
import { resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { TestProject } from 'vitest/node'
import { startBerthServer } from './berth-server.js'

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

declare module 'vitest' {
  export interface ProvidedContext {
    berthUrl: string
    berthServiceKey: string
    berthDataDir: string
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  execFileSync(process.execPath, [resolve(packageRoot, 'node_modules/typescript/bin/tsc'), '-p', resolve(packageRoot, 'tsconfig.json')], { stdio: 'inherit' })
  // No rate limit: the suites run many small requests from one tenant at once.
  const server = await startBerthServer(['--rate-per-tenant', '0'])
  project.provide('berthUrl', server.url)
  project.provide('berthServiceKey', server.createKey('dsh', 'agent', 'service'))
  project.provide('berthDataDir', server.dataDir)
  return () => server.stop()
}
