/** The rc.8 adapter's entry imports on Node 20 (types, constants) and refuses to run there, plainly. */
import { expect, it } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import { BerthCoordinatorBackend, COORDINATOR_NODE_MAJOR_MIN } from '../src/dsh-coordinator/index.js'

it('BerthCoordinatorBackend refuses a Node older than 22 with a clear message', () => {
  const make = (): unknown => new BerthCoordinatorBackend(new Context(), { baseUrl: 'http://127.0.0.1:9', apiKey: 'unused' })
  if (Number(process.versions.node.split('.')[0]) < COORDINATOR_NODE_MAJOR_MIN) {
    expect(make).toThrow(/needs Node >= 22/)
  } else {
    // On Node 22 the floor passes (what fails then is only this bare context, not the Node check).
    expect(() => { try { make() } catch (error) { if (/needs Node/.test(String(error))) throw error } }).not.toThrow()
  }
})
