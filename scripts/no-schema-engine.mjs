#!/usr/bin/env node
// Stands in for Prisma's schema engine when the test suite generates its Prisma client (see
// prisma-generate.mjs): the engine-less `prisma-client` generator does not run it.
process.stderr.write('pg-txkit: no Prisma schema engine here; only `prisma generate` is supported\n');
process.exit(1);
