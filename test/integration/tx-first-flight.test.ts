import pg from 'pg';
import oldestPg from 'pg-oldest';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { type FirstFlightClass, firstFlightClass } from '../../src/tx/first-flight.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import { countingPool, expectClean } from './tx-support.js';

// BEGIN, its SET LOCALs and the callback's first statement go out in one flight (one Sync). These
// tests refuse or cut that flight every way it can be, and check the table afterwards: the statement
// never runs outside its transaction.
const { pool, url } = await useTestDatabase();
const proxy = await FaultProxy.start({ target: url });
const proxied = new pg.Pool({ connectionString: proxy.url, max: 2 });
proxied.on('error', () => {});

beforeAll(async () => {
  await pool.query('CREATE TABLE ff (id int PRIMARY KEY, note text NOT NULL)');
});

beforeEach(async () => {
  await pool.query('TRUNCATE ff');
});

afterEach(async () => {
  proxy.resume();
  await expectClean(pool, url);
});

afterAll(async () => {
  await proxied.end();
  await proxy.close();
});

const rowsInTable = async () =>
  (await pool.query<{ id: number }>('SELECT id FROM ff ORDER BY id')).rows.map((r) => r.id);

/** A flight sent straight on a client, then rolled back: what reached the table? */
async function fly(opening: readonly string[], text: string, values?: unknown[]) {
  const client = await pool.connect();
  try {
    const Flight = firstFlightClass(client) as FirstFlightClass;
    const flight = new Flight(opening, text, values);
    const outcome = await client.query(flight as unknown as pg.QueryConfig).then(
      (result) => ({ ok: true as const, result }),
      (error: unknown) => ({ ok: false as const, error: error as { code?: string } }),
    );
    // Whatever happened, end the transaction without committing it.
    await client.query('ROLLBACK');
    return { outcome, beginFailed: flight.beginFailed };
  } finally {
    client.release();
  }
}

describe('the first flight on its own', () => {
  it('a setting the server rejects: the statement behind it never runs', async () => {
    const { outcome, beginFailed } = await fly(
      ['BEGIN', "SET LOCAL lock_timeout = 'not a duration'"],
      'INSERT INTO ff VALUES (1, $1)',
      ['after a refused setting'],
    );
    expect(outcome.ok).toBe(false);
    expect(!outcome.ok && outcome.error.code).toBe('22023');
    expect(beginFailed).toBe(true);
    expect(await rowsInTable()).toEqual([]);
  });

  it('a refused first statement in place of BEGIN: what comes after it never runs, not even in autocommit', async () => {
    const { outcome, beginFailed } = await fly(['SELECT 1 / 0', 'BEGIN'], 'INSERT INTO ff VALUES (2, $1)', [
      'after a refused BEGIN',
    ]);
    expect(!outcome.ok && outcome.error.code).toBe('22012');
    expect(beginFailed).toBe(true);
    expect(await rowsInTable()).toEqual([]);
  });

  it("its result is pg's own: rows, fields, rowMode 'array', custom types, values", async () => {
    const client = await pool.connect();
    try {
      const Flight = firstFlightClass(client) as FirstFlightClass;
      const types = { getTypeParser: () => (value: string) => `parsed:${value}` };
      const configs: pg.QueryConfig[] = [
        { text: 'SELECT 1::int AS a, $1::text AS b, now() IS NOT NULL AS c', values: ['x'] },
        { text: 'SELECT generate_series(1, 3) AS n' },
        { text: "SELECT 1::int AS a, 'b'::text AS b", rowMode: 'array' } as pg.QueryConfig,
        { text: 'SELECT 42::int AS a', types } as pg.QueryConfig,
        { text: 'INSERT INTO ff VALUES (7, $1) RETURNING *', values: ['ret'] },
      ];
      for (const config of configs) {
        await client.query('BEGIN');
        const plain = await client.query(config);
        await client.query('ROLLBACK');
        const flown = await client.query(
          new Flight(['BEGIN'], config, undefined) as unknown as pg.QueryConfig,
        );
        await client.query('ROLLBACK');
        for (const key of ['command', 'rowCount', 'rows', 'rowAsArray'] as const) {
          expect(flown[key as keyof typeof flown]).toEqual(plain[key as keyof typeof plain]);
        }
        expect(flown.fields.map((f) => [f.name, f.dataTypeID])).toEqual(
          plain.fields.map((f) => [f.name, f.dataTypeID]),
        );
      }
    } finally {
      client.release();
    }
  });
});

describe('tm.do: BEGIN and the first statement in one round trip', () => {
  it('sends nothing for a callback that sends nothing, and BEGIN with the first statement otherwise', async () => {
    const { pool: counted, log } = countingPool(url);
    try {
      const tm = new TxManager(counted);
      expect(await tm.doOrThrow(() => 'nothing', { lockTimeout: 50 })).toBe('nothing');
      expect(log.texts).toEqual([]);
      await tm.doOrThrow((tx) => tx.query('INSERT INTO ff VALUES (1, $1)', ['one flight']), {
        lockTimeout: 50,
      });
      // One call to pg for BEGIN + SET LOCAL + INSERT (the flight), one for COMMIT.
      expect(log.texts).toEqual([
        'BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = 50',
        'INSERT INTO ff VALUES (1, $1)',
        'COMMIT',
      ]);
      expect(await rowsInTable()).toEqual([1]);
    } finally {
      await counted.end();
    }
  });

  it('a statement that fails: rolled back, its own error, the table unchanged', async () => {
    const tm = new TxManager(pool);
    await pool.query("INSERT INTO ff VALUES (1, 'exists')");
    const result = await tm.do((tx) => tx.query('INSERT INTO ff VALUES (1, $1)', ['dup']));
    expect(result._unsafeUnwrapErr().kind).toBe('UniqueViolation');
    expect(await rowsInTable()).toEqual([1]);
  });

  it('a statement cancelled by statementTimeout: StatementTimeout, nothing of it stays', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do((tx) => tx.query("INSERT INTO ff SELECT 1, 'slow' FROM pg_sleep(5)"), {
      statementTimeout: 50,
    });
    expect(result._unsafeUnwrapErr().kind).toBe('StatementTimeout');
    expect(await rowsInTable()).toEqual([]);
  });

  it('a statement cancelled from another session (pg_cancel_backend): nothing of it stays', async () => {
    const tm = new TxManager(pool);
    const running = tm.do((tx) => tx.query("INSERT INTO ff SELECT 1, 'cancelled' FROM pg_sleep(30)"));
    // The statement is running once its backend shows it as active (polled, no sleep in the test).
    let cancelled = false;
    while (!cancelled) {
      const { rows } = await pool.query<{ ok: boolean }>(
        `SELECT pg_cancel_backend(pid) AS ok FROM pg_stat_activity
          WHERE query LIKE 'INSERT INTO ff SELECT 1, ''cancelled''%' AND state = 'active' AND pid <> pg_backend_pid()`,
      );
      cancelled = rows[0]?.ok === true;
    }
    const result = await running;
    expect(result._unsafeUnwrapErr().kind).toBe('StatementTimeout');
    expect(await rowsInTable()).toEqual([]);
  });

  it('a connection cut while the flight is in the air: retried from a fresh BEGIN, the row written once', async () => {
    const tm = new TxManager(proxied, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
    let attempts = 0;
    const result = await tm.do(async (tx) => {
      attempts++;
      if (tx.attempt === 1) {
        proxy.stall(); // the flight is held by the network …
        const pending = tx.query('INSERT INTO ff VALUES (1, $1)', ['cut']);
        await new Promise<void>((resolve) => setImmediate(resolve));
        proxy.dropAll(); // … and the connection cut before the server saw any of it
        proxy.resume();
        await pending;
      } else {
        await tx.query('INSERT INTO ff VALUES (1, $1)', ['retried']);
      }
      return tx.attempt;
    });
    expect(result._unsafeUnwrap()).toBe(2);
    expect(attempts).toBe(2);
    expect((await pool.query('SELECT note FROM ff')).rows).toEqual([{ note: 'retried' }]);
  });
});

describe("on a pool with pg's own pipelining (pipeline: true)", () => {
  it('the flight is one query with one Sync there too: results, a failing statement, a refused setting', async () => {
    const piped = new pg.Pool({ connectionString: url, max: 1, pipeline: true } as pg.PoolConfig);
    try {
      const tm = new TxManager(piped);
      const written = await tm.do(
        async (tx) => {
          const { rows } = await tx.query<{ id: number }>('INSERT INTO ff VALUES (1, $1) RETURNING id', [
            'piped',
          ]);
          await tx.query('INSERT INTO ff VALUES (2, $1)', ['second']);
          return rows[0]?.id;
        },
        { lockTimeout: 100 },
      );
      expect(written._unsafeUnwrap()).toBe(1);
      const failed = await tm.do((tx) => tx.query('INSERT INTO ff VALUES (1, $1)', ['dup']));
      expect(failed._unsafeUnwrapErr().kind).toBe('UniqueViolation');
      expect(await rowsInTable()).toEqual([1, 2]);
    } finally {
      await piped.end();
    }
  });
});

describe.each([
  ['pg (current)', pg],
  ['pg 8.11 (the oldest supported)', oldestPg as unknown as typeof pg],
])('%s', (_name, driver) => {
  it('a refused setting in the flight: the statement never runs; a value pg cannot serialize: the defect comes back, nothing stays', async () => {
    const own = new driver.Pool({ connectionString: url, max: 1 });
    try {
      const client = await own.connect();
      try {
        const Flight = firstFlightClass(client) as FirstFlightClass;
        expect(Flight).toBeDefined();
        const flight = new Flight(
          ['BEGIN', "SET LOCAL lock_timeout = 'nope'"],
          'INSERT INTO ff VALUES (1, $1)',
          ['x'],
        );
        const refused = await client.query(flight as unknown as pg.QueryConfig).then(
          () => undefined,
          (e: { code?: string }) => e.code,
        );
        expect(refused).toBe('22023');
        expect(flight.beginFailed).toBe(true);
        await client.query('ROLLBACK');
      } finally {
        client.release();
      }
      const tm = new TxManager(own);
      const defect = new Error('cannot serialize this value');
      const unserializable = {
        toPostgres: () => {
          throw defect;
        },
      };
      await expect(tm.do((tx) => tx.query('INSERT INTO ff VALUES (2, $1)', [unserializable]))).rejects.toBe(
        defect,
      );
      // As before: pg refused the value before sending it, so the transaction is healthy and a callback
      // that handles the refusal commits what it did next.
      const handled = await tm.do(async (tx) => {
        await tx.query('INSERT INTO ff VALUES (4, $1)', [unserializable]).catch(() => undefined);
        await tx.query('INSERT INTO ff VALUES (5, $1)', ['after the refusal']);
        return 'committed';
      });
      expect(handled._unsafeUnwrap()).toBe('committed');
      await pool.query('DELETE FROM ff WHERE id = 5');
      // The client went back clean and the next transaction works on it.
      expect(
        (await tm.doOrThrow((tx) => tx.query('INSERT INTO ff VALUES (3, $1) RETURNING id', ['after'])))
          .rowCount,
      ).toBe(1);
      expect(await rowsInTable()).toEqual([3]);
      await expectClean(own, url);
    } finally {
      await own.end();
    }
  });
});

describe('COPY is never part of the flight', () => {
  it('a COPY … FROM STDIN as the first statement fails as on a plain client instead of waiting forever', async () => {
    // PostgreSQL ignores a Sync that arrives in COPY IN mode: behind the flight's one Sync the server
    // waited for another one, and the callback never settled (the client stayed checked out).
    const tm = new TxManager(pool);
    const outcome = await tm
      .do((tx) => tx.query('COPY ff FROM STDIN'))
      .then(
        (r) => (r.isErr() ? r.error : r.value),
        (error: unknown) => error,
      );
    expect(outcome).toBeInstanceOf(Error);
    expect(await rowsInTable()).toEqual([]);
    expect(pool.idleCount).toBe(pool.totalCount);
  });
});
