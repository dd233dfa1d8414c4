import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type RunIsolationSpecOptions, runIsolationSpec } from '../../src/testing/run-isolation-spec.js';
import { useTestDatabase } from '../helpers.js';
import { runMain } from './cli-support.js';

const { url } = await useTestDatabase();

const file = (path: string): string => fileURLToPath(new URL(`../isolation/${path}`, import.meta.url));
const read = (path: string): string => readFileSync(file(path), 'utf8');

async function output(spec: string, options: RunIsolationSpecOptions = {}): Promise<string> {
  const run = await runIsolationSpec(url, read(spec), options);
  if (run.isErr()) throw run.error;
  return run.value.output;
}

async function outputOf(specText: string, options: RunIsolationSpecOptions = {}): Promise<string> {
  const run = await runIsolationSpec(url, specText, options);
  if (run.isErr()) throw run.error;
  return run.value.output;
}

describe("runIsolationSpec: PostgreSQL's own isolation tests give PostgreSQL's expected output", () => {
  for (const name of [
    'nowait',
    'deadlock-simple',
    'simple-write-skew',
    'insert-conflict-do-nothing-2',
    'insert-conflict-do-update-3',
    'eval-plan-qual-partition-prune',
    'skip-locked',
  ]) {
    it(name, async () => {
      expect(await output(`postgresql/${name}.spec`)).toBe(read(`postgresql/${name}.out`));
    });
  }
});

describe('runIsolationSpec: what isolationtester prints besides results (PostgreSQL 12 and later)', () => {
  it('notices (before the step; for a blocked step, the later ones at its completion), NOTIFY, application_name, unused steps', async () => {
    expect(await output('pg-txkit/notices-notify.spec', { testName: 'notices-notify' })).toBe(
      read('pg-txkit/notices-notify.out'),
    );
  });

  it("a `notices N` blocker is satisfied by the other session's notices", async () => {
    const out = await outputOf(
      `session c
step c_lock { SELECT pg_advisory_lock(42); }
step c_unlock { SELECT pg_advisory_unlock(42); }
session s1
step s1_work { DO $$ BEGIN RAISE NOTICE 'working'; PERFORM pg_advisory_lock(42); PERFORM pg_advisory_unlock(42); END $$; }
session s2
step s2_probe { SELECT 1 AS probe; }
permutation c_lock s2_probe(s1_work notices 1) s1_work c_unlock`,
      { blockTimeoutMs: 5_000 },
    );
    const lines = out.split('\n');
    const at = (line: string) => lines.indexOf(line);
    expect(at('step s2_probe: SELECT 1 AS probe; <waiting ...>')).toBeGreaterThan(0);
    expect(at('s1: NOTICE:  working')).toBeGreaterThan(at('step s2_probe: SELECT 1 AS probe; <waiting ...>'));
    expect(at('step s2_probe: <... completed>')).toBeGreaterThan(at('s1: NOTICE:  working'));
    expect(at('step s1_work: <... completed>')).toBeGreaterThan(
      at('step c_unlock: SELECT pg_advisory_unlock(42);'),
    );
  });

  it("a FATAL prints libpq's text of the lost connection, as the server major's expected files show it", async () => {
    const out = await outputOf(`session s1
step s1_exit { SELECT pg_terminate_backend(pg_backend_pid()); }
session s2
step s2_check { SELECT 1 AS alive; }
permutation s1_exit s2_check`);
    // PostgreSQL 14's libpq repeats the FATAL line in the lost connection's result; 15 and later do not
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const major = Math.floor(
      Number((await client.query('SHOW server_version_num')).rows[0].server_version_num) / 10000,
    );
    await client.end();
    const fatal = 'FATAL:  terminating connection due to administrator command';
    expect(out).toContain(
      [
        'step s1_exit: SELECT pg_terminate_backend(pg_backend_pid());',
        ...(major === 14 ? [fatal, fatal] : [fatal]),
        'server closed the connection unexpectedly',
        '\tThis probably means the server terminated abnormally',
        '\tbefore or while processing the request.',
        '',
        'step s2_check: SELECT 1 AS alive;',
      ].join('\n'),
    );
  });

  it("regressSettings: the startup settings of PostgreSQL's harness, which RESET returns to", async () => {
    const out = await outputOf(
      `session s1
step s1_show { SET datestyle = ISO; RESET datestyle; SELECT current_setting('datestyle') AS d, current_setting('timezone') AS tz, current_setting('intervalstyle') AS i, current_setting('application_name') AS app; }`,
      { regressSettings: true, testName: 'harness' },
    );
    expect(out).toContain('Postgres, MDY|America/Los_Angeles|postgres_verbose|isolation/harness/s1');
  });
});

describe("runIsolationSpec: this library's patterns as specs", () => {
  for (const name of [
    'conditional-update',
    'no-key-update-rmw',
    'skip-locked-dequeue',
    'notices-while-waiting',
  ]) {
    it(name, async () => {
      expect(await output(`pg-txkit/${name}.spec`)).toBe(read(`pg-txkit/${name}.out`));
    });
  }

  it('honours the (*) annotation: the step is reported waiting, and completed after the next step', async () => {
    const spec = `session s1
step a { SELECT 1 AS one; }
session s2
step b { SELECT 2 AS two; }
permutation a(*) b`;
    expect(await output2(spec)).toBe(
      [
        'Parsed test spec with 2 sessions',
        '',
        'starting permutation: a b',
        'step a: SELECT 1 AS one; <waiting ...>',
        'step b: SELECT 2 AS two;',
        'two',
        '---',
        '  2',
        '(1 row)',
        '',
        'step a: <... completed>',
        'one',
        '---',
        '  1',
        '(1 row)',
        '',
        '',
      ].join('\n'),
    );
  });

  it('returns a typed error with the line for a spec the isolation tester refuses, before connecting', async () => {
    const run = await runIsolationSpec(
      'postgres://nobody@127.0.0.1:1/none',
      'session s1\nstep a { }\npermutation b',
    );
    expect(run._unsafeUnwrapErr()).toMatchObject({ kind: 'SpecSyntaxError', line: 3 });
  });
});

async function output2(spec: string): Promise<string> {
  const run = await runIsolationSpec(url, spec);
  if (run.isErr()) throw run.error;
  return run.value.output;
}

describe('pg-txkit isolation', () => {
  it('prints the output, or with --expected only a diff (exit 1 when it differs)', async () => {
    const spec = file('postgresql/nowait.spec');
    const printed = await runMain(['isolation', spec, '--url', url]);
    expect(printed).toMatchObject({ code: 0, stdout: read('postgresql/nowait.out') });

    const same = await runMain([
      'isolation',
      spec,
      '--url',
      url,
      '--expected',
      file('postgresql/nowait.out'),
    ]);
    expect(same).toMatchObject({ code: 0, stdout: '' });
    expect(same.stderr).toContain('6 permutations, output as expected');

    const dir = mkdtempSync(join(tmpdir(), 'pg-txkit-isolation-'));
    const wrong = join(dir, 'nowait.out');
    writeFileSync(
      wrong,
      read('postgresql/nowait.out').replace('ERROR:  could not obtain lock', 'ERROR:  got the lock'),
    );
    const differs = await runMain(['isolation', spec, '--url', url, '--expected', wrong]);
    expect(differs.code).toBe(1);
    expect(differs.stdout).toContain(`--- ${wrong}`);
    expect(differs.stdout).toContain('-ERROR:  got the lock on row in relation "foo"');
    expect(differs.stdout).toContain('+ERROR:  could not obtain lock on row in relation "foo"');
    expect(differs.stdout).toMatch(/^@@ -\d+,\d+ \+\d+,\d+ @@$/m);
  });

  it('exits 2 naming the line of a syntax error, 2 for a missing file, 3 when it cannot connect', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-txkit-isolation-'));
    const bad = join(dir, 'bad.spec');
    writeFileSync(bad, 'session s1\nstep a { SELECT 1 }\nstep a { SELECT 2 }\n');
    const syntax = await runMain(['isolation', bad, '--url', url]);
    expect(syntax).toMatchObject({ code: 2, stdout: '' });
    expect(syntax.stderr).toContain('duplicate step name: a at line 3');
    expect((await runMain(['isolation', join(dir, 'missing.spec'), '--url', url])).code).toBe(2);
    const down = await runMain([
      'isolation',
      file('postgresql/nowait.spec'),
      '--url',
      'postgres://u@127.0.0.1:1/x',
    ]);
    expect(down.code).toBe(3);
    // four sessions of five steps and no permutation lines: refused before connecting (exit 2)
    const huge = join(dir, 'huge.spec');
    writeFileSync(
      huge,
      ['a', 'b', 'c', 'd']
        .map(
          (x) => `session ${x}\n${[1, 2, 3, 4, 5].map((i) => `step ${x}${i} { SELECT ${i}; }`).join('\n')}`,
        )
        .join('\n'),
    );
    const refused = await runMain(['isolation', huge, '--url', 'postgres://u@127.0.0.1:1/x']);
    expect(refused).toMatchObject({ code: 2, stdout: '' });
    expect(refused.stderr).toContain('11,732,745,024');
    expect(refused.stderr).toContain('add permutation lines');
  });
});

describe('docs/testing.md', () => {
  it('the spec example gives the output the page shows', async () => {
    const doc = readFileSync(new URL('../../docs/testing.md', import.meta.url), 'utf8');
    const blocks: string[] = [];
    let open: string[] | undefined;
    for (const line of doc.split('\n')) {
      if (line.startsWith('```')) {
        if (open) blocks.push(open.join('\n'));
        open = open ? undefined : [];
      } else open?.push(line);
    }
    const spec = blocks.find((b) => b.startsWith('# conditional-update.spec'));
    const shown = blocks.find((b) => b.startsWith('$ pg-txkit isolation conditional-update.spec'));
    expect(spec).toBeDefined();
    expect(shown).toBeDefined();
    const expected = `${(shown ?? '').split('\n').slice(1).join('\n')}\n`;
    expect(await output2(spec ?? '')).toBe(expected);
  });
});
