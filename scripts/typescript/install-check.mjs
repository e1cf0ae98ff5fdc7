#!/usr/bin/env node
/**
 * The install path, taken as a user takes it: `npm pack` the package in typescript/, check
 * the tarball holds every file its `exports` name, install it into a fresh project outside
 * the repository, and run the README's client quickstart there as written — the block
 * between `<!-- quickstart:begin -->` and `<!-- quickstart:end -->`, compiled by the
 * package's own tsc against the installed package's types — against a real `berth serve`
 * on a scratch data directory.
 *
 * Everything it makes is under WORK_DIR, emptied first (so a rerun starts fresh); the only
 * write inside the repository is `npm pack`'s prepack rebuild of the ignored typescript/dist.
 *
 * Usage: node scripts/typescript/install-check.mjs BERTH_BINARY WORK_DIR [TARBALL]
 * (scripts/typescript/run passes target/debug/berth, ${CARGO_TARGET_DIR:-target}/ts-install and
 * the tarball scripts/dist built into target/dist, when there is one: then that tarball, the
 * file a user installs, is checked and installed instead of a fresh `npm pack`)
 */
import { execFileSync, spawn } from 'node:child_process'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const SERVER_START_MS_MAX = 30_000
const SERVER_STOP_MS_MAX = 15_000
const QUICKSTART_MS_MAX = 60_000

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../typescript')
const [berthBinary, workDirArgument, tarballArgument] = process.argv.slice(2)
if (berthBinary === undefined || workDirArgument === undefined) {
  throw new Error('usage: install-check.mjs BERTH_BINARY WORK_DIR')
}
const workDir = resolve(workDirArgument)
const projectDir = join(workDir, 'project')

function run(command, args, options = {}) {
  return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], ...options })
}

/** `npm pack` into WORK_DIR (or, given TARBALL, only its file list: `--dry-run` on the
 * tarball itself); returns the tarball's path after checking its file list. */
function pack() {
  const packArguments = tarballArgument === undefined
    ? ['pack', '--json', '--loglevel=error', '--pack-destination', workDir]
    : ['pack', '--json', '--loglevel=error', '--dry-run', resolve(tarballArgument)]
  const [report] = JSON.parse(run('npm', packArguments, { cwd: tarballArgument === undefined ? packageRoot : workDir }))
  if (tarballArgument !== undefined) report.filename = resolve(tarballArgument)
  const files = new Set(report.files.map((file) => file.path))
  const manifest = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8'))
  const targets = [manifest.main, manifest.types, ...Object.values(manifest.exports).flatMap((entry) => (typeof entry === 'string' ? [entry] : Object.values(entry)))]
  const missing = ['README.md', 'package.json', ...targets.map((target) => target.replace(/^\.\//, ''))].filter((path) => !files.has(path))
  const stray = [...files].filter((path) => !path.startsWith('dist/') && path !== 'README.md' && path !== 'package.json')
  if (missing.length > 0 || stray.length > 0) {
    throw new Error(`tarball ${report.filename}: missing ${JSON.stringify(missing)}, not meant to ship ${JSON.stringify(stray)}`)
  }
  console.log(`install check: packed ${report.filename} (${report.files.length} files, ${report.size} bytes)`)
  return tarballArgument === undefined ? join(workDir, report.filename) : resolve(tarballArgument)
}

/** The README's client quickstart: the ```ts block between the quickstart markers. */
function quickstartSource() {
  const readme = readFileSync(join(packageRoot, 'README.md'), 'utf8')
  const marked = /<!-- quickstart:begin -->\n```ts\n([\s\S]*?)```\n<!-- quickstart:end -->/.exec(readme)
  if (marked?.[1] === undefined) throw new Error('README.md: no ```ts block between <!-- quickstart:begin --> and <!-- quickstart:end -->')
  return marked[1]
}

/** A fresh ESM project with the tarball installed and the quickstart compiled in it. */
function makeProject(tarball) {
  mkdirSync(projectDir, { recursive: true })
  writeFileSync(join(projectDir, 'package.json'), `${JSON.stringify({ name: 'berth-store-install-check', private: true, type: 'module' }, null, 2)}\n`)
  // --offline: no dependencies and only optional peers, so installing the tarball needs no
  // registry (the way a user installs it before it is published).
  run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', tarball], { cwd: projectDir })
  writeFileSync(join(projectDir, 'quickstart.ts'), quickstartSource())
  // The user's side: strict, NodeNext, the installed package's own .d.ts checked too
  // (no skipLibCheck); @types/node from the package's dev install, the one thing borrowed.
  const tsconfig = {
    compilerOptions: {
      target: 'ES2022', lib: ['ES2023'], module: 'NodeNext', moduleResolution: 'NodeNext', strict: true,
      skipLibCheck: false, types: ['node'], typeRoots: [join(packageRoot, 'node_modules/@types')],
    },
    files: ['quickstart.ts'],
  }
  writeFileSync(join(projectDir, 'tsconfig.json'), `${JSON.stringify(tsconfig, null, 2)}\n`)
  run(process.execPath, [join(packageRoot, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: projectDir, stdio: 'inherit' })
}

/** `berth serve` on a free loopback port over a scratch data directory, with a service key. */
async function startServer() {
  const dataDir = join(workDir, 'berth-data')
  // The key exists before the first start, so the server prints no bootstrap admin key.
  const apiKey = run(berthBinary, ['--data', dataDir, 'keys', 'create', '--tenant', 'acme', '--user', 'agent', '--role', 'service']).trim()
  const child = spawn(berthBinary, ['serve', '--data', dataDir, '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk) => { stderr = (stderr + chunk.toString()).slice(-20_000) })
  const url = await new Promise((resolveUrl, reject) => {
    let stdout = ''
    const timer = setTimeout(() => reject(new Error(`berth serve did not start in ${SERVER_START_MS_MAX} ms: ${stderr}`)), SERVER_START_MS_MAX)
    child.stdout.on('data', (chunk) => {
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
  async function stop() {
    if (child.exitCode !== null || child.signalCode !== null) return
    const exited = new Promise((r) => child.once('exit', r))
    child.kill('SIGTERM')
    const timer = setTimeout(() => child.kill('SIGKILL'), SERVER_STOP_MS_MAX)
    await exited
    clearTimeout(timer)
  }
  return { url, apiKey, stop }
}

/** Runs the compiled quickstart on this Node; resolves to its stdout. */
function runQuickstart(server) {
  return new Promise((resolveOutput, reject) => {
    const child = spawn(process.execPath, ['quickstart.js'], {
      cwd: projectDir,
      env: { ...process.env, BERTH_URL: server.url, BERTH_API_KEY: server.apiKey },
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    let stdout = ''
    child.stdout.on('data', (chunk) => { stdout += chunk.toString() })
    const timer = setTimeout(() => child.kill('SIGKILL'), QUICKSTART_MS_MAX)
    child.once('exit', (code, signal) => {
      clearTimeout(timer)
      if (code === 0) resolveOutput(stdout)
      else reject(new Error(`the quickstart exited with ${String(code ?? signal)}; its output:\n${stdout}`))
    })
  })
}

rmSync(workDir, { recursive: true, force: true })
mkdirSync(workDir, { recursive: true })
makeProject(pack())
// The handle-seam entry loads with no peer installed (it imports none at run time).
run(process.execPath, ['--input-type=module', '-e', "await import('berth-store/dsh')"], { cwd: projectDir })
const server = await startServer()
try {
  const output = await runQuickstart(server)
  // The quickstart's deliberate conflict: a second append at expected_seq 0 over a log of 2.
  if (!/^the log is at 2$/m.test(output)) throw new Error(`the quickstart ran but did not report the seq conflict; its output:\n${output}`)
  console.log(`install check: the README quickstart ran from the installed tarball on node ${process.version} against ${server.url}`)
} finally {
  await server.stop()
}
