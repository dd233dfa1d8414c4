/**
 * One frozen migration of the queue's schema: its version, the file it comes from, the sha-256 of that
 * file's text (recorded in the schema's migrations table when it is applied, and checked by every later
 * `migrate()`) and the text itself ('{{schema}}' and '{{channel}}' are replaced before it runs).
 */
export interface QueueMigration {
  /** The version (the file's number). */
  readonly version: number;
  /** The file name, e.g. '0001_queue.sql' (recorded in the migrations table). */
  readonly name: string;
  /** sha-256 (hex) of the file's text. */
  readonly checksum: string;
  /** The file's text. */
  readonly sql: string;
}
