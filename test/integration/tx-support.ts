import pg from 'pg';
import { expect } from 'vitest';

/**
 * Asserts the hygiene every transaction test must leave behind: no client checked out of `pool`, and
 * no session of the test database idle in transaction (seen from a separate monitor connection).
 */
export async function expectClean(pool: pg.Pool, url: string): Promise<void> {
  expect(pool.totalCount - pool.idleCount).toBe(0);
  const monitor = new pg.Client({ connectionString: url });
  monitor.on('error', () => {});
  await monitor.connect();
  try {
    const { rows } = await monitor.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()`,
    );
    expect(rows[0]?.n).toBe(0);
  } finally {
    await monitor.end();
  }
}

/** Every SQL text sent by clients of a {@link countingPool}, in order. */
export interface SentLog {
  readonly texts: string[];
}

/**
 * A pool whose clients record every query text they send (to prove that nothing was sent), and call
 * `onQuery` with it just before handing it to pg.
 */
export function countingPool(
  url: string,
  max = 5,
  onQuery: (text: string) => void = () => {},
): { pool: pg.Pool; log: SentLog } {
  const log: SentLog = { texts: [] };
  class CountingClient extends pg.Client {
    // biome-ignore lint/suspicious/noExplicitAny: pg's query has many overloads; this only observes them.
    override query(...args: any[]): any {
      const first = args[0];
      // A statement can travel with others in one flight (BEGIN and the SET LOCALs ahead of an
      // attempt's first statement, a SAVEPOINT ahead and a RELEASE behind a pattern's): the flight
      // names them; the opening is logged as the one text BEGIN and its settings used to be sent as.
      const textOf = (s: unknown) => (typeof s === 'string' ? s : String((s as { text?: unknown }).text));
      const { opening, closing } = (first ?? {}) as { opening?: unknown; closing?: unknown };
      if (Array.isArray(opening) && opening.length > 0) {
        const begin = opening.map(textOf).join('; ');
        log.texts.push(begin);
        onQuery(begin);
      }
      const text = typeof first === 'string' ? first : String((first as { text?: unknown })?.text);
      log.texts.push(text);
      onQuery(text);
      if (Array.isArray(closing)) {
        for (const statement of closing) {
          log.texts.push(textOf(statement));
          onQuery(textOf(statement));
        }
      }
      // biome-ignore lint/suspicious/noExplicitAny: forwards the exact arguments.
      return (super.query as any)(...args);
    }
  }
  const pool = new pg.Pool({ connectionString: url, max, Client: CountingClient });
  return { pool, log };
}
