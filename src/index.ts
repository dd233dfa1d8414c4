// Public surface of 'pg-txkit' (re-exports only).
export * from './diagnostics/index.js';
export * from './errors/index.js';
export * from './patterns/advisory/index.js';
export * from './patterns/index.js';
export * from './patterns/queue/index.js';
export * from './tx/index.js';
