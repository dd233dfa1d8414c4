import { err, ok, type Result } from 'neverthrow';
import pg from 'pg';
import {
  type CapabilityName,
  ConnectionLost,
  classify,
  classifyOrRethrow,
  type DatabaseFailure,
  isConnectionError,
  looksLikeDatabaseError,
} from '../errors/index.js';
import { type ConnectionTarget, connectionConfigOf } from './connection-config-of.js';
import { detectTransactionPooler } from './detect-transaction-pooler.js';
import { type Engine, engineOf } from './engine-of.js';
import {
  type ExtensionFacts,
  type ExtensionStatus,
  extensionFactsSql,
  extensionProblem,
  extensionStatusOf,
} from './extension-status.js';

/**
 * What the server, and the way the connection reaches it, offer — as {@link capabilities} found them.
 * Frozen. `unsupported` says, for each capability that is false, why.
 */
export interface Capabilities {
  /** Which engine answers (see `engineOf`). */
  readonly engine: Engine;
  /** `SELECT version()`. */
  readonly version: string;
  /** `server_version_num` (PostgreSQL 14.5 → 140005; what compatible engines report), if the server says. */
  readonly serverVersionNum: number | undefined;
  /** Evidence of a transaction-mode pooler (PgBouncer `pool_mode = transaction` …) in front; undefined if none was seen. */
  readonly transactionPooler: string | undefined;
  /** The session starts read-only transactions (`transaction_read_only`: a hot standby, or `default_transaction_read_only`). */
  readonly readOnly: boolean;
  /** The server is a hot standby (`pg_is_in_recovery()`). */
  readonly inRecovery: boolean;
  /** `pg_try_advisory_xact_lock` works (transaction-scoped advisory locks: withAdvisoryLock, migrations). */
  readonly advisoryLocks: boolean;
  /** Session advisory locks can be held (SessionLock): advisory locks, and no transaction pooler in front. */
  readonly sessionLocks: boolean;
  /** LISTEN/NOTIFY delivers (the session got its own notification), and no transaction pooler in front. */
  readonly listenNotify: boolean;
  /** `FOR UPDATE SKIP LOCKED` (the queue's claim) is accepted. */
  readonly skipLocked: boolean;
  /** `btree_gist` for this role (Bookings' EXCLUDE constraint needs it). */
  readonly btreeGist: ExtensionStatus;
  /** `EXCLUDE USING gist` constraints, from the engine's documentation. */
  readonly exclusionConstraints: boolean;
  /** A SERIALIZABLE transaction runs as serializable (a hot standby refuses it; some engines run another level). */
  readonly serializable: boolean;
  /** SAVEPOINT works (`propagation: 'nested'`, Bookings' in-transaction retry). */
  readonly savepoints: boolean;
  /** Why each capability that is false is false. */
  readonly unsupported: Readonly<Partial<Record<CapabilityName, string>>>;
}

/** Where {@link capabilities} connects: a pool (its connection options are reused), a config, or a URL. */
export type CapabilitiesTarget = ConnectionTarget;

// No lock: server facts in one round trip (catalog reads; see extensionFactsSql for btree_gist's).
const FACTS_SQL = `SELECT version() AS version,
  current_setting('server_version_num', true) AS version_num,
  pg_is_in_recovery() AS in_recovery,
  current_setting('transaction_read_only', true) AS read_only,
  (SELECT extversion FROM pg_extension WHERE extname = 'citus') AS citus,
  ${extensionFactsSql('$1')}`;

// No lock: the fallback when an engine lacks part of the catalog FACTS_SQL reads.
const VERSION_SQL = `SELECT version() AS version, current_setting('server_version_num', true) AS version_num`;

// Transaction-scoped advisory try-locks on the probe's own key (never wait): held by the first session
// inside BEGIN … ROLLBACK, asked for by the second, which must be refused — an engine whose advisory
// functions are stubs that always return true (CockroachDB before it implemented them) is caught here.
const ADVISORY_KEY = '7385232110963917713';
const ADVISORY_HOLD_SQL = `BEGIN; SELECT pg_try_advisory_xact_lock(${ADVISORY_KEY}) AS locked`;
const ADVISORY_TRY_SQL = `SELECT pg_try_advisory_xact_lock(${ADVISORY_KEY}) AS locked`;

// No lock: does SERIALIZABLE run as serializable? Rolled back at once.
const SERIALIZABLE_SQL = `BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT current_setting('transaction_isolation') AS isolation; ROLLBACK`;

// No lock: the SKIP LOCKED syntax on a FROM-less SELECT (nothing to lock; an engine without it refuses
// the statement).
const SKIP_LOCKED_SQL = 'SELECT 1 FOR UPDATE SKIP LOCKED';

// No lock: a savepoint in an empty transaction, rolled back at once.
const SAVEPOINT_SQL = 'BEGIN; SAVEPOINT pg_txkit_probe; ROLLBACK';

/** Longest wait to open each of the probe's connections (the pool's own setting, if any, wins). */
const CONNECT_TIMEOUT_MS = 10_000;

/** The probe's own channel (per backend pid: two concurrent probes never hear each other). */
const channelOf = (pid: number): string => `pg_txkit_probe_${pid}`;

interface Facts extends ExtensionFacts {
  version: string;
  version_num: string | null;
  in_recovery: boolean;
  read_only: string | null;
  citus: string | null;
}

/** Ran a probe: true, or the server's refusal as text (a broken connection is rethrown). */
async function probe(run: () => Promise<boolean | string>): Promise<true | string> {
  try {
    const outcome = await run();
    return outcome === true ? true : outcome === false ? 'the probe did not see it work' : outcome;
  } catch (error) {
    if (!looksLikeDatabaseError(error) || isConnectionError(error)) throw error;
    const e = error as Error & { code: string };
    return `the server refused it (${e.code}: ${e.message})`;
  }
}

/** EXCLUDE constraints cannot be tried without a table: what each engine's documentation says (docs/scale-out.md). */
const EXCLUDE_CONSTRAINTS: Record<Engine, true | string> = {
  postgresql: true,
  citus: true,
  cockroachdb: 'CockroachDB has no EXCLUDE constraints (and no GiST indexes over scalar columns)',
  yugabytedb: 'YugabyteDB does not support EXCLUDE constraints',
  'aurora-dsql': 'Aurora DSQL does not support exclusion constraints',
};

function hostOf(target: CapabilitiesTarget): string | undefined {
  const config = connectionConfigOf(target);
  if (typeof config.host === 'string') return config.host;
  if (config.connectionString === undefined) return undefined;
  try {
    return new URL(config.connectionString).hostname || undefined;
  } catch {
    return undefined;
  }
}

function configOf(target: CapabilitiesTarget, connectTimeoutMs: number): pg.ClientConfig {
  const base = connectionConfigOf(target);
  return {
    ...base,
    application_name: 'pg-txkit:capabilities',
    connectionTimeoutMillis: base.connectionTimeoutMillis || connectTimeoutMs,
  };
}

async function open(config: pg.ClientConfig): Promise<pg.Client> {
  const client = new pg.Client(config);
  client.on('error', () => {}); // a connection error surfaces as the rejection of the query in flight
  try {
    await client.connect();
  } catch (error) {
    void client.end().catch(() => {});
    // pg rejects a connect slower than connectionTimeoutMillis with a plain Error('timeout expired').
    if (classify(error) === undefined && error instanceof Error && /timeout/i.test(error.message)) {
      throw new ConnectionLost(undefined, error);
    }
    throw error;
  }
  return client;
}

const close = async (client: pg.Client): Promise<void> => {
  await client.end().catch(() => {});
};

/** The first value of `column` in the results of a (possibly multi-statement) simple query. */
function firstValue(result: unknown, column: string): unknown {
  for (const r of Array.isArray(result) ? result : [result]) {
    const rows = (r as { rows?: unknown } | undefined)?.rows;
    if (Array.isArray(rows) && rows.length > 0) return (rows[0] as Record<string, unknown>)[column];
  }
  return undefined;
}

async function detect(target: CapabilitiesTarget, connectTimeoutMs: number): Promise<Capabilities> {
  const config = configOf(target, connectTimeoutMs);
  const client = await open(config);
  try {
    let facts: Facts;
    try {
      facts = (await client.query<Facts>(FACTS_SQL, ['btree_gist'])).rows[0] as Facts;
    } catch (error) {
      if (!looksLikeDatabaseError(error) || isConnectionError(error)) throw error;
      // An engine without part of PostgreSQL's catalog: what every engine has.
      const v = (await client.query<{ version: string; version_num: string | null }>(VERSION_SQL)).rows[0];
      facts = {
        version: String(v?.version ?? ''),
        version_num: v?.version_num ?? null,
        in_recovery: false,
        read_only: null,
        ext_installed: null,
        ext_available: false,
        ext_trusted: false,
        superuser: false,
        can_create: false,
        read_only_session: false,
        citus: null,
      };
    }
    const engine = engineOf({
      version: facts.version,
      citus: facts.citus ?? undefined,
      host: hostOf(target),
    });
    // The second connection serves the pooler probe, then the advisory-lock exclusion check.
    const second = await open(config);
    try {
      const pooler = await detectTransactionPooler(
        client,
        async () => second,
        async () => {},
      );
      const unsupported: Partial<Record<CapabilityName, string>> = {};
      const note = (name: CapabilityName, outcome: true | string): boolean => {
        if (outcome === true) return true;
        unsupported[name] = outcome;
        return false;
      };
      const rollback = (): Promise<unknown> => client.query('ROLLBACK').catch(() => undefined);

      const advisoryLocks = note(
        'advisoryLocks',
        await probe(async () => {
          const held = firstValue(await client.query(ADVISORY_HOLD_SQL), 'locked');
          // Behind a transaction pooler the second connection may need the server connection this
          // transaction pins: the function exists and answered, which is what can be checked there.
          if (held !== true || pooler.evidence !== undefined) return true;
          const again = firstValue(await second.query(ADVISORY_TRY_SQL), 'locked');
          return (
            again === false ||
            'pg_try_advisory_xact_lock granted one key to two sessions at once: the advisory lock functions do not lock'
          );
        }).finally(rollback),
      );
      const sessionLocks = note(
        'sessionLocks',
        !advisoryLocks
          ? 'no advisory locks'
          : engine === 'cockroachdb'
            ? 'CockroachDB has no session-scoped advisory locks (its pg_advisory_lock is a stub that locks nothing)'
            : pooler.evidence !== undefined
              ? `a transaction-mode pooler is in front (${pooler.evidence}): a session lock would stay on a server connection that then serves other clients`
              : true,
      );

      // LISTEN + NOTIFY to ourselves, then UNLISTEN: the notification arrives before the answer to NOTIFY. On this probe's own connection, closed below: nothing outlives the call.
      const channel = pg.escapeIdentifier(channelOf(pooler.pid));
      let heard = false;
      const onNotification = (): void => {
        heard = true;
      };
      client.on('notification', onNotification);
      const delivered = await probe(async () => {
        // One implicit transaction: at its commit the session listens, then its notification is queued,
        // and the server delivers it before it says it is ready for the next query.
        await client.query(`LISTEN ${channel}; NOTIFY ${channel}`);
        await client.query(`UNLISTEN ${channel}`);
        return heard || 'LISTEN and NOTIFY ran but the notification never arrived';
      });
      client.off('notification', onNotification);
      const listenNotify = note(
        'listenNotify',
        delivered !== true
          ? delivered
          : pooler.evidence !== undefined
            ? `a transaction-mode pooler is in front (${pooler.evidence}): LISTEN registers on whichever server connection ran it, and notifications then go to another client or nowhere`
            : true,
      );

      const serializable = note(
        'serializable',
        facts.in_recovery
          ? 'a hot standby cannot run serializable transactions'
          : await probe(async () => {
              const result: unknown = await client.query(SERIALIZABLE_SQL);
              const level = firstValue(result, 'isolation');
              return level === 'serializable' || `SERIALIZABLE ran as ${String(level)}`;
            }).finally(rollback),
      );
      const savepoints = note(
        'savepoints',
        await probe(async () => {
          await client.query(SAVEPOINT_SQL);
          return true;
        }).finally(rollback),
      );

      const skipLocked = note(
        'skipLocked',
        await probe(async () => {
          await client.query(SKIP_LOCKED_SQL);
          return true;
        }),
      );
      const exclusionConstraints = note('exclusionConstraints', EXCLUDE_CONSTRAINTS[engine]);
      const btreeGist = extensionStatusOf(facts);
      const gistProblem = extensionProblem('btree_gist', btreeGist);
      if (gistProblem !== undefined) unsupported.btreeGist = gistProblem;

      const versionNum = Number(facts.version_num);
      return Object.freeze({
        engine,
        version: facts.version,
        serverVersionNum: Number.isInteger(versionNum) && versionNum > 0 ? versionNum : undefined,
        transactionPooler: pooler.evidence,
        readOnly: facts.read_only === 'on',
        inRecovery: facts.in_recovery === true,
        advisoryLocks,
        sessionLocks,
        listenNotify,
        skipLocked,
        btreeGist,
        exclusionConstraints,
        serializable,
        savepoints,
        unsupported: Object.freeze(unsupported),
      });
    } finally {
      await close(second);
    }
  } finally {
    await close(client);
  }
}

/**
 * Finds out what the server, and the way the connection reaches it, offer — on a connection of its own
 * (built from the pool's options; the pool itself is not used), closed before it returns, so nothing
 * it does outlives the call: no listener, no lock, no table. A few cheap statements: one round trip of
 * server facts (`version()`, `server_version_num`, `pg_is_in_recovery()`, `transaction_read_only`,
 * `btree_gist` in `pg_extension` / `pg_available_extensions` and this role's right to install it,
 * `citus`), the transaction-pooler probe that SessionLock and the queue worker use (a second short-lived
 * connection, a repeated `pg_backend_pid()`, and when those look like a session a NOTIFY from the second
 * connection that the first must hear), then one round trip each for a transaction-scoped
 * advisory try-lock, LISTEN + NOTIFY to itself + UNLISTEN, a SERIALIZABLE transaction that reports its
 * level, a FROM-less `SELECT … FOR UPDATE SKIP LOCKED`, and a SAVEPOINT — each rolled back. EXCLUDE
 * constraints cannot be tried without a table: they come from the engine's documentation
 * (docs/scale-out.md).
 *
 * Returns a frozen {@link Capabilities}; `Err(DatabaseFailure)` when the server cannot be reached
 * (`ConnectionLost`, an authentication failure as `DbError` …). A refused probe is a `false` capability
 * with its reason in `unsupported`, not an error. Not cached: call it at start-up and keep the result
 * (a failover can change the answer).
 *
 * @example
 * const caps = await capabilities(pool);
 * if (caps.isOk() && !caps.value.listenNotify) console.warn('queue workers will poll:', caps.value.unsupported.listenNotify);
 */
export async function capabilities(
  target: CapabilitiesTarget,
): Promise<Result<Capabilities, DatabaseFailure>> {
  try {
    return ok(await detect(target, CONNECT_TIMEOUT_MS));
  } catch (error) {
    return err(classifyOrRethrow(error));
  }
}
