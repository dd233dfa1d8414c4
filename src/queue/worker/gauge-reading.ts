import type { GaugeReading } from '../../observability/queue-telemetry.js';
import type { QueueUpkeep } from './worker-port.js';

/**
 * The queue's gauges for OpenTelemetry, from one `metrics()` statement; undefined when it failed
 * (the collection shows no point rather than a wrong 0).
 *
 * @example
 * const reading = await gaugeReading(queue);
 */
export async function gaugeReading(store: Pick<QueueUpkeep, 'metrics'>): Promise<GaugeReading | undefined> {
  const m = await store.metrics();
  if (m.isErr()) return undefined;
  const { pending, ready, running, expired, dead, oldestReadyMs, table } = m.value;
  return {
    counts: {
      pending: pending.count,
      ready: ready.count,
      running: running.count,
      expired: expired.count,
      dead: dead.count,
    },
    oldestReadyMs,
    deadTuples: table.deadTuples,
  };
}
