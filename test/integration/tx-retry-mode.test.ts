import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { gate } from '../../src/testing/gate.js';
import type { RetryEvent } from '../../src/tx/hooks.js';
import type { RetryMode } from '../../src/tx/retryable.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

// retryMode: how an error raised BY COMMIT is read. On PostgreSQL both kinds of COMMIT error are
// produced for real: a 40001 from SSI at commit (a write-skew pair, ordered with a gate), and any
// other SQLSTATE from a deferred constraint trigger, which runs during COMMIT. CockroachDB, Aurora
// DSQL and YugabyteDB are not run here: the codes they document are raised by PostgreSQL instead
// (docs/scale-out.md says so).
const { pool } = await useTestDatabase();

beforeAll(async () => {
  await pool.query(`
    CREATE TABLE mode_doctors (id int PRIMARY KEY, on_call boolean NOT NULL);
    CREATE TABLE mode_commit_errors (id serial PRIMARY KEY, code text NOT NULL);
    CREATE FUNCTION mode_raise_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'raised while committing' USING ERRCODE = NEW.code; END $$;
    -- Deferred: fires during COMMIT, after the callback returned.
    CREATE CONSTRAINT TRIGGER mode_raise_at_commit AFTER INSERT ON mode_commit_errors
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION mode_raise_at_commit();
  `);
});

beforeEach(async () => {
  await pool.query(`
    TRUNCATE mode_doctors, mode_commit_errors;
    INSERT INTO mode_doctors VALUES (1, true), (2, true);
  `);
});

const MODES: RetryMode[] = ['postgres', 'commit-conflicts'];

describe('a 40001 raised by COMMIT', () => {
  it.each(MODES)(
    'retryMode %s: the whole transaction is re-run from BEGIN, and its second attempt commits',
    async (retryMode) => {
      const retries: RetryEvent[] = [];
      const tm = new TxManager(pool, { retryMode, hooks: { onRetry: (e) => retries.push(e) } });
      const g = gate();
      const other = await pool.connect();
      let calls = 0;
      try {
        await other.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
        await other.query('SELECT count(*) FROM mode_doctors WHERE on_call'); // reads both rows
        const result = tm.do(
          async (tx) => {
            calls++;
            const { rows } = await tx.query<{ n: number }>(
              'SELECT count(*)::int AS n FROM mode_doctors WHERE on_call',
            );
            if ((rows[0]?.n ?? 0) < 2) return 'stays';
            await tx.query('UPDATE mode_doctors SET on_call = false WHERE id = 2');
            if (tx.attempt === 1) await g.at('before-commit'); // the write is done; COMMIT comes next
            return 'left';
          },
          { isolation: 'serializable', backoff: { baseMs: 0, capMs: 0 } },
        );
        await g.reached('before-commit');
        await other.query('UPDATE mode_doctors SET on_call = false WHERE id = 1');
        await other.query('COMMIT'); // first committer wins: our COMMIT is refused by SSI
        g.open('before-commit');
        expect((await result)._unsafeUnwrap()).toBe('stays');
      } finally {
        other.release();
      }
      expect(calls).toBe(2);
      expect(retries).toHaveLength(1);
      const failure = retries[0]!.error as Error & {
        kind?: string;
        cause?: { code?: string; detail?: string };
      };
      expect(failure.kind).toBe('SerializationFailure');
      expect(failure.cause?.code).toBe('40001');
      // PostgreSQL's own words that it was COMMIT that failed.
      expect(failure.cause?.detail).toMatch(/during commit attempt/);
      const { rows } = await pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM mode_doctors WHERE on_call',
      );
      expect(rows[0]!.n).toBe(1);
    },
  );
});

describe('other errors raised by COMMIT', () => {
  // [SQLSTATE raised during COMMIT, kind under 'postgres', kind under 'commit-conflicts']
  const CASES = [
    ['40003', 'CommitOutcomeUnknown', 'CommitOutcomeUnknown'], // statement_completion_unknown: CockroachDB's "result is ambiguous"
    ['XX000', 'DbError', 'CommitOutcomeUnknown'], // internal_error during a distributed commit
    ['XXA00', 'DbError', 'CommitOutcomeUnknown'], // CockroachDB: transaction committed but schema change aborted
    ['08007', 'DbError', 'CommitOutcomeUnknown'], // transaction_resolution_unknown
    ['23505', 'UniqueViolation', 'UniqueViolation'], // a deferred constraint: a definite refusal in both
  ] as const;

  for (const [code, postgres, commitConflicts] of CASES) {
    it.each([
      ['postgres', postgres],
      ['commit-conflicts', commitConflicts],
    ] as const)(`${code} → retryMode %s: %s, never retried`, async (retryMode, kind) => {
      const tm = new TxManager(pool, { retryMode });
      let calls = 0;
      let returned = false;
      const result = await tm.do(async (tx) => {
        calls++;
        await tx.query('INSERT INTO mode_commit_errors (code) VALUES ($1)', [code]);
        returned = true; // the INSERT itself went through: the error comes from COMMIT
        return 'done';
      });
      expect(returned).toBe(true);
      expect(calls).toBe(1);
      const error = result._unsafeUnwrapErr() as Error & { kind: string; cause?: { code?: string } };
      expect(error.kind).toBe(kind);
      expect(error.cause?.code).toBe(code);
      // What PostgreSQL did: an error at COMMIT is a rollback here. 'commit-conflicts' reads the same
      // answer from a distributed engine as "may have committed" on purpose.
      const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM mode_commit_errors');
      expect(rows[0]!.n).toBe(0);
    });
  }
});

describe('the option', () => {
  it('an unknown mode is InvalidOptions at construction, before any SQL', () => {
    expect(() => new TxManager(pool, { retryMode: 'optimistic' as RetryMode })).toThrow(
      expect.objectContaining({ kind: 'InvalidOptions' }),
    );
  });
});
