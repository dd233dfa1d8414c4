import { err, ok, type Result } from 'neverthrow';

/** A step of a session in a `.spec` file: `step name { SQL }`. */
export interface SpecStep {
  /** The step's name, as permutations refer to it. */
  readonly name: string;
  /** The SQL, as the isolation tester keeps it: spaces (not newlines) after `{` and before `}` trimmed. */
  readonly sql: string;
  /** The session the step belongs to. */
  readonly session: string;
  /** Line of the `step` keyword. */
  readonly line: number;
}

/** A session of a `.spec` file, with its own connection. */
export interface SpecSession {
  /** The session's name. */
  readonly name: string;
  /** SQL run on the session's connection before each permutation. */
  readonly setup: string | undefined;
  /** Its steps, in the file's order. */
  readonly steps: readonly SpecStep[];
  /** SQL run on the session's connection after each permutation. */
  readonly teardown: string | undefined;
  /** Line of the `session` keyword. */
  readonly line: number;
}

/**
 * A blocker annotation of a permutation step: `(*)`, `(other_step)` or `(other_step notices N)`.
 * See {@link StepBlocker} for what each means when the step runs.
 */
export type SpecBlocker =
  | { readonly kind: 'once' }
  | { readonly kind: 'step'; readonly step: string }
  | { readonly kind: 'notices'; readonly step: string; readonly notices: number };

/** A step of a permutation line, with its annotations. */
export interface SpecPermutationStep {
  /** The step's name. */
  readonly step: string;
  /** Its annotations: `(*)`, `(other_step)`, `(other_step notices N)`. */
  readonly blockers: readonly SpecBlocker[];
}

/** A `permutation` line. */
export interface SpecPermutation {
  /** The steps, in the order to run them. */
  readonly steps: readonly SpecPermutationStep[];
  /** Line of the `permutation` keyword. */
  readonly line: number;
}

/** A parsed PostgreSQL isolation test specification. */
export interface IsolationSpec {
  /** The `setup` blocks, run in order on the control connection before each permutation. */
  readonly setup: readonly string[];
  /** The `teardown` block, run on the control connection after each permutation. */
  readonly teardown: string | undefined;
  /** The sessions, in the file's order. */
  readonly sessions: readonly SpecSession[];
  /** The permutations listed, or `[]`: then every permutation of the sessions' steps is run. */
  readonly permutations: readonly SpecPermutation[];
}

/** A `.spec` text the isolation tester would refuse: says why and at which line. */
export class SpecSyntaxError extends Error {
  /** The class name, for stack traces and logs. */
  override readonly name = 'SpecSyntaxError';
  /** Discriminant, `'SpecSyntaxError'`. */
  readonly kind = 'SpecSyntaxError' as const;
  /** 1-based line of the problem. */
  readonly line: number;
  /** The message without the line. */
  readonly reason: string;
  constructor(line: number, reason: string) {
    super(`${reason} at line ${line}`);
    this.line = line;
    this.reason = reason;
  }
}

type TokenKind =
  | 'permutation'
  | 'session'
  | 'setup'
  | 'step'
  | 'teardown'
  | 'notices'
  | 'identifier'
  | 'sqlblock'
  | 'integer'
  | ','
  | '('
  | ')'
  | '*'
  | 'end';

interface Token {
  readonly kind: TokenKind;
  readonly text: string;
  readonly line: number;
}

const KEYWORDS = new Set<TokenKind>(['notices', 'permutation', 'session', 'setup', 'step', 'teardown']);
// the scanner's classes: `space` has no newline; identifiers take bytes \200-\377 (any non-ASCII)
const SPACE = /[ \t\r\f]/;
const IDENT_START = /[A-Za-z_\u0080-\uffff]/;
const IDENT_CONT = /[A-Za-z_0-9$\u0080-\uffff]/;

/** The lexer of `specscanner.l`: keywords, identifiers (plain or "quoted"), `{ SQL }` blocks, integers, `,()*`. */
function tokenize(text: string): Result<Token[], SpecSyntaxError> {
  const tokens: Token[] = [];
  let line = 1;
  let i = 0;
  const at = (k: number): string => text.charAt(k);
  while (i < text.length) {
    const c = at(i);
    if (c === '\n') {
      line++;
      i++;
    } else if (SPACE.test(c)) {
      i++;
    } else if (c === '#') {
      while (i < text.length && at(i) !== '\n' && at(i) !== '\r') i++;
    } else if (IDENT_START.test(c)) {
      let j = i + 1;
      while (j < text.length && IDENT_CONT.test(at(j))) j++;
      const word = text.slice(i, j);
      const kind = KEYWORDS.has(word as TokenKind) ? (word as TokenKind) : 'identifier';
      tokens.push({ kind, text: word, line });
      i = j;
    } else if (c === '"') {
      let value = '';
      let j = i + 1;
      for (;;) {
        if (j >= text.length) return err(new SpecSyntaxError(line, 'unterminated quoted identifier'));
        const d = at(j);
        if (d === '\n') return err(new SpecSyntaxError(line, 'unexpected newline in quoted identifier'));
        if (d === '"') {
          if (at(j + 1) === '"') {
            value += '"';
            j += 2;
            continue;
          }
          break;
        }
        value += d;
        j++;
      }
      tokens.push({ kind: 'identifier', text: value, line });
      i = j + 1;
    } else if (c === '{') {
      const start = line;
      let j = i + 1;
      while (j < text.length && SPACE.test(at(j))) j++;
      let sql = '';
      for (;;) {
        if (j >= text.length) return err(new SpecSyntaxError(line, 'unterminated sql block'));
        // `{space}*"}"` ends the block (trailing spaces trimmed; the first `}` ends it)
        let k = j;
        while (k < text.length && SPACE.test(at(k))) k++;
        if (at(k) === '}') {
          j = k + 1;
          break;
        }
        if (at(j) === '\n') line++;
        sql += at(j);
        j++;
      }
      tokens.push({ kind: 'sqlblock', text: sql, line: start });
      i = j;
    } else if (c >= '0' && c <= '9') {
      let j = i + 1;
      while (j < text.length && at(j) >= '0' && at(j) <= '9') j++;
      tokens.push({ kind: 'integer', text: text.slice(i, j), line });
      i = j;
    } else if (c === ',' || c === '(' || c === ')' || c === '*') {
      tokens.push({ kind: c, text: c, line });
      i++;
    } else {
      return err(new SpecSyntaxError(line, `syntax error: unexpected character ${JSON.stringify(c)}`));
    }
  }
  tokens.push({ kind: 'end', text: '', line });
  return ok(tokens);
}

class Parser {
  #pos = 0;
  constructor(private readonly tokens: readonly Token[]) {}

  peek(): Token {
    return this.tokens[this.#pos] ?? (this.tokens[this.tokens.length - 1] as Token);
  }

  accept(kind: TokenKind): Token | undefined {
    const token = this.peek();
    if (token.kind !== kind) return undefined;
    this.#pos++;
    return token;
  }

  expect(kind: TokenKind, what: string): Token {
    const token = this.accept(kind);
    if (token) return token;
    const found = this.peek();
    const shown =
      found.kind === 'end'
        ? 'the end of the file'
        : found.kind === 'sqlblock'
          ? 'a { SQL } block'
          : JSON.stringify(found.text);
    throw new SpecSyntaxError(found.line, `syntax error: expected ${what}, found ${shown}`);
  }
}

/** The grammar of `specparse.y`: setup* teardown? session+ permutation*. */
function parseTokens(p: Parser): IsolationSpec {
  const setup: string[] = [];
  while (p.accept('setup')) setup.push(p.expect('sqlblock', 'a { SQL } block after "setup"').text);
  const teardown = p.accept('teardown')
    ? p.expect('sqlblock', 'a { SQL } block after "teardown"').text
    : undefined;
  const sessions: SpecSession[] = [];
  do {
    const keyword = p.expect('session', sessions.length === 0 ? '"session"' : '"session" or "permutation"');
    const name = p.expect('identifier', 'a session name').text;
    const sessionSetup = p.accept('setup')
      ? p.expect('sqlblock', 'a { SQL } block after "setup"').text
      : undefined;
    const steps: SpecStep[] = [];
    do {
      const step = p.expect('step', 'a "step" of the session');
      const stepName = p.expect('identifier', 'a step name').text;
      const sql = p.expect('sqlblock', `a { SQL } block for step ${stepName}`).text;
      steps.push({ name: stepName, sql, session: name, line: step.line });
    } while (p.peek().kind === 'step');
    const sessionTeardown = p.accept('teardown')
      ? p.expect('sqlblock', 'a { SQL } block after "teardown"').text
      : undefined;
    sessions.push({ name, setup: sessionSetup, steps, teardown: sessionTeardown, line: keyword.line });
  } while (p.peek().kind === 'session');
  const permutations: SpecPermutation[] = [];
  while (p.peek().kind !== 'end') {
    const keyword = p.expect('permutation', '"session" or "permutation"');
    const steps: SpecPermutationStep[] = [];
    do {
      const step = p.expect('identifier', 'a step name').text;
      const blockers: SpecBlocker[] = [];
      if (p.accept('(')) {
        do {
          if (p.accept('*')) {
            blockers.push({ kind: 'once' });
            continue;
          }
          const other = p.expect('identifier', 'a step name or * in the blocker list').text;
          if (p.accept('notices')) {
            const n = p.expect('integer', 'a number after "notices"');
            blockers.push({ kind: 'notices', step: other, notices: Number.parseInt(n.text, 10) });
          } else {
            blockers.push({ kind: 'step', step: other });
          }
        } while (p.accept(','));
        p.expect(')', '"," or ")" in the blocker list');
      }
      steps.push({ step, blockers });
    } while (p.peek().kind === 'identifier');
    permutations.push({ steps, line: keyword.line });
  }
  return { setup, teardown, sessions, permutations };
}

/** The isolation tester's checks after parsing: unique step names, known steps, no self-blocking. */
function check(spec: IsolationSpec): SpecSyntaxError | undefined {
  const steps = new Map<string, SpecStep>();
  for (const session of spec.sessions) {
    for (const step of session.steps) {
      if (steps.has(step.name)) return new SpecSyntaxError(step.line, `duplicate step name: ${step.name}`);
      steps.set(step.name, step);
    }
  }
  for (const permutation of spec.permutations) {
    for (const pstep of permutation.steps) {
      const step = steps.get(pstep.step);
      if (!step) {
        return new SpecSyntaxError(
          permutation.line,
          `undefined step "${pstep.step}" specified in permutation`,
        );
      }
      for (const blocker of pstep.blockers) {
        if (blocker.kind === 'once') continue;
        const other = steps.get(blocker.step);
        if (!other) {
          return new SpecSyntaxError(
            permutation.line,
            `undefined blocking step "${blocker.step}" referenced in permutation step "${pstep.step}"`,
          );
        }
        if (other.session === step.session) {
          return new SpecSyntaxError(
            permutation.line,
            `permutation step "${pstep.step}" cannot block on its own session`,
          );
        }
      }
    }
  }
  return undefined;
}

/**
 * Parses a PostgreSQL isolation test specification (the `.spec` format of `src/test/isolation`):
 * `setup { … }` blocks, an optional `teardown { … }`, sessions (`session name`, optional `setup`,
 * `step name { SQL }`…, optional `teardown`), and `permutation` lines whose steps may carry
 * blocker annotations (`s1a(*)`, `s2b(s1a)`, `s2b(s1a notices 1)`). Comments start with `#`.
 * Returns a {@link SpecSyntaxError} with the line number for a text the isolation tester refuses.
 *
 * @example
 * const spec = parseIsolationSpec(`
 *   setup { CREATE TABLE t (id int) }
 *   session s1
 *   step s1a { SELECT 1; }
 *   session s2
 *   step s2a { SELECT 2; }
 * `);
 * if (spec.isOk()) console.log(spec.value.sessions.map((s) => s.name)); // ['s1', 's2']
 */
export function parseIsolationSpec(text: string): Result<IsolationSpec, SpecSyntaxError> {
  return tokenize(text).andThen((tokens) => {
    let spec: IsolationSpec;
    try {
      spec = parseTokens(new Parser(tokens));
    } catch (error) {
      if (error instanceof SpecSyntaxError) return err(error);
      throw error;
    }
    const problem = check(spec);
    return problem ? err(problem) : ok(spec);
  });
}

/**
 * The most permutations a spec without `permutation` lines may have: every interleaving of its
 * sessions' steps would run, and isolationtester runs them all, however many. Above this the runner
 * refuses the spec before any SQL ({@link SpecTooManyPermutations}). PostgreSQL 18's own suite stays
 * far below it (1,438 permutations in all, over 110 specs).
 */
export const MAX_SPEC_PERMUTATIONS = 10_000;

/**
 * A spec without `permutation` lines whose sessions' steps have more interleavings than the limit:
 * refused before anything is sent. Add `permutation` lines naming the orders worth running.
 */
export class SpecTooManyPermutations extends Error {
  /** The class name, for stack traces and logs. */
  override readonly name = 'SpecTooManyPermutations';
  /** Discriminant, `'SpecTooManyPermutations'`. */
  readonly kind = 'SpecTooManyPermutations' as const;
  /** How many interleavings the steps have. */
  readonly permutations: bigint;
  /** The limit it is above. */
  readonly limit: number;
  constructor(permutations: bigint, limit: number) {
    super(
      `the spec has no permutation lines, so every interleaving of its sessions' steps would run: ${permutations.toLocaleString('en-US')} of them, more than the limit of ${limit.toLocaleString('en-US')}; add permutation lines naming the orders to run (or raise maxPermutations)`,
    );
    this.permutations = permutations;
    this.limit = limit;
  }
}

/**
 * How many permutations the isolation tester runs: the listed ones, or (none listed) the number of
 * interleavings of the sessions' steps, (n₁ + … + n_k)! / (n₁! · … · n_k!), computed without
 * building any.
 *
 * @example
 * const spec = parseIsolationSpec(text);
 * if (spec.isOk()) console.log(specPermutationCount(spec.value)); // e.g. 20n
 */
export function specPermutationCount(spec: IsolationSpec): bigint {
  if (spec.permutations.length > 0) return BigInt(spec.permutations.length);
  let total = 0n;
  let count = 1n;
  for (const session of spec.sessions) {
    for (let i = 1n; i <= BigInt(session.steps.length); i++) {
      total++;
      count = (count * total) / i; // stays an integer: a running binomial product
    }
  }
  return count;
}

/**
 * The permutations the isolation tester runs, one at a time (nothing is built ahead): the listed
 * ones, or (none listed) every interleaving of the sessions' steps that keeps each session's order,
 * in the isolation tester's order (the first session's next step first).
 *
 * @example
 * for (const permutation of eachSpecPermutation(spec)) console.log(permutation.map((p) => p.step).join(' '));
 */
export function* eachSpecPermutation(spec: IsolationSpec): Generator<SpecPermutationStep[]> {
  if (spec.permutations.length > 0) {
    for (const p of spec.permutations) yield [...p.steps];
    return;
  }
  const piles = spec.sessions.map(() => 0);
  const current: SpecPermutationStep[] = [];
  function* recurse(): Generator<SpecPermutationStep[]> {
    let found = false;
    for (const [i, session] of spec.sessions.entries()) {
      const next = session.steps[piles[i] as number];
      if (!next) continue;
      found = true;
      current.push({ step: next.name, blockers: [] });
      piles[i] = (piles[i] as number) + 1;
      yield* recurse();
      piles[i] = (piles[i] as number) - 1;
      current.pop();
    }
    if (!found) yield [...current];
  }
  yield* recurse();
}

/**
 * The permutations the isolation tester runs, as an array: the listed ones, or (none listed) every
 * interleaving of the sessions' steps, in the isolation tester's order. Throws
 * {@link SpecTooManyPermutations} when there are more than `limit` (default
 * {@link MAX_SPEC_PERMUTATIONS}): use {@link eachSpecPermutation} to walk them one at a time.
 *
 * @example
 * const spec = parseIsolationSpec(text);
 * if (spec.isOk()) console.log(specPermutations(spec.value).length);
 */
export function specPermutations(
  spec: IsolationSpec,
  limit = MAX_SPEC_PERMUTATIONS,
): SpecPermutationStep[][] {
  const count = specPermutationCount(spec);
  if (count > BigInt(limit)) throw new SpecTooManyPermutations(count, limit);
  return [...eachSpecPermutation(spec)];
}

/**
 * The steps no `permutation` line uses, sorted as isolationtester sorts them (by name, byte order):
 * it prints `unused step name: <name>` for each, before anything else. Empty when the spec lists no
 * permutations (then every step is used).
 *
 * @example
 * unusedSteps(spec); // ['s3_del_a', 's3_r']
 */
export function unusedSteps(spec: IsolationSpec): string[] {
  if (spec.permutations.length === 0) return [];
  const used = new Set(spec.permutations.flatMap((p) => p.steps.map((s) => s.step)));
  const names = spec.sessions.flatMap((s) => s.steps.map((step) => step.name)).filter((n) => !used.has(n));
  return names.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}
