import type { ChildProcess } from 'node:child_process';
import { chmod, copyFile, lchown, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod/v4';
import { PostgresStartError } from './postgres-start-error.js';
import { freePort, guardSignals, STOP_GRACE_MS, startPostmaster, stopPostmaster } from './postmaster.js';
import { withClient } from './test-database.js';

/** How far a standby is behind its primary, in WAL positions and bytes. */
export interface ReplicationLag {
  /** `pg_current_wal_insert_lsn()` on the primary (with `synchronous_commit = off` a commit can be past the write position). */
  readonly primaryLsn: string;
  /** `pg_last_wal_replay_lsn()` on the standby: what its readers can see. */
  readonly replayLsn: string;
  /** WAL bytes written on the primary and not yet replayed on the standby (0 when caught up). */
  readonly bytes: number;
}

/** A running hot standby of an embedded primary (see {@link StartedPostgres.startStandby}). */
export interface StartedStandby {
  /** Connection string of the superuser on the standby's `postgres` database (read-only until promoted). */
  readonly url: string;
  /** The replication slot that keeps the primary's WAL for this standby. */
  readonly slot: string;
  /** How far replay is behind the primary's current WAL position. */
  lag(): Promise<ReplicationLag>;
  /** Resolves once the standby has replayed everything the primary had written when it was called. */
  caughtUp(options?: { readonly timeoutMs?: number }): Promise<void>;
  /** `pg_wal_replay_pause()`: WAL still arrives but is not applied, so readers see an older state. */
  pauseReplay(): Promise<void>;
  /** `pg_wal_replay_resume()`. */
  resumeReplay(): Promise<void>;
  /**
   * Ends recovery (`pg_promote()`, waiting for it): the standby becomes a writable primary of its own
   * and stops following the old one. Resumes a paused replay first.
   */
  promote(): Promise<void>;
  /** Stops the standby, removes its data directory and drops its slot on the primary (when it answers). */
  stop(): Promise<void>;
}

const standbyOptionsSchema = z
  .object({
    /** Port of the standby; 0 (default) picks a free one. */
    port: z.number().int().min(0).max(65535).default(0),
    /**
     * Synchronous replication: the primary's COMMIT waits until the standby has flushed it
     * (`synchronous_standby_names`), so a promotion loses no acknowledged commit. Needs a primary started
     * with `fast: false` (`synchronous_commit = off` would not wait). Default false (asynchronous).
     */
    synchronous: z.boolean().default(false),
  })
  .strict();

/** Options of {@link StartedPostgres.startStandby}. */
export type StartStandbyOptions = z.input<typeof standbyOptionsSchema>;

/** What the embedded provider knows about its primary (internal). */
export interface StandbySource {
  readonly url: string;
  readonly major: number;
  readonly dataDir: string;
  readonly binary: string;
  readonly password: string;
  /** `-c name=value` flags of the primary (the standby needs the same max_connections and co). */
  readonly flags: readonly string[];
  /** Owner of the data directory when running as root. */
  readonly ids: { readonly uid: number; readonly gid: number } | undefined;
  readonly log: (line: string) => void;
}

/**
 * Contents of the data directory that a base backup leaves out (the documented list of the low-level
 * backup API): the WAL (streamed from the slot instead), the primary's slots, its pid file, and
 * directories of run-time state that the server rebuilds at start-up.
 */
const SKIP_CONTENTS = new Set([
  'pg_wal',
  'pg_replslot',
  'pg_dynshmem',
  'pg_notify',
  'pg_serial',
  'pg_snapshots',
  'pg_stat_tmp',
  'pg_subtrans',
]);
const SKIP_FILES = new Set(['postmaster.pid', 'postmaster.opts', 'backup_label', 'tablespace_map']);

function isMissing(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'ENOENT';
}

/**
 * Copies a live data directory (during a low-level backup): files that vanish while it runs (a dropped
 * table, a temporary file) are skipped — the WAL replayed from the backup's start recreates or drops them.
 */
async function copyDataDir(from: string, to: string, ids: StandbySource['ids'], top = true): Promise<void> {
  let entries: import('node:fs').Dirent[];
  try {
    entries = await readdir(from, { withFileTypes: true });
  } catch (error) {
    if (isMissing(error)) return;
    throw error;
  }
  for (const entry of entries) {
    const source = join(from, entry.name);
    const target = join(to, entry.name);
    if (entry.name.startsWith('pgsql_tmp')) continue;
    if (entry.isDirectory()) {
      await mkdir(target, { mode: 0o700 });
      if (ids) await lchown(target, ids.uid, ids.gid);
      if (top && SKIP_CONTENTS.has(entry.name)) {
        if (entry.name === 'pg_wal') {
          await mkdir(join(target, 'archive_status'), { mode: 0o700 });
          if (ids) await lchown(join(target, 'archive_status'), ids.uid, ids.gid);
        }
        continue;
      }
      await copyDataDir(source, target, ids, false);
    } else if (entry.isFile()) {
      if (top && SKIP_FILES.has(entry.name)) continue;
      try {
        await copyFile(source, target);
      } catch (error) {
        if (isMissing(error)) continue;
        throw error;
      }
      await chmod(target, 0o600);
      if (ids) await lchown(target, ids.uid, ids.gid);
    }
  }
}

async function writeOwned(path: string, text: string, ids: StandbySource['ids']): Promise<void> {
  await writeFile(path, text, { mode: 0o600 });
  if (ids) await lchown(path, ids.uid, ids.gid);
}

/** A libpq keyword/value string's value, quoted. */
function conninfoValue(value: string): string {
  return `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;
}

/** A postgresql.conf string value, quoted. */
function confValue(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

/**
 * Builds and starts a streaming hot standby of `source` with the server binaries only (no
 * pg_basebackup): a physical replication slot that keeps the WAL from now on, a low-level online
 * backup (`pg_backup_start` / `pg_start_backup` on PostgreSQL 14) while the data directory is copied,
 * the backup label it returns, `standby.signal`, `primary_conninfo` and `primary_slot_name`, then a
 * postmaster on a free port that streams the rest from the slot. The primary keeps running.
 * Internal: reached through {@link StartedPostgres.startStandby}.
 */
export async function startStandby(
  source: StandbySource,
  options: StartStandbyOptions = {},
): Promise<StartedStandby> {
  const parsed = standbyOptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new PostgresStartError([
      { provider: 'embedded', reason: `invalid standby options: ${z.prettifyError(parsed.error)}` },
    ]);
  }
  const port = parsed.data.port || (await freePort());
  const slot = `pg_txkit_standby_${port}`;
  const dataDir = await mkdtemp(join(tmpdir(), 'pg-txkit-standby-'));
  await chmod(dataDir, 0o700);
  if (source.ids) await lchown(dataDir, source.ids.uid, source.ids.gid);
  const cleanUp = async (): Promise<void> => {
    await rm(dataDir, { recursive: true, force: true });
    await withClient(source.url, (c) =>
      // Drops the slot (no table lock); fails harmlessly when the slot is in use or already gone.
      c.query('SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1', [
        slot,
      ]),
    ).catch(() => {});
  };
  const backupFns =
    source.major >= 15
      ? { start: 'SELECT pg_backup_start($1, true)', stop: 'SELECT labelfile FROM pg_backup_stop(false)' }
      : {
          start: 'SELECT pg_start_backup($1, true, false)',
          stop: 'SELECT labelfile FROM pg_stop_backup(false, false)',
        };
  try {
    await withClient(source.url, async (client) => {
      // A physical slot reserving WAL at once (no table lock): the primary keeps every segment from here
      // until the standby has streamed it, so the backup's start point is still there when it connects.
      await client.query('SELECT pg_create_physical_replication_slot($1, true)', [slot]);
      // Starts a non-exclusive backup in THIS session (no lock; forces full-page writes and a checkpoint).
      await client.query(backupFns.start, [slot]);
      await copyDataDir(source.dataDir, dataDir, source.ids);
      // Ends the backup (no lock) and returns the label the standby starts recovery from.
      const { rows } = await client.query<{ labelfile: string }>(backupFns.stop);
      const label = rows[0]?.labelfile;
      if (!label) throw new Error('the backup returned no label');
      await writeOwned(join(dataDir, 'backup_label'), label, source.ids);
      if (parsed.data.synchronous) {
        // ALTER SYSTEM + reload (no lock): COMMIT on the primary waits for this standby's flush.
        await client.query(`ALTER SYSTEM SET synchronous_standby_names = ${confValue(`"${slot}"`)}`);
        await client.query('SELECT pg_reload_conf()');
      }
    });
    const primary = new URL(source.url);
    const conninfo = [
      `host=${conninfoValue(primary.hostname)}`,
      `port=${conninfoValue(primary.port || '5432')}`,
      `user=${conninfoValue(decodeURIComponent(primary.username))}`,
      `password=${conninfoValue(source.password)}`,
      `application_name=${conninfoValue(slot)}`,
    ].join(' ');
    await writeOwned(join(dataDir, 'standby.signal'), '', source.ids);
    await writeOwned(
      join(dataDir, 'postgresql.auto.conf'),
      `primary_conninfo = ${confValue(conninfo)}\nprimary_slot_name = ${confValue(slot)}\n`,
      source.ids,
    );
  } catch (error) {
    await cleanUp();
    throw new PostgresStartError(
      [{ provider: 'embedded', reason: `standby backup failed: ${String(error)}` }],
      {
        cause: error,
      },
    );
  }
  const args = [
    '-D',
    dataDir,
    '-p',
    String(port),
    ...source.flags,
    '-c',
    'hot_standby=on',
    '-c',
    `unix_socket_directories=${dataDir}`,
    '-h',
    '127.0.0.1',
  ];
  let postmaster: ChildProcess | undefined;
  try {
    postmaster = await startPostmaster(source.binary, args, source.ids, source.log);
  } catch (error) {
    await cleanUp();
    throw new PostgresStartError(
      [{ provider: 'embedded', reason: `standby failed to start: ${String(error)}` }],
      {
        cause: error,
      },
    );
  }
  const url = `postgres://postgres:${encodeURIComponent(source.password)}@127.0.0.1:${port}/postgres`;
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      unguard();
      await stopPostmaster(postmaster, STOP_GRACE_MS);
      await cleanUp();
    })();
    return stopping;
  };
  const unguard = guardSignals(stop, () => postmaster);
  const lag = async (): Promise<ReplicationLag> => {
    // Reads the primary's WAL insert position (no lock): every commit so far ends at or before it.
    const primaryLsn = await withClient(source.url, async (c) => {
      const { rows } = await c.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
      return rows[0]?.lsn ?? '0/0';
    });
    // Reads the standby's replay position and the distance to the primary's (no lock).
    return withClient(url, async (c) => {
      const { rows } = await c.query<{ lsn: string | null; bytes: string | null }>(
        'SELECT pg_last_wal_replay_lsn()::text AS lsn, ' +
          'greatest(0, pg_wal_lsn_diff($1::pg_lsn, pg_last_wal_replay_lsn()))::text AS bytes',
        [primaryLsn],
      );
      const row = rows[0];
      return { primaryLsn, replayLsn: row?.lsn ?? '0/0', bytes: Number(row?.bytes ?? 0) };
    });
  };
  const onStandby = (text: string): Promise<void> =>
    withClient(url, async (c) => {
      await c.query(text);
    });
  return {
    url,
    slot,
    lag,
    caughtUp: async ({ timeoutMs = 30_000 } = {}) => {
      const target = (await lag()).primaryLsn;
      const started = Date.now();
      for (;;) {
        // Has replay reached the primary's position of the call? (no lock)
        const reached = await withClient(url, async (c) => {
          const { rows } = await c.query<{ ok: boolean }>(
            'SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false) AS ok',
            [target],
          );
          return rows[0]?.ok === true;
        });
        if (reached) return;
        if (Date.now() - started > timeoutMs) {
          throw new Error(`the standby did not replay up to ${target} within ${timeoutMs} ms`);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    // Recovery control functions: no lock, superuser only.
    pauseReplay: () => onStandby('SELECT pg_wal_replay_pause()'),
    resumeReplay: () => onStandby('SELECT pg_wal_replay_resume()'),
    promote: () =>
      withClient(url, async (c) => {
        const { rows } = await c.query<{ recovering: boolean }>('SELECT pg_is_in_recovery() AS recovering');
        if (rows[0]?.recovering !== true) return;
        // A paused replay would hold the promotion back on older servers: resume it first (no lock).
        await c.query('SELECT pg_wal_replay_resume()');
        // Ends recovery and waits up to 60 s for it (no lock).
        const promoted = await c.query<{ done: boolean }>('SELECT pg_promote(true, 60) AS done');
        if (promoted.rows[0]?.done !== true) throw new Error('pg_promote() did not finish within 60 s');
      }),
    stop,
  };
}
