import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

// A builder that REPLACES pg's error (Prisma) is decided from the driver error the attempt recorded,
// while the transaction cannot commit because of it. pg rejects a query at the server's ErrorResponse;
// the ReadyForQuery that says 'E' (transaction aborted) may come in a later read of the socket, after
// the builder's error already reached the manager. Here every ReadyForQuery is handled one turn of the
// event loop late, as when the two messages arrive in separate TCP segments.
const { url } = await useTestDatabase();

class LateReadyClient extends pg.Client {
  _handleReadyForQuery(message: unknown): void {
    setImmediate(() =>
      (pg.Client.prototype as unknown as LateReadyClient)._handleReadyForQuery.call(this, message),
    );
  }
}
const pool = new pg.Pool({ connectionString: url, max: 2, Client: LateReadyClient });
afterAll(() => pool.end());

/** What a builder that converts pg's errors into its own does (no `cause`). */
class BuilderError extends Error {}
const replaced = async (run: () => Promise<unknown>): Promise<void> => {
  try {
    await run();
  } catch {
    throw new BuilderError('the query failed');
  }
};

describe('an error that replaces the driver error, before the server said the transaction is aborted', () => {
  it('a replaced 40001 is retried', async () => {
    const tm = new TxManager(pool, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
    const result = await tm.do(async (tx) => {
      if (tx.attempt === 1) {
        await replaced(() =>
          tx.query("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$"),
        );
      }
      return tx.attempt;
    });
    expect(result._unsafeUnwrap()).toBe(2);
  });

  it('a replaced unique violation is UniqueViolation', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(async (tx) => {
      await tx.query('CREATE TEMP TABLE t (id int PRIMARY KEY) ON COMMIT DROP');
      await tx.query('INSERT INTO t VALUES (1)');
      await replaced(() => tx.query('INSERT INTO t VALUES (1)'));
    });
    expect(result.isErr() && result.error.kind).toBe('UniqueViolation');
  });

  it('control: after ROLLBACK TO SAVEPOINT the transaction is healthy; a later non-database error is rethrown unchanged', async () => {
    const tm = new TxManager(pool);
    const thrown = new Error('ECONNRESET from an HTTP client');
    let calls = 0;
    const outcome = await tm
      .do(async (tx) => {
        calls++;
        await tx.query('SAVEPOINT s');
        await replaced(() => tx.query('SELECT 1/0')).catch(() => {});
        await tx.query('ROLLBACK TO SAVEPOINT s');
        throw thrown;
      })
      .then(
        () => 'committed',
        (e: unknown) => e,
      );
    expect(outcome).toBe(thrown);
    expect(calls).toBe(1);
  });

  it('control: a value pg refuses to send does not revive a failure a ROLLBACK TO SAVEPOINT recovered from', async () => {
    const tm = new TxManager(pool);
    // pg refuses it before sending anything ("Query values must be an array"). (A value it fails to
    // serialize, such as a circular object, would do on pg 8.23, but pg 8.11 then waits forever for an
    // answer to a statement it never finished sending: its client is stuck, with or without pg-txkit.)
    const notAnArray = 'x' as unknown as unknown[];
    let calls = 0;
    const outcome = await tm
      .do(async (tx) => {
        calls++;
        await tx.query('SAVEPOINT s');
        await tx.query('SELECT 1/0').catch(() => {});
        await tx.query('ROLLBACK TO SAVEPOINT s');
        await replaced(() => tx.query('SELECT $1::int AS v', notAnArray));
      })
      .then(
        () => 'committed',
        (e: unknown) => e,
      );
    expect(outcome).toBeInstanceOf(BuilderError);
    expect(calls).toBe(1);
  });
});
