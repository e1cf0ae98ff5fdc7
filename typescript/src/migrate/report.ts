/**
 * What a migration run did — the same report as Python's `berth-migrate`
 * (`python/berth/migrate/report.py`): counts, the records it skipped and why, the
 * sessions found changed, a progress line on stderr (rate and ETA), and the final report
 * as text or as JSON (`--json`).
 */

/** Where the progress line goes: a stream with `write` (stderr on a terminal). */
export interface ProgressStream {
  write(text: string): unknown
}

export interface ReportEntry {
  /** The session the entry is about (the harness session id). */
  readonly session: string
  /** Which records of it (`event 12`, `events 3..9`, `session`, `torn tail`). */
  readonly record: string
  readonly reason: string
}

/** The JSON report (`--json`): the keys Python's `berth-migrate` prints, with `events` as the unit. */
export interface ReportJson {
  readonly direction: 'import' | 'export'
  readonly source: string
  readonly target: string
  readonly dry_run: boolean
  readonly sessions: number
  readonly sessions_imported: number
  readonly sessions_unchanged: number
  readonly events: number
  readonly events_unchanged: number
  readonly pending_write_groups: number
  readonly bytes: number
  readonly skipped: readonly ReportEntry[]
  readonly changed: readonly ReportEntry[]
  readonly seconds: number
  /** With `--user-map`: sessions per berth user they were (or would be) imported under. */
  readonly users?: Readonly<Record<string, number>>
}

export class Report {
  /** Source sessions seen. */
  sessions = 0
  /** Sessions that got new events. */
  imported = 0
  /** Sessions that had none to take (the target already held them). */
  unchanged = 0
  /** Events written (a dry run: that would be written). */
  records = 0
  /** Events the target already held. */
  recordsUnchanged = 0
  /** Bytes of the events written: their JSON text. */
  bytes = 0
  readonly skipped: ReportEntry[] = []
  readonly changed: ReportEntry[] = []
  /** With `--user-map`: sessions per berth user they were (or would be) imported under. */
  users: Map<string, number> | undefined = undefined
  /** Sessions to go through, for the ETA. */
  total: number | undefined = undefined
  /** Where the progress line goes (none: no progress line). */
  progress: ProgressStream | undefined = undefined
  private readonly started = performance.now()
  private lastLine = 0

  constructor(
    readonly direction: 'import' | 'export',
    readonly source: string,
    readonly target: string,
    readonly dryRun = false,
    /** The program name the text report starts with. */
    readonly program = 'berth-store migrate',
  ) {}

  skip(session: string, record: string, reason: string): void {
    this.skipped.push({ session, record, reason })
  }

  /** One more session imported under `user` (`--user-map`). */
  owned(user: string): void {
    if (this.users !== undefined) this.users.set(user, (this.users.get(user) ?? 0) + 1)
  }

  /** `users` sorted by user, as Python's report prints them. */
  private sortedUsers(): [string, number][] | undefined {
    if (this.users === undefined) return undefined
    return [...this.users.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  }

  change(session: string, record: string, reason: string): void {
    this.changed.push({ session, record, reason })
  }

  /**
   * Puts the entries in the order of the sessions (`ids`: the source's order), each
   * session's in the order they were made: sessions moved concurrently report in the
   * order a sequential run would.
   */
  orderBy(ids: readonly string[]): void {
    const rank = new Map(ids.map((id, index) => [id, index]))
    const order = (entries: ReportEntry[]): void => {
      const sorted = entries
        .map((entry, index) => ({ entry, index }))
        .sort((a, b) => (rank.get(a.entry.session) ?? ids.length) - (rank.get(b.entry.session) ?? ids.length) || a.index - b.index)
      entries.splice(0, entries.length, ...sorted.map(({ entry }) => entry))
    }
    order(this.skipped)
    order(this.changed)
  }

  /** The progress line (at most ten a second): sessions done, events, rate, ETA. */
  tick(force = false): void {
    if (this.progress === undefined) return
    const now = performance.now()
    if (!force && now - this.lastLine < 100) return
    this.lastLine = now
    const elapsed = Math.max((now - this.started) / 1000, 1e-6)
    const rate = this.records / elapsed
    let line = `\r${this.direction}: ${this.sessions}`
    if (this.total) {
      const done = this.sessions / this.total
      const eta = done > 0 ? elapsed / done - elapsed : 0
      line += `/${this.total} sessions (${Math.round(done * 100)}%), ETA ${eta.toFixed(0)}s`
    } else {
      line += ' sessions'
    }
    line += `, ${this.records} events (${rate.toFixed(0)}/s)`
    this.progress.write(line)
    if (force) this.progress.write('\n')
  }

  /** Nothing skipped and nothing changed: the target holds everything. */
  get clean(): boolean {
    return this.skipped.length === 0 && this.changed.length === 0
  }

  seconds(): number {
    return Math.round(performance.now() - this.started) / 1000
  }

  toJSON(): ReportJson {
    return {
      direction: this.direction,
      source: this.source,
      target: this.target,
      dry_run: this.dryRun,
      sessions: this.sessions,
      sessions_imported: this.imported,
      sessions_unchanged: this.unchanged,
      events: this.records,
      events_unchanged: this.recordsUnchanged,
      pending_write_groups: 0,
      bytes: this.bytes,
      skipped: this.skipped,
      changed: this.changed,
      seconds: this.seconds(),
      ...(this.users === undefined ? {} : { users: Object.fromEntries(this.sortedUsers() ?? []) }),
    }
  }

  text(): string {
    const verb = this.dryRun ? 'would write' : 'wrote'
    let out = `${this.program} ${this.direction} ${this.source} -> ${this.target}: ${this.sessions} sessions ` +
      `(${this.imported} with new records, ${this.unchanged} unchanged); ${verb} ${this.records} events ` +
      `(${this.bytes} bytes), ${this.recordsUnchanged} already there, in ${this.seconds()}s\n`
    const users = this.sortedUsers()
    if (users !== undefined) out += `  users: ${users.map(([user, count]) => `${user} ${count}`).join(', ') || 'none'}\n`
    for (const entry of this.changed) out += `  changed: ${entry.session} ${entry.record}: ${entry.reason}\n`
    for (const entry of this.skipped) out += `  skipped: ${entry.session} ${entry.record}: ${entry.reason}\n`
    return out
  }
}
