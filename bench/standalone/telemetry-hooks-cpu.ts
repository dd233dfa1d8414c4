// CPU per tm.do of the telemetry hooks alone (no database): API absent (telemetry off) and API present
// with no SDK registered, against an empty loop that reads the clock as often. 1e6 calls per round.
//
// Run: npx esbuild bench/standalone/telemetry-hooks-cpu.ts --bundle --platform=node --format=esm --packages=external \
//        --outfile=dist-bench/telemetry-hooks-cpu.mjs && node dist-bench/telemetry-hooks-cpu.mjs
import * as otel from '@opentelemetry/api';
import { TxTelemetry } from '../../src/observability/tx-telemetry.js';

const settings = { name: 'x', isolation: 'read committed', readOnly: false };
const end = { type: 'committed' } as const;
function run(t: TxTelemetry, n: number): number {
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    const at = performance.now();
    const call = t.start(settings);
    t.attempted(end);
    t.ended({ committed: true }, at);
    call?.end({ committed: true });
  }
  return ((performance.now() - start) / n) * 1e6;
}
const off = new TxTelemetry(undefined, { host: 'h', port: 5432, database: 'd' });
const noop = new TxTelemetry(otel, { host: 'h', port: 5432, database: 'd' });
const empty = () => {
  const s = performance.now();
  for (let i = 0; i < 1e6; i++) performance.now();
  return ((performance.now() - s) / 1e6) * 1e6;
};
for (let r = 0; r < 5; r++)
  console.log(
    `round ${r}: loop with performance.now() only ${empty().toFixed(0)} ns, hooks (API absent) ${run(off, 1e6).toFixed(0)} ns, hooks (API, no SDK) ${run(noop, 1e6).toFixed(0)} ns`,
  );
