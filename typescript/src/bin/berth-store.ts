#!/usr/bin/env node
/**
 * The `berth-store` command (the package's `bin`): `berth-store migrate …` moves DeepSeek
 * Harness JSONL roots into berth and back (`../migrate/cli.ts`).
 */
import { migrateMain, USAGE } from '../migrate/cli.js'

const [command, ...rest] = process.argv.slice(2)
const io = { stdout: process.stdout, stderr: process.stderr, env: process.env }
if (command === 'migrate') {
  process.exitCode = await migrateMain(rest, io)
} else if (command === undefined || command === '-h' || command === '--help') {
  process.stdout.write(`usage: berth-store migrate …\n\n${USAGE}`)
  process.exitCode = command === undefined ? 2 : 0
} else {
  process.stderr.write(`berth-store: unknown command ${JSON.stringify(command)}: the one command is \`migrate\` (berth-store migrate --help)\n`)
  process.exitCode = 2
}
