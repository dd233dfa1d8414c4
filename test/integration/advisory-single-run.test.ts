import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { err, ok } from 'neverthrow';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateSingleRun, singleRun } from '../../src/advisory/single-run.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
const tm = new TxManager(pool);

beforeAll(async () => {
  (await migrateSingleRun(pool))._unsafeUnwrap();
  await pool.query(
    'CREATE TABLE single_run_effects (id serial PRIMARY KEY, key text NOT NULL, worker text NOT NULL)',
  );
  await pool.query('CREATE TABLE posts (day text NOT NULL, body text NOT NULL)');
});

/** A replica's domain error: it cannot finish the job, so it must not claim it. */
class NoPublishCredentials extends Error {
  readonly kind = 'NoPublishCredentials' as const;
  constructor(replica: string) {
    super(`${replica}: no publish credentials`);
  }
}

afterAll(async () => {
  expect(pool.totalCount - pool.idleCount).toBe(0); // no client left checked out
  const { rows } = await pool.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
  );
  expect(rows[0].n).toBe(0);
});

async function records(name: string): Promise<{ key: string; result: unknown }[]> {
  const { rows } = await pool.query(
    'SELECT key, result FROM pg_txkit_single_run WHERE name = $1 ORDER BY key',
    [name],
  );
  return rows;
}

describe('singleRun', () => {
  it('runs once; a repeat gets AlreadyDone with the stored result, without calling fn', async () => {
    let calls = 0;
    const job = () =>
      singleRun(tm, { name: 'once', key: '2026-11-30' }, async (tx) => {
        calls++;
        await tx.query("INSERT INTO posts (day, body) VALUES ('2026-11-30', 'hello')");
        return { postedAt: 'morning', n: 1 };
      });
    expect((await job())._unsafeUnwrap()).toEqual({ postedAt: 'morning', n: 1 });
    const again = await job();
    expect(again.isErr() && again.error.kind).toBe('AlreadyDone');
    if (again.isErr() && again.error.kind === 'AlreadyDone') {
      expect(again.error.result).toEqual({ postedAt: 'morning', n: 1 });
      expect(again.error.completedAt).toBeInstanceOf(Date);
    }
    expect(calls).toBe(1);
    const { rows } = await pool.query("SELECT count(*)::int AS n FROM posts WHERE day = '2026-11-30'");
    expect(rows[0].n).toBe(1);
  });

  it('a BigInt in the result is stored losslessly and given back by the repeat (never a rejection)', async () => {
    const big = 2n ** 70n + 1n;
    const job = () =>
      singleRun(tm, { name: 'bigint', key: 'k1' }, () => ({ total: big, parts: [1n, -2n], label: 'x' }));
    expect((await job())._unsafeUnwrap()).toEqual({ total: big, parts: [1n, -2n], label: 'x' });
    const again = await job();
    expect(again.isErr() && again.error.kind).toBe('AlreadyDone');
    if (again.isErr() && again.error.kind === 'AlreadyDone') {
      expect(again.error.result).toEqual({ total: big, parts: [1n, -2n], label: 'x' });
    }
  });

  it('a result that cannot be stored (a cycle) → InvalidOptions, nothing recorded, the effects roll back', async () => {
    const cyclic: { self?: unknown } = {};
    cyclic.self = cyclic;
    const r = await singleRun(tm, { name: 'cyclic', key: 'k1' }, async (tx) => {
      await tx.query("INSERT INTO posts (day, body) VALUES ('cyclic', 'x')");
      return cyclic;
    });
    expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect(await records('cyclic')).toEqual([]);
    expect((await pool.query("SELECT count(*)::int AS n FROM posts WHERE day = 'cyclic'")).rows[0].n).toBe(0);
  });

  it('a concurrent caller gets LockBusy (fn not called) while the first runs; then AlreadyDone', async () => {
    const g = gate();
    const first = singleRun(tm, { name: 'busy', key: 'k' }, async () => {
      await g.at('running');
      return 'first';
    });
    await g.reached('running');
    let called = false;
    const second = await singleRun(tm, { name: 'busy', key: 'k' }, () => {
      called = true;
      return 'second';
    });
    expect(second.isErr() && second.error.kind).toBe('LockBusy');
    expect(called).toBe(false);
    // another key of the same job is independent
    expect((await singleRun(tm, { name: 'busy', key: 'other' }, () => 'other'))._unsafeUnwrap()).toBe(
      'other',
    );
    g.open('running');
    expect((await first)._unsafeUnwrap()).toBe('first');
    const third = await singleRun(tm, { name: 'busy', key: 'k' }, () => 'third');
    expect(third.isErr() && third.error.kind === 'AlreadyDone' && third.error.result).toBe('first');
  });

  it('a run that fails records nothing (Err, thrown database error, defect): another caller can do the job', async () => {
    const failed = await singleRun(tm, { name: 'fails', key: 'k' }, async (tx) => {
      await tx.query("INSERT INTO posts (day, body) VALUES ('fails', 'half-done')");
      return err(new Error('publish API down'));
    });
    expect(failed.isErr() && failed.error.message).toBe('publish API down');
    const dbFailure = await singleRun(tm, { name: 'fails', key: 'k' }, async (tx) => {
      await tx.query("INSERT INTO posts (day, body) VALUES ('fails', 'half-done')");
      await tx.query('SELECT 1/0');
    });
    expect(dbFailure.isErr() && dbFailure.error.kind).toBe('DbError');
    await expect(
      singleRun(tm, { name: 'fails', key: 'k' }, () => {
        throw new TypeError('bug');
      }),
    ).rejects.toThrow('bug');
    expect(await records('fails')).toEqual([]);
    expect((await pool.query("SELECT count(*)::int AS n FROM posts WHERE day = 'fails'")).rows[0].n).toBe(0);
    expect((await singleRun(tm, { name: 'fails', key: 'k' }, () => ok('done')))._unsafeUnwrap()).toBe('done');
    expect(await records('fails')).toEqual([{ key: 'k', result: 'done' }]);
  });

  it('inside an outer transaction: the record commits (or rolls back) with it', async () => {
    const rolledBack = await tm.do(async () => {
      const inner = await singleRun(tm, { name: 'outer', key: 'k' }, () => 1);
      expect(inner._unsafeUnwrap()).toBe(1);
      return err(new Error('outer fails after the job'));
    });
    expect(rolledBack.isErr()).toBe(true);
    expect(await records('outer')).toEqual([]);
    await tm.do(async () => (await singleRun(tm, { name: 'outer', key: 'k' }, () => 2))._unsafeUnwrap());
    expect(await records('outer')).toEqual([{ key: 'k', result: 2 }]);
  });

  it('daily post: a replica without publish credentials does not claim the day', async () => {
    const dailyPost = (replica: { name: string; canPublish: boolean }) =>
      singleRun(tm, { name: 'daily-post', key: '2026-12-01' }, async (tx) => {
        if (!replica.canPublish) return err(new NoPublishCredentials(replica.name));
        await tx.query("INSERT INTO posts (day, body) VALUES ('2026-12-01', $1)", [`by ${replica.name}`]);
        return { by: replica.name };
      });
    const dev = await dailyPost({ name: 'laptop', canPublish: false }); // fastest, but cannot finish
    expect(dev.isErr() && dev.error.kind).toBe('NoPublishCredentials');
    expect((await dailyPost({ name: 'prod-1', canPublish: true }))._unsafeUnwrap()).toEqual({ by: 'prod-1' });
    const late = await dailyPost({ name: 'prod-2', canPublish: true });
    expect(late.isErr() && late.error.kind).toBe('AlreadyDone');
    const { rows } = await pool.query("SELECT body FROM posts WHERE day = '2026-12-01'");
    expect(rows).toEqual([{ body: 'by prod-1' }]);
  });

  it('invalid spec → InvalidOptions, nothing sent', async () => {
    let called = false;
    const bad = await singleRun(tm, { name: '', key: 'k' }, () => {
      called = true;
    });
    expect(bad.isErr() && bad.error.kind).toBe('InvalidOptions');
    const badTable = await singleRun(tm, { name: 'x', key: 'k', table: 'runs; DROP TABLE posts' }, () => {
      called = true;
    });
    expect(badTable.isErr() && badTable.error.kind).toBe('InvalidOptions');
    expect(called).toBe(false);
    expect((await migrateSingleRun(pool, { table: '1bad' })).isErr()).toBe(true);
  });

  it('8 concurrent callers across 3 processes: exactly one run per key, everyone sees its result', async () => {
    const dist = process.env.PG_TXKIT_DIST ?? fileURLToPath(new URL('../../dist', import.meta.url));
    if (!existsSync(`${dist}/advisory/single-run.js`)) {
      throw new Error(
        `${dist}/advisory/single-run.js is missing: run \`npm run build\` first (npm test does)`,
      );
    }
    const keys = Array.from({ length: 12 }, (_, i) => `day-${i}`);
    const worker = fileURLToPath(new URL('../fixtures/advisory-single-run-worker.mjs', import.meta.url));
    const callersPerProcess = [3, 3, 2];
    const children = callersPerProcess.map((callers, i) => {
      const child = spawn(process.execPath, [worker], {
        env: {
          ...process.env,
          PG_TXKIT_DIST: dist,
          SR_URL: url,
          SR_WORKER: `p${i}`,
          SR_CALLERS: String(callers),
          SR_KEYS: keys.join(','),
        },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let out = '';
      let errText = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
      });
      child.stderr.on('data', (d: Buffer) => {
        errText += d.toString();
      });
      const done = new Promise<{ key: string; outcome: string; result?: unknown }[]>((resolve, reject) => {
        const timer = setTimeout(() => child.kill('SIGKILL'), 25_000);
        child.on('exit', (code) => {
          clearTimeout(timer);
          if (code === 0) resolve(JSON.parse(out.trim()));
          else reject(new Error(`worker p${i} exited with ${code}: ${errText}`));
        });
      });
      return { child, done };
    });
    for (const { child } of children) child.stdin.end('go\n');
    const outcomes = (await Promise.all(children.map((c) => c.done))).flat();
    expect(outcomes).toHaveLength(8 * keys.length);
    expect(outcomes.filter((o) => o.outcome !== 'ran' && o.outcome !== 'AlreadyDone')).toEqual([]);
    for (const key of keys) {
      const forKey = outcomes.filter((o) => o.key === key);
      expect(forKey.filter((o) => o.outcome === 'ran')).toHaveLength(1);
      const winner = forKey.find((o) => o.outcome === 'ran')!.result;
      for (const o of forKey) expect(o.result).toEqual(winner); // AlreadyDone carries the stored result
    }
    const { rows } = await pool.query<{ key: string; n: number }>(
      'SELECT key, count(*)::int AS n FROM single_run_effects GROUP BY key ORDER BY key',
    );
    expect(rows).toHaveLength(keys.length);
    expect(rows.every((r) => r.n === 1)).toBe(true);
    expect(await records('report')).toHaveLength(keys.length);
  });
});
