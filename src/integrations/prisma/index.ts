// Public surface of 'pg-txkit/prisma' (re-exports only).
export { type PrismaAdapterOptions, type PrismaPgOptions, prismaAdapter } from './prisma-adapter.js';
