// Public surface of observability (types only: the logger interface, the OpenTelemetry API's shape,
// the metrics snapshots).
export type { Logger, LogLevel } from './logger.js';
export type { OpenTelemetryApi, TelemetryOption } from './otel-api.js';
export type { TxMetrics } from './tx-telemetry.js';
