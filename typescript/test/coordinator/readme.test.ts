/** The README's rc.8 quickstart runs as written (Node 22) and mounts berth as the persistence. */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, expect, it, inject, vi } from 'vitest'

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..')
const scratch = mkdtempSync(join(packageRoot, 'test', '.readme-'))
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

it('README: the rc.8 quickstart mounts BerthCoordinatorBackend as ctx.sessionPersistence', async () => {
  const block = [...readFileSync(join(packageRoot, 'README.md'), 'utf8').matchAll(/```ts\n([\s\S]*?)```/g)][2]?.[1]
  expect(block).toContain('BerthCoordinatorBackend')
  const source = (block as string).replaceAll("'berth-store/dsh-coordinator'", `'${resolve(packageRoot, 'src/dsh-coordinator/index.ts')}'`)
  const file = join(scratch, 'coordinator.ts')
  writeFileSync(file, `${source}\nexport { ctx }\n`)
  vi.stubEnv('BERTH_URL', inject('berthUrl'))
  vi.stubEnv('BERTH_API_KEY', inject('berthServiceKey'))
  const { ctx } = (await import(pathToFileURL(file).href)) as { ctx: { get(name: string): unknown; fiber: { dispose(): Promise<void> } } }
  await new Promise((r) => setTimeout(r, 10))
  const persistence = ctx.get('sessionPersistence') as { name: string; listSnapshots(): Promise<unknown[]> }
  expect(persistence.name).toBe('session-persistence-berth')
  expect(Array.isArray(await persistence.listSnapshots())).toBe(true)
  await ctx.fiber.dispose()
  vi.unstubAllEnvs()
})
