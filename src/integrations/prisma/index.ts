// Public surface of 'pg-txkit/prisma' (re-exports only).
export { type PrismaAdapterOptions, prismaAdapter } from './prisma-adapter.js';
export type { PrismaPgOptions } from './prisma-pg-options.js';
