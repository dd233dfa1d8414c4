import { styleText } from 'node:util';
import type { CliIo, OutputStream } from './cli-io.js';

type Format = Parameters<typeof styleText>[0];

/** Text styling that is a no-op unless the stream is a terminal and NO_COLOR is not set. */
export interface Style {
  readonly enabled: boolean;
  (format: Format, text: string): string;
}

/**
 * Colors with node:util `styleText`, only when the stream we write to is a TTY, never when `NO_COLOR` is
 * set (any value, https://no-color.org); `FORCE_COLOR` (non-'0') forces them on. (styleText's own check
 * of process.stdout is turned off: stderr may be a terminal while stdout is piped.)
 *
 * @example
 * const s = createStyle(io.stdout, io.env);
 * io.stdout.write(s('red', 'blocked') + '\n');
 */
export function createStyle(stream: OutputStream, env: CliIo['env']): Style {
  const forced = env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '0';
  const enabled = env.NO_COLOR === undefined && (forced || stream.isTTY === true);
  const style = ((format: Format, text: string) =>
    enabled ? styleText(format, text, { validateStream: false }) : text) as Style;
  Object.defineProperty(style, 'enabled', { value: enabled });
  return style;
}
