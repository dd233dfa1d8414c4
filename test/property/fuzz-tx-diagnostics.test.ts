import fc from 'fast-check';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { lockReport } from '../../src/diagnostics/lock-report.js';
import { safeDdl } from '../../src/diagnostics/safe-ddl.js';
import { cancelBackend, terminateBackend } from '../../src/diagnostics/signal-backend.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import {
  acquireCounter,
  anyValue,
  durationLike,
  expectIntact,
  expectTyped,
  FUZZ_SEED,
  field,
  hostileString,
  installCanary,
  options,
  outcomeOf,
  RUNS,
  Tally,
} from './fuzz-support.js';

// Bad-input fuzzing of TxManager options and the diagnostics module.
const { pool, url } = await useTestDatabase();
const acquired = acquireCounter(pool);
await installCanary(pool);
await pool.query('CREATE TABLE fz_ddl (id int PRIMARY KEY)');
const tm = new TxManager(pool);

const intLike = fc.oneof(
  fc.integer({ min: -2, max: 8 }),
  fc.constantFrom<unknown>(0.5, Number.NaN, 101, 1e9, '3', 3n),
);
const txOptionFields = {
  isolation: field(
    fc.constantFrom('read committed', 'repeatable read', 'serializable', 'snapshot', 'SERIALIZABLE'),
  ),
  readOnly: field(fc.boolean()),
  deferrable: field(fc.boolean()),
  lockTimeout: durationLike,
  statementTimeout: durationLike,
  idleInTransactionTimeout: durationLike,
  acquireTimeout: durationLike,
  maxAttempts: field(intLike),
  retryOn: field(
    fc.array(
      fc.constantFrom('SerializationFailure', 'DeadlockDetected', 'LockNotAvailable', 'Nope', 'DbError'),
      {
        maxLength: 3,
      },
    ),
  ),
  backoff: field(options({ baseMs: durationLike, capMs: durationLike })),
  deadline: durationLike,
  propagation: field(fc.constantFrom('required', 'nested', 'requiresNew', 'mandatory', 'supports')),
  name: field(fc.oneof(hostileString, fc.string({ maxLength: 8 }))),
  signal: field(fc.constant(new AbortController().signal)),
};

describe('fuzz: TxManager options', () => {
  it('new TxManager(pool, options): InvalidOptions thrown at start-up, never a TypeError', () => {
    const tally = new Tally();
    const ctor = options({
      defaults: field(options(txOptionFields), 3),
      hooks: field(
        options({ onRetry: field(fc.constant(() => {})), onCommit: field(fc.constant(() => {})) }),
      ),
      constraints: field(
        fc.dictionary(
          fc.oneof(hostileString, fc.string()),
          fc.constantFrom<unknown>(() => 1, 'x'),
        ),
      ),
      strict: field(fc.boolean()),
      slowTransactionMs: durationLike,
    });
    fc.assert(
      fc.property(ctor, (o) => {
        let outcome: { type: 'ok'; value: unknown } | { type: 'threw'; error: unknown };
        try {
          outcome = { type: 'ok', value: new TxManager(pool, o as never) };
        } catch (error) {
          outcome = { type: 'threw', error };
        }
        tally.add(expectTyped(outcome, { throws: true }));
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`new TxManager: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
  });

  it('tm.do(fn, options): Err(InvalidOptions) before any SQL, or a transaction that runs', async () => {
    const tally = new Tally();
    const opts = options(txOptionFields);
    // One case in five without a forced-invalid field, so valid transactions run too (each is a round trip).
    const mix = fc.oneof(
      {
        weight: 4,
        arbitrary: opts.map((o) => (typeof o === 'object' && o !== null ? { ...o, maxAttempts: 0 } : o)),
      },
      { weight: 1, arbitrary: opts },
    );
    let ran = 0;
    await fc.assert(
      fc.asyncProperty(mix, async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() =>
          tm.do(async (tx) => {
            ran++;
            const { rows } = await tx.query<{ one: number }>('SELECT 1 AS one');
            return rows[0]?.one;
          }, o as never),
        );
        // NotInTransaction: 'mandatory' outside a transaction; StatementTimeout/LockNotAvailable (57014): a
        // 0-1 ms timeout is valid and may fire; PoolExhausted: a valid 1 ms deadline/acquireTimeout can run
        // out while waiting for a client.
        const label = expectTyped(outcome, {
          kinds: [
            'InvalidOptions',
            'NotInTransaction',
            'StatementTimeout',
            'LockNotAvailable',
            'RetriesExhausted',
            'PoolExhausted',
            'ConnectionLost',
          ],
          // 25P03: a valid 1 ms idleInTransactionTimeout lets the server end the session (ConnectionLost).
          dbCodes: ['57014', '55P03', '25P03'],
        });
        if (label === 'InvalidOptions' || label === 'NotInTransaction') expect(acquired() - before).toBe(0);
        if (outcome.type === 'ok') expect(outcome.value).toBe(1);
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`tm.do: ${tally} (callback ran ${ran})`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });
});

describe('fuzz: diagnostics', () => {
  it('lockReport(pool, options)', async () => {
    const tally = new Tally();
    const opts = options({
      idleInTransactionMs: durationLike,
      longWaitMs: durationLike,
      queryMaxLength: field(
        fc.oneof(fc.integer({ min: -5, max: 200_000 }), fc.constantFrom<unknown>(9, 10, 1.5)),
      ),
      redact: field(fc.boolean()),
      advisoryIdleMs: durationLike,
      allDatabases: field(fc.boolean()),
    });
    const mix = fc.oneof(
      {
        weight: 19,
        arbitrary: opts.map((o) => (typeof o === 'object' && o !== null ? { ...o, queryMaxLength: 9 } : o)),
      },
      { weight: 1, arbitrary: opts },
    );
    await fc.assert(
      fc.asyncProperty(mix, async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => lockReport(pool, o as never));
        const label = expectTyped(outcome);
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`lockReport: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  // DDL texts: fine ones, and ones hiding transaction control (which would commit half of the work, or run
  // an injected statement outside safeDdl's transaction) behind comments, literals, case and whitespace.
  const ddl = 'ALTER TABLE fz_ddl ADD COLUMN IF NOT EXISTS note text';
  const tails = [
    'COMMIT',
    'commit',
    'END',
    'ROLLBACK',
    'ABORT',
    'START TRANSACTION',
    'BEGIN',
    'SAVEPOINT s',
    'RELEASE s',
    'PREPARE TRANSACTION $$x$$',
    'COMMIT AND CHAIN',
  ];
  const wrappers = [
    (t: string) => t,
    (t: string) => `/* x */ ${t}`,
    (t: string) => `/* /* nested */ */ ${t}`,
    (t: string) => `-- c\n${t}`,
    (t: string) => `\n\t ${t}`,
  ];
  const sqlText = fc.oneof(
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        ddl,
        `${ddl};`,
        "COMMENT ON TABLE fz_ddl IS 'COMMIT; BEGIN'",
        'SELECT $$COMMIT$$',
      ),
    },
    {
      weight: 4,
      arbitrary: fc
        .tuple(fc.constantFrom(...tails), fc.constantFrom(...wrappers), fc.boolean())
        .map(([t, wrap, first]) =>
          first ? `${wrap(t)}; DROP TABLE fuzz_canary` : `${ddl}; ${wrap(t)}; DROP TABLE fuzz_canary`,
        ),
    },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        "SELECT E'\\''; COMMIT; DROP TABLE fuzz_canary; --'",
        "SELECT 'a\\'; COMMIT; DROP TABLE fuzz_canary; --'",
        'SELECT $a$ $b$ $a$; COMMIT; DROP TABLE fuzz_canary',
        'CREATE INDEX CONCURRENTLY ON fz_ddl (id)',
        'CREATE INDEX CONCURRENTLY fz_ddl_idx ON fz_ddl (id); DROP TABLE fuzz_canary',
        'VACUUM fz_ddl',
        '',
        ' ; ; ',
      ),
    },
    // Not a string at all (a random string is the caller's own SQL: a syntax error there is theirs).
    { weight: 1, arbitrary: anyValue.filter((v) => typeof v !== 'string') },
  );

  it('safeDdl(pool, sql, options): transaction control is refused, options validated', async () => {
    const tally = new Tally();
    const opts = options({
      lockTimeout: durationLike,
      statementTimeout: durationLike,
      attempts: field(intLike),
      backoff: field(options({ baseMs: field(intLike), capMs: field(intLike) })),
      concurrently: field(fc.boolean()),
    });
    await fc.assert(
      fc.asyncProperty(sqlText, opts, async (sql, o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => safeDdl(pool, sql as never, o as never));
        // 57014: statementTimeout of a few ms is valid and may cancel the DDL; 25001: VACUUM refused in a
        // block is refused by safeDdl first, so it should not appear.
        const label = expectTyped(outcome, {
          kinds: ['InvalidOptions', 'StatementTimeout', 'LockNotAvailable', 'RetriesExhausted'],
          dbCodes: ['57014'],
        });
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`safeDdl: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('cancelBackend / terminateBackend: pid and options', async () => {
    const tally = new Tally();
    // Valid-looking pids are small (1-99): no PostgreSQL backend has them here, so NotFound; the real
    // signalling path is exercised once below on a dedicated session.
    const pid = fc.oneof(
      fc.integer({ min: 1, max: 99 }),
      fc.constantFrom<unknown>(0, -1, 1.5, Number.NaN, 2_147_483_648, '42', 42n, null),
      anyValue,
    );
    await fc.assert(
      fc.asyncProperty(pid, options({ timeout: durationLike }), fc.boolean(), async (p, o, cancel) => {
        const before = acquired();
        const outcome = await outcomeOf(() =>
          cancel ? cancelBackend(pool, p as never) : terminateBackend(pool, p as never, o as never),
        );
        const label = expectTyped(outcome, { kinds: ['InvalidOptions', 'NotFound'] });
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        expect(label).not.toBe('ok');
        tally.add(`${cancel ? 'cancel' : 'terminate'}:${label}`);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`cancel/terminate: ${tally}`);
    const victim = new pg.Client({ connectionString: url });
    victim.on('error', () => {});
    await victim.connect();
    const victimPid = (await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]
      ?.pid as number;
    expect((await terminateBackend(pool, victimPid, { timeout: '5s' }))._unsafeUnwrap()).toEqual({
      pid: victimPid,
      signalled: true,
    });
    await victim.end().catch(() => {});
    await expectIntact(pool);
  });
});
