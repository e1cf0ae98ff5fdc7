/**
 * The README's quickstarts run as written (imports pointed at the sources) against the
 * test server, so the documentation cannot drift from the package.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it, inject, vi } from 'vitest'

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const scratch = mkdtempSync(join(packageRoot, 'test', '.readme-'))
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

function snippets(): string[] {
  const readme = readFileSync(join(packageRoot, 'README.md'), 'utf8')
  return [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1] as string)
}

async function run(index: number, code: string): Promise<void> {
  const source = code
    .replaceAll("'berth-store/dsh-coordinator'", `'${resolve(packageRoot, 'src/dsh-coordinator/index.ts')}'`)
    .replaceAll("'berth-store/dsh'", `'${resolve(packageRoot, 'src/dsh/index.ts')}'`)
    .replaceAll("'berth-store'", `'${resolve(packageRoot, 'src/index.ts')}'`)
  const file = join(scratch, `snippet-${index}.ts`)
  writeFileSync(file, `${source}\nexport {}\n`)
  await import(pathToFileURL(file).href)
}

describe('README quickstarts', () => {
  it('the client quickstart and the handle-seam quickstart run against a real server', async () => {
    const blocks = snippets()
    expect(blocks.length).toBe(3)
    vi.stubEnv('BERTH_URL', inject('berthUrl'))
    vi.stubEnv('BERTH_API_KEY', inject('berthServiceKey'))
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined)
    await run(0, blocks[0] as string) // it makes a new session id on every run
    expect(log.mock.calls.some((call) => call[0] === 'the log is at' && call[1] === 2)).toBe(true)
    await run(1, (blocks[1] as string).replaceAll("'session-1'", `'readme-${Date.now()}'`))
    log.mockRestore()
    vi.unstubAllEnvs()
  })
})
