/**
 * Reading a range of a berth log fast: a range of more than one page learns the log's end
 * first (one `before=` read of the tail) and then reads its pages concurrently, checking
 * that they join up. Resume reads whole logs, so this is what its time is made of.
 */
import { READ_PAGE_MAX, type BerthClient, type EventRecord } from '../client.js'
import { SessionPersistenceCorruptionError } from './errors.js'

const READ_CONCURRENCY = 4

/** berth events `[from, before)`, or to the end (as of the first read) when `before` is undefined. */
export async function readEventRange(client: BerthClient, berthId: string, from: number, before: number | undefined, signal?: AbortSignal): Promise<EventRecord[]> {
  const options = signal === undefined ? {} : { signal }
  if (before !== undefined && before - from <= READ_PAGE_MAX) {
    if (before <= from) return []
    return (await client.readEvents(berthId, { from, limit: before - from }, options)).events
  }
  const nextSeq = await client.nextSeq(berthId, options)
  const end = before === undefined ? nextSeq : Math.min(before, nextSeq)
  const starts: number[] = []
  for (let start = from; start < end; start += READ_PAGE_MAX) starts.push(start)
  const pages = await mapConcurrently(starts, READ_CONCURRENCY, (start) =>
    client.readEvents(berthId, { from: start, limit: Math.min(READ_PAGE_MAX, end - start) }, options))
  const records = pages.flatMap((page) => page.events)
  records.forEach((record, index) => {
    if (record.seq !== from + index) throw new SessionPersistenceCorruptionError(`berth session "${berthId}": read seq ${record.seq} where ${from + index} was due`)
  })
  return records
}

async function mapConcurrently<T, R>(items: readonly T[], concurrency: number, map: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length)
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++
      results[index] = await map(items[index] as T)
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker))
  return results
}
