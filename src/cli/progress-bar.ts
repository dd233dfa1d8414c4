import type { OutputStream } from './cli-io.js';

/**
 * A tiny progress bar on stderr. On a terminal it redraws one line (`\r`); otherwise it prints plain
 * lines, at most one per 25 % step, so logs stay readable.
 *
 * @example
 * const bar = new ProgressBar(process.stderr, 'seat-booking');
 * bar.update(5, 10);
 * bar.done('ok');
 */
export class ProgressBar {
  readonly #stream: OutputStream;
  readonly #label: string;
  readonly #width: number;
  #lastQuarter = -1;
  #lastDraw = 0;
  #finished = false;

  constructor(stream: OutputStream, label: string, width = 24) {
    this.#stream = stream;
    this.#label = label;
    this.#width = width;
  }

  /** Reports progress: `done` out of `total` units. */
  update(done: number, total: number): void {
    if (this.#finished) return;
    const ratio = total > 0 ? Math.min(1, Math.max(0, done / total)) : 0;
    const percent = Math.floor(ratio * 100);
    if (this.#stream.isTTY) {
      const now = Date.now();
      if (now - this.#lastDraw < 50 && ratio < 1) return; // at most 20 redraws a second
      this.#lastDraw = now;
      const filled = Math.round(ratio * this.#width);
      const bar = `${'█'.repeat(filled)}${'░'.repeat(this.#width - filled)}`;
      this.#stream.write(`\r\x1b[2K${bar} ${String(percent).padStart(3)}% ${this.#label}`);
      return;
    }
    const quarter = Math.floor(percent / 25);
    if (quarter === this.#lastQuarter) return;
    this.#lastQuarter = quarter;
    this.#stream.write(`${this.#label}: ${percent}%\n`);
  }

  /** Ends the bar with a final word ('ok', 'failed' …). */
  done(word: string): void {
    if (this.#finished) return;
    this.#finished = true;
    if (this.#stream.isTTY) this.#stream.write(`\r\x1b[2K${this.#label}: ${word}\n`);
    else this.#stream.write(`${this.#label}: ${word}\n`);
  }
}
