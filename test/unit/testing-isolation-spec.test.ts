import { describe, expect, it } from 'vitest';
import { formatResultSet } from '../../src/testing/format-result-set.js';
import {
  eachSpecPermutation,
  MAX_SPEC_PERMUTATIONS,
  parseIsolationSpec,
  SpecTooManyPermutations,
  specPermutationCount,
  specPermutations,
  unusedSteps,
} from '../../src/testing/isolation-spec.js';
import { runIsolationSpec } from '../../src/testing/run-isolation-spec.js';

const SPEC = `# a comment
setup { CREATE TABLE t (id int); }
setup
{
  INSERT INTO t VALUES (1);
}
teardown { DROP TABLE t; }

session s1
setup { BEGIN; }
step s1a { SELECT 1; }
step "s1 b"	{ }
teardown { COMMIT; }

session "s""2"
step s2a {
  UPDATE t SET id = 2;
}

permutation s1a s2a(*) "s1 b"(s2a, s2a notices 2)
permutation s2a s1a
`;

describe('parseIsolationSpec()', () => {
  it('reads setup and teardown blocks, sessions, steps, permutations and blocker annotations', () => {
    const spec = parseIsolationSpec(SPEC)._unsafeUnwrap();
    expect(spec.setup).toEqual(['CREATE TABLE t (id int);', '\n  INSERT INTO t VALUES (1);\n']);
    expect(spec.teardown).toBe('DROP TABLE t;');
    expect(
      spec.sessions.map((s) => [s.name, s.setup, s.teardown, s.steps.map((t) => [t.name, t.sql])]),
    ).toEqual([
      [
        's1',
        'BEGIN;',
        'COMMIT;',
        [
          ['s1a', 'SELECT 1;'],
          ['s1 b', ''],
        ],
      ],
      ['s"2', undefined, undefined, [['s2a', '\n  UPDATE t SET id = 2;\n']]],
    ]);
    expect(spec.permutations[0]?.steps).toEqual([
      { step: 's1a', blockers: [] },
      { step: 's2a', blockers: [{ kind: 'once' }] },
      {
        step: 's1 b',
        blockers: [
          { kind: 'step', step: 's2a' },
          { kind: 'notices', step: 's2a', notices: 2 },
        ],
      },
    ]);
    expect(spec.permutations[1]?.line).toBe(21);
  });

  it('keeps what isolationtester keeps of a SQL block: spaces after { and before } go, newlines stay', () => {
    const spec = parseIsolationSpec(
      'session s\nstep a {  SELECT 1;\t}\nstep b {\n  SELECT 2;\n  }',
    )._unsafeUnwrap();
    expect(spec.sessions[0]?.steps.map((s) => s.sql)).toEqual(['SELECT 1;', '\n  SELECT 2;\n']);
  });

  it.each([
    ['session s1\nstep a { SELECT 1 }\nstep a { SELECT 2 }', 3, 'duplicate step name: a'],
    ['session s1\nstep a { SELECT 1 }\n\npermutation a b', 4, 'undefined step "b" specified in permutation'],
    [
      'session s1\nstep a { SELECT 1 }\nstep b { }\npermutation a b(a)',
      4,
      'permutation step "b" cannot block on its own session',
    ],
    [
      'session s1\nstep a { SELECT 1 }\npermutation a(c)',
      3,
      'undefined blocking step "c" referenced in permutation step "a"',
    ],
    ['session s1\nstep a { SELECT 1 ', 2, 'unterminated sql block'],
    ['session "s1\n', 1, 'unexpected newline in quoted identifier'],
    [
      'setup { }\n\nsession s1\nstep { SELECT 1 }',
      4,
      'syntax error: expected a step name, found a { SQL } block',
    ],
    ['session s1\n\n  @', 3, 'syntax error: unexpected character "@"'],
    ['teardown { }', 1, 'syntax error: expected "session", found the end of the file'],
    [
      'session s1\nstep a { }\npermutation a(a notices)',
      3,
      'syntax error: expected a number after "notices", found ")"',
    ],
  ])('refuses %j with a line number', (text, line, reason) => {
    const error = parseIsolationSpec(text)._unsafeUnwrapErr();
    expect(error).toMatchObject({ kind: 'SpecSyntaxError', line, reason });
    expect(error.message).toBe(`${reason} at line ${line}`);
  });
});

describe('specPermutations()', () => {
  it("lists every interleaving in the isolation tester's order when none is given", () => {
    const spec = parseIsolationSpec(
      'session a\nstep a1 { }\nstep a2 { }\nsession b\nstep b1 { }',
    )._unsafeUnwrap();
    expect(specPermutations(spec).map((p) => p.map((s) => s.step).join(' '))).toEqual([
      'a1 a2 b1',
      'a1 b1 a2',
      'b1 a1 a2',
    ]);
  });
});

/** Four sessions of five steps and no permutation lines: 20! / (5!)^4 orders. */
const HUGE = ['a', 'b', 'c', 'd']
  .map((s) => `session ${s}\n${[1, 2, 3, 4, 5].map((i) => `step ${s}${i} { SELECT ${i}; }`).join('\n')}`)
  .join('\n');

describe('permutations of a spec without permutation lines: counted, generated lazily, refused above the bound', () => {
  const spec = parseIsolationSpec(HUGE)._unsafeUnwrap();

  it('counts them without building them', () => {
    expect(specPermutationCount(spec)).toBe(11_732_745_024n);
    const small = parseIsolationSpec(SPEC)._unsafeUnwrap();
    expect(specPermutationCount(small)).toBe(BigInt(specPermutations(small).length));
  });

  it('generates them one at a time, in the isolation tester order', () => {
    const first: string[] = [];
    for (const p of eachSpecPermutation(spec)) {
      first.push(p.map((s) => s.step).join(' '));
      if (first.length === 2) break;
    }
    expect(first).toEqual([
      'a1 a2 a3 a4 a5 b1 b2 b3 b4 b5 c1 c2 c3 c4 c5 d1 d2 d3 d4 d5',
      'a1 a2 a3 a4 a5 b1 b2 b3 b4 b5 c1 c2 c3 c4 d1 c5 d2 d3 d4 d5',
    ]);
  });

  it('specPermutations() throws SpecTooManyPermutations instead of running out of memory', () => {
    expect(() => specPermutations(spec)).toThrow(SpecTooManyPermutations);
  });

  it('runIsolationSpec() refuses it before connecting, with the count and what to do', async () => {
    // nothing listens on port 1: a connection attempt would be a SpecRunError
    const run = await runIsolationSpec('postgres://127.0.0.1:1/none', HUGE);
    expect(run.isErr()).toBe(true);
    const error = run._unsafeUnwrapErr();
    expect(error).toBeInstanceOf(SpecTooManyPermutations);
    expect(error).toMatchObject({ permutations: 11_732_745_024n, limit: MAX_SPEC_PERMUTATIONS });
    expect(error.message).toContain('11,732,745,024');
    expect(error.message).toContain('add permutation lines');
  });

  it('unusedSteps(): the steps no permutation line uses, in byte order, only when permutations are listed', () => {
    const listed = parseIsolationSpec(`session s1
step s3_r { SELECT 1; }
step s3_del_a { SELECT 2; }
step B { SELECT 3; }
step used { SELECT 4; }
session s2
step z { SELECT 5; }
permutation used z`)._unsafeUnwrap();
    expect(unusedSteps(listed)).toEqual(['B', 's3_del_a', 's3_r']);
    expect(unusedSteps(spec)).toEqual([]);
  });
});

describe('formatResultSet()', () => {
  it('prints as libpq PQprint does: numbers right-aligned, text left-aligned, NULL empty, a row count', () => {
    expect(
      formatResultSet({
        columns: ['id', 'data', 'n'],
        values: [
          ['1', 'foo', null],
          ['10', null, '-1.5e3'],
        ],
      }),
    ).toBe('id|data|     n\n--+----+------\n 1|foo |      \n10|    |-1.5e3\n(2 rows)\n\n');
    expect(formatResultSet({ columns: ['e'], values: [['E1']] })).toBe('e \n--\nE1\n(1 row)\n\n');
    expect(formatResultSet({ columns: ['x'], values: [] })).toBe('x\n-\n(0 rows)\n\n');
    expect(formatResultSet({ columns: [], values: [] })).toBe('');
  });
});
