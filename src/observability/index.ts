export type { Logger, LogLevel } from './logger.js';
