// The history of the mixed workload: what each transaction attempt of the worker processes read and
// wrote, for checkHistory (pg-txkit/testing). Workers are SIGKILLed mid-transaction, so nothing may be
// kept in a worker's memory: each event is one line appended to the worker's own journal file with a
// synchronous write (in the kernel once writeSync returns: a SIGKILL does not lose it), and a write is
// journaled BEFORE its statement is sent, so a value the database may hold always has its writer in
// the history. An attempt whose end never reached the journal (its process was killed) is of unknown
// outcome, as the recorders make it.
//
// Journal lines (JSON arrays): ["b", id, process] begin, ["r", id, key, value] read, ["w", id, key,
// value] write, ["e", id, "commit" | "abort" | "unknown"] end. Keys and values are strings or null.
import { closeSync, openSync, readdirSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { RegisterRecorder } from '../../../dist/testing/index.js';

/** A worker's journal: one file per worker process, appended synchronously. */
export class HistoryJournal {
  #fd;
  #next = 0;
  #prefix;

  /** @param {string} file a file of this process alone; @param {string} prefix makes ids unique across files */
  constructor(file, prefix) {
    this.#fd = openSync(file, 'a');
    this.#prefix = prefix;
  }

  #line(event) {
    writeSync(this.#fd, `${JSON.stringify(event)}\n`);
  }

  /**
   * The attempts of one unit of work of `process` (a lane: one transaction at a time): `attempt()` at
   * the start of each `tm.do` callback call, `settle(result)` once `tm.do` (or the pattern around it)
   * returned. Every attempt but the last rolled back (tm.do retries only what certainly did); the last
   * committed when the result is ok, is of unknown outcome for `CommitOutcomeUnknown`, else rolled back.
   * `committed` overrides "ok" where an ok result does not mean the callback's attempt committed (an
   * idempotency key replayed: a later attempt found the key done and never called the callback).
   */
  unit(process) {
    const attempts = [];
    return {
      attempt: () => {
        const id = `${this.#prefix}.${this.#next++}`;
        this.#line(['b', id, process]);
        attempts.push(id);
        return {
          read: (key, value) => this.#line(['r', id, key, value ?? null]),
          /** Call before the statement that writes `value` is sent. */
          write: (key, value) => this.#line(['w', id, key, value]),
        };
      },
      settle: (result, committed = result.isOk()) => {
        const last = attempts.length - 1;
        for (let i = 0; i < last; i++) this.#line(['e', attempts[i], 'abort']);
        if (last < 0) return;
        const outcome = committed
          ? 'commit'
          : result.error?.kind === 'CommitOutcomeUnknown'
            ? 'unknown'
            : 'abort';
        this.#line(['e', attempts[last], outcome]);
      },
    };
  }

  close() {
    closeSync(this.#fd);
  }
}

/**
 * Reads every journal of `dir` into a read-write-register history (RegisterRecorder). Attempts are
 * replayed file by file, so the recorder's clock orders each process's transactions as they ran
 * (what `processOrder` needs), not different processes' against each other (no real-time order).
 */
export function readHistory(dir) {
  const recorder = new RegisterRecorder();
  for (const file of readdirSync(dir).sort()) {
    const open = new Map();
    const text = readFileSync(join(dir, file), 'utf8');
    for (const line of text.split('\n')) {
      if (line === '') continue;
      let event;
      try {
        event = JSON.parse(line);
      } catch {
        continue; // a line cut by a SIGKILL in the middle of writeSync: the last of its file
      }
      const [kind, id] = event;
      if (kind === 'b') open.set(id, recorder.begin(event[2]));
      else {
        const t = open.get(id);
        if (!t) throw new Error(`${file}: ${kind} of a transaction ${id} that never began`);
        if (kind === 'r') t.read(event[2], event[3]);
        else if (kind === 'w') t.write(event[2], event[3]);
        else if (kind === 'e') {
          t.end(event[2]);
          open.delete(id);
        }
      }
    }
  }
  return recorder.history();
}
