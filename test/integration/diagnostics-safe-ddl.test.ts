import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { type DdlAttempt, safeDdl } from '../../src/diagnostics/index.js';
import { useTestDatabase } from '../helpers.js';
import { client, pidOf } from './diagnostics-support.js';

const { pool, url } = await useTestDatabase();

beforeAll(async () => {
  await pool.query('CREATE TABLE orders (id int PRIMARY KEY, total int)');
  await pool.query('INSERT INTO orders SELECT g, g FROM generate_series(1, 100) g');
});

const columns = async (table: string) =>
  (
    await pool.query<{ column_name: string }>(
      'SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position',
      [table],
    )
  ).rows.map((r) => r.column_name);

const indexValid = async (name: string) =>
  (
    await pool.query<{ indisvalid: boolean }>(
      'SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass($1)',
      [name],
    )
  ).rows[0]?.indisvalid;

describe('safeDdl', () => {
  it('gives up while a long transaction holds a conflicting lock, retries, and succeeds after it ends', async () => {
    const long = await client(url, 'long-transaction');
    try {
      await long.query('BEGIN');
      await long.query('SELECT count(*) FROM orders'); // ACCESS SHARE until COMMIT
      const seen: DdlAttempt[] = [];
      const r = await safeDdl(pool, 'ALTER TABLE orders ADD COLUMN delivery_notes text', {
        lockTimeout: 100,
        attempts: 10,
        backoff: { baseMs: 5, capMs: 20 },
        onAttempt: async (a) => {
          seen.push(a);
          if (a.attempt === 2) await long.query('COMMIT'); // the long transaction ends after attempt 2
        },
      });
      if (r.isErr()) throw r.error;
      expect(r.value.attempts.map((a) => [a.attempt, a.outcome, a.code])).toEqual([
        [1, 'LockNotAvailable', '55P03'],
        [2, 'LockNotAvailable', '55P03'],
        [3, 'ok', undefined],
      ]);
      expect(seen).toEqual(r.value.attempts);
      expect(r.value.attempts[2]?.delayMs).toBe(0);
      expect(r.value.concurrently).toBe(false);
      expect(await columns('orders')).toContain('delivery_notes');
    } finally {
      await long.end();
    }
  });

  it('lets the readers queued behind its waiting ALTER through when it gives up (no cascade)', async () => {
    const long = await client(url, 'long-transaction');
    const reader = await client(url, 'reader');
    try {
      await long.query('BEGIN');
      await long.query('SELECT count(*) FROM orders'); // ACCESS SHARE until COMMIT
      const readerPid = await pidOf(reader);
      let queued: Promise<string> | undefined; // a read seen waiting behind the ALTER
      let committed = false;
      const ddl = safeDdl(pool, 'ALTER TABLE orders ADD COLUMN gift_wrap boolean', {
        lockTimeout: 1000,
        attempts: 10,
        backoff: { baseMs: 0, capMs: 0 },
        onAttempt: async (a) => {
          if (a.outcome === 'ok' || queued === undefined || committed) return;
          // This attempt gave up: the read queued behind it must finish now, with the long
          // transaction still open (bounded: 10 s would mean it is stuck), and only then does the
          // long transaction end.
          const stuck = new Promise<string>((r) => setTimeout(() => r('stuck'), 10_000).unref());
          expect(await Promise.race([queued, stuck])).toBe('read');
          await long.query('COMMIT');
          committed = true;
        },
      });
      // Queue a read behind a waiting attempt (bounded monitor polls; a read sent between two
      // attempts just runs, and another one is sent).
      const deadline = Date.now() + 15_000;
      for (let tries = 0; tries < 20 && queued === undefined && Date.now() < deadline; tries++) {
        for (;;) {
          const { rows } = await pool.query(
            "SELECT 1 FROM pg_locks WHERE relation = 'orders'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted",
          );
          if (rows.length > 0 || Date.now() > deadline) break;
          await new Promise((r) => setTimeout(r, 5));
        }
        let done = false;
        const read = reader.query('SELECT count(*) FROM orders').then(() => {
          done = true;
          return 'read';
        });
        while (!done && Date.now() < deadline) {
          const { rows } = await pool.query('SELECT cardinality(pg_blocking_pids($1)) > 0 AS blocked', [
            readerPid,
          ]);
          if (rows[0]?.blocked) {
            queued = read;
            break;
          }
          await new Promise((r) => setTimeout(r, 5));
        }
        if (queued === undefined) await read;
      }
      const r = await ddl;
      if (r.isErr()) throw r.error;
      expect(queued).toBeDefined();
      expect(committed).toBe(true);
      expect(r.value.attempts.at(-1)?.outcome).toBe('ok');
      expect(r.value.attempts.slice(0, -1).every((a) => a.outcome === 'LockNotAvailable')).toBe(true);
      expect(await columns('orders')).toContain('gift_wrap');
    } finally {
      await long.end();
      await reader.end();
    }
  });

  it('reports RetriesExhausted with the history when the lock never frees', async () => {
    const long = await client(url, 'long-transaction');
    try {
      await long.query('BEGIN');
      await long.query('LOCK TABLE orders IN ACCESS SHARE MODE');
      const r = await safeDdl(pool, 'ALTER TABLE orders ADD COLUMN never_added int', {
        lockTimeout: '50ms',
        attempts: 3,
        backoff: { baseMs: 1, capMs: 5 },
      });
      expect(r.isErr() && r.error.kind).toBe('RetriesExhausted');
      if (r.isOk() || r.error.kind !== 'RetriesExhausted') throw new Error('expected RetriesExhausted');
      expect(r.error.attempts).toBe(3);
      expect(r.error.history.map((h) => h.kind)).toEqual([
        'LockNotAvailable',
        'LockNotAvailable',
        'LockNotAvailable',
      ]);
      expect(r.error.last.kind).toBe('LockNotAvailable');
      await long.query('ROLLBACK');
      expect(await columns('orders')).not.toContain('never_added');
    } finally {
      await long.end();
    }
  });

  it('does not retry an error that is not about locks', async () => {
    const r = await safeDdl(pool, 'ALTER TABLE no_such_table ADD COLUMN x int', { attempts: 5 });
    expect(r.isErr() && r.error.kind).toBe('DbError');
    expect(r.isErr() && 'code' in r.error && r.error.code).toBe('42P01');
  });

  it('refuses CREATE INDEX CONCURRENTLY inside a transaction, and runs it with concurrently: true', async () => {
    const refused = await safeDdl(pool, 'CREATE INDEX CONCURRENTLY orders_total_idx ON orders (total)');
    expect(refused.isErr() && refused.error.kind).toBe('InvalidOptions');
    expect(refused.isErr() && refused.error.message).toContain(
      'CREATE INDEX CONCURRENTLY cannot run inside a transaction block',
    );
    expect(await indexValid('orders_total_idx')).toBeUndefined(); // nothing was sent

    const done = await safeDdl(pool, 'CREATE INDEX CONCURRENTLY orders_total_idx ON orders (total)', {
      concurrently: true,
    });
    if (done.isErr()) throw done.error;
    expect(done.value.concurrently).toBe(true);
    expect(await indexValid('orders_total_idx')).toBe(true);
    // The pooled client went back with the role's defaults.
    const settings = await pool.query("SELECT current_setting('lock_timeout') AS lt");
    expect(settings.rows[0]).toEqual({ lt: '0' });

    const dropped = await safeDdl(pool, 'DROP INDEX CONCURRENTLY orders_total_idx', { concurrently: true });
    expect(dropped.isOk()).toBe(true);
    expect(await indexValid('orders_total_idx')).toBeUndefined();
  });

  it('drops the INVALID index a failed CREATE INDEX CONCURRENTLY left before retrying', async () => {
    const writer = await client(url, 'open-writer');
    try {
      // A writer's open transaction: CIC waits for it (a virtualxid lock) and lock_timeout fires after
      // the index entry exists, leaving it INVALID.
      await writer.query('BEGIN');
      await writer.query('UPDATE orders SET total = total + 1 WHERE id = 1');
      const r = await safeDdl(pool, 'CREATE INDEX CONCURRENTLY orders_total2_idx ON public.orders (total)', {
        concurrently: true,
        lockTimeout: 100,
        attempts: 5,
        backoff: { baseMs: 1, capMs: 5 },
        onAttempt: async (a) => {
          if (a.attempt === 1) {
            expect(a.outcome).toBe('LockNotAvailable');
            expect(await indexValid('orders_total2_idx')).toBe(false);
            await writer.query('COMMIT');
          }
        },
      });
      if (r.isErr()) throw r.error;
      expect(r.value.attempts.map((a) => [a.outcome, a.droppedInvalidIndex])).toEqual([
        ['LockNotAvailable', null],
        ['ok', '"public"."orders_total2_idx"'],
      ]);
      expect(await indexValid('orders_total2_idx')).toBe(true);
    } finally {
      await writer.end();
    }
  });

  it('refuses what it cannot run safely, before sending anything', async () => {
    const cases: [string, object, string][] = [
      ['VACUUM orders', {}, 'VACUUM cannot run inside a transaction block'],
      ['BEGIN; ALTER TABLE orders ADD COLUMN z int; COMMIT', {}, 'BEGIN is not allowed'],
      ['CREATE INDEX CONCURRENTLY ON orders (total)', { concurrently: true }, 'name the index'],
      ['SELECT 1; SELECT 2', { concurrently: true }, 'one statement per call'],
      ['ALTER TABLE orders ADD COLUMN z int', { lockTimeout: 0 }, 'a timeout must be at least 1 ms'],
      ['ALTER TABLE orders ADD COLUMN z int', { attempts: 0 }, 'attempts'],
      ['  -- only a comment', {}, 'no statement'],
    ];
    for (const [sql, options, message] of cases) {
      const r = await safeDdl(pool, sql, options);
      expect(r.isErr() && r.error.kind, sql).toBe('InvalidOptions');
      expect(r.isErr() && r.error.message, sql).toContain(message);
    }
    expect(await columns('orders')).not.toContain('z');
  });

  it('returns ConnectionLost (and does not crash the process) when its backend is terminated mid-attempt', async () => {
    const long = await client(url, 'long-transaction');
    try {
      await long.query('BEGIN');
      await long.query('SELECT count(*) FROM orders');
      const ddl = safeDdl(pool, 'ALTER TABLE orders ADD COLUMN cut_off int', {
        lockTimeout: '20s',
        attempts: 3,
      });
      // The attempt waits for ACCESS EXCLUSIVE: terminate its backend (bounded monitor polls).
      let waiter: number | undefined;
      for (let i = 0; i < 1000 && waiter === undefined; i++) {
        const { rows } = await pool.query<{ pid: number }>(
          "SELECT pid FROM pg_locks WHERE relation = 'orders'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted",
        );
        waiter = rows[0]?.pid;
        if (waiter === undefined) await new Promise((r) => setTimeout(r, 10));
      }
      expect(waiter).toBeDefined();
      await pool.query('SELECT pg_terminate_backend($1)', [waiter]);
      const r = await ddl;
      expect(r.isErr() && r.error.kind).toBe('ConnectionLost');
      expect(r.isErr() && r.error.kind === 'ConnectionLost' && r.error.code).toBe('57P01');
      await long.query('ROLLBACK');
      expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]); // the pool is healthy
    } finally {
      await long.end();
    }
  });

  it('stops retrying when its signal aborts', async () => {
    const long = await client(url, 'long-transaction');
    const controller = new AbortController();
    try {
      await long.query('BEGIN');
      await long.query('LOCK TABLE orders IN ACCESS SHARE MODE');
      const r = await safeDdl(pool, 'ALTER TABLE orders ADD COLUMN aborted int', {
        lockTimeout: 50,
        attempts: 100,
        backoff: { baseMs: 1, capMs: 5 },
        signal: controller.signal,
        onAttempt: (a) => {
          if (a.attempt === 2) controller.abort();
        },
      });
      expect(r.isErr() && r.error.kind).toBe('RetriesExhausted');
      expect(r.isErr() && r.error.kind === 'RetriesExhausted' && r.error.attempts).toBe(2);
      await long.query('ROLLBACK');
    } finally {
      await long.end();
    }
  });

  it('finds a COMMIT hidden from a standard_conforming_strings = on reading when the session has it off', async () => {
    // Read with standard strings, the COMMIT is inside one literal; with backslash escapes (the session's
    // setting here) the literal ends early and the COMMIT runs.
    const legacy = new pg.Pool({
      connectionString: url,
      max: 1,
      options: '-c standard_conforming_strings=off',
    });
    legacy.on('error', () => {});
    try {
      const sql = String.raw`ALTER TABLE orders ADD COLUMN hidden_commit int; SELECT 'a\'' ; COMMIT ; --'`;
      const r = await safeDdl(legacy, sql);
      expect(r.isErr() && r.error.kind).toBe('InvalidOptions');
      expect(r.isErr() && r.error.message).toContain('COMMIT');
      expect(await columns('orders')).not.toContain('hidden_commit');
    } finally {
      await legacy.end();
    }
  });

  it("gives the pooled connection back with the session's own settings (concurrently: true)", async () => {
    const own = new pg.Pool({ connectionString: url, max: 1 });
    own.on('error', () => {});
    // The application's own session settings, set when a connection opens.
    own.on('connect', (c) => {
      void c.query("SET lock_timeout = '7s'; SET statement_timeout = '9s'");
    });
    try {
      await own.query('SELECT 1');
      const r = await safeDdl(own, 'CREATE INDEX CONCURRENTLY orders_settings_idx ON orders (total)', {
        concurrently: true,
        lockTimeout: 100,
        statementTimeout: 5000,
      });
      expect(r.isOk()).toBe(true);
      const { rows } = await own.query<{ l: string; s: string }>(
        "SELECT current_setting('lock_timeout') AS l, current_setting('statement_timeout') AS s",
      );
      expect(rows[0]).toEqual({ l: '7s', s: '9s' });
    } finally {
      await own.end();
    }
  });

  it('refuses a timeout of 0 (one meaning everywhere: omit the option for no limit)', async () => {
    for (const options of [{ lockTimeout: 0 }, { lockTimeout: '0ms' }, { statementTimeout: 0 }]) {
      const r = await safeDdl(pool, 'ALTER TABLE orders ADD COLUMN zero_timeout int', options);
      expect(r.isErr() && r.error.kind).toBe('InvalidOptions');
      expect(r.isErr() && r.error.message).toContain('omit the option for no limit');
    }
    expect(await columns('orders')).not.toContain('zero_timeout');
  });
});
