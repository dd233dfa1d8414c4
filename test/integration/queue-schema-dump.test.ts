// The schema a fresh migrate() makes, dumped from the catalog and compared with the committed dump
// (src/queue/schema/schema-dump.txt): a migration's effect is reviewed as a diff of that file, and a
// schema that drifts from it (an edited migration, a changed runner) fails here. Regenerate it with
// `npm run schema:dump` after adding a migration.
import { readFileSync, writeFileSync } from 'node:fs';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase();
const DUMP = new URL('../../src/queue/schema/schema-dump.txt', import.meta.url);
const SCHEMA = 'q_schema_dump';

/** Tables with their columns, constraints, indexes, functions and triggers of `schema`, as text. */
async function dump(schema: string): Promise<string> {
  const lines: string[] = [];
  const q = async (text: string) => (await pool.query(text, [schema])).rows;
  for (const t of await q(
    `SELECT c.oid, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm') ORDER BY c.relname`,
  )) {
    lines.push(`TABLE ${t.relname} (${t.relkind})`);
    const cols = await pool.query(
      `SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull, a.attidentity,
              pg_get_expr(d.adbin, d.adrelid) AS dflt
         FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
      [t.oid],
    );
    for (const c of cols.rows) {
      const extra = [
        c.attnotnull ? 'NOT NULL' : '',
        c.attidentity ? `IDENTITY ${c.attidentity}` : '',
        c.dflt === null ? '' : `DEFAULT ${c.dflt}`,
      ].filter(Boolean);
      lines.push(`  ${c.attname} ${c.type}${extra.length > 0 ? ` ${extra.join(' ')}` : ''}`);
    }
    const cons = await pool.query(
      `SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
        WHERE conrelid = $1 AND contype <> 'n' ORDER BY conname`,
      [t.oid],
    );
    for (const c of cons.rows) lines.push(`  CONSTRAINT ${c.conname} ${c.def}`);
  }
  for (const i of await q(
    `SELECT pg_get_indexdef(i.indexrelid) AS def, c.relname FROM pg_index i
       JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 ORDER BY c.relname`,
  ))
    lines.push(`${i.def};`);
  for (const f of await q(
    `SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args, pg_get_functiondef(p.oid) AS def
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 ORDER BY p.proname, args`,
  ))
    lines.push(`${f.def.trimEnd()};`);
  for (const t of await q(
    `SELECT t.tgname, pg_get_triggerdef(t.oid) AS def FROM pg_trigger t
       JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND NOT t.tgisinternal ORDER BY c.relname, t.tgname`,
  ))
    lines.push(`${t.def};`);
  return `${lines.join('\n').replaceAll(pg.escapeIdentifier(schema), '{{schema}}').replaceAll(schema, '{{schema}}')}\n`;
}

describe('the schema a fresh migrate() makes', () => {
  it('is the committed dump', async () => {
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: SCHEMA,
      tasks: { email: z.object({ to: z.string() }) },
    });
    (await queue.migrate())._unsafeUnwrap();
    const text = await dump(SCHEMA);
    if (process.env.PG_TXKIT_UPDATE_SCHEMA_DUMP === '1') writeFileSync(DUMP, text);
    expect(text).toBe(readFileSync(DUMP, 'utf8'));
  });
});
