// Interleaved rounds, the way every contender of a benchmark is measured: each round runs every
// contender once, in an order rotated by one each round, so machine noise (a neighbour's build, a
// checkpoint) hits all of them alike and none always runs first or last.

/**
 * Runs `measure(contender)` once per contender per round, rotating the order each round; returns each
 * contender's samples by name, oldest first. Stops early when `stopped()` says so.
 *
 * @example
 * const rates = await interleaved(contenders, 5, (c) => loops(roundMs, c.tx), () => signal.aborted);
 */
export async function interleaved<C extends { readonly name: string }>(
  contenders: readonly C[],
  rounds: number,
  measure: (contender: C) => Promise<number>,
  stopped: () => boolean = () => false,
): Promise<Map<string, number[]>> {
  const samples = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
  for (let round = 0; round < rounds && !stopped(); round++) {
    for (let k = 0; k < contenders.length && !stopped(); k++) {
      const contender = contenders[(k + round) % contenders.length];
      if (contender !== undefined) samples.get(contender.name)?.push(await measure(contender));
    }
  }
  return samples;
}

/**
 * The median sample (the lower of the two middle ones for an even count; 0 for none): robust against
 * a noisy neighbour stealing the CPU during one round.
 *
 * @example
 * median([3, 1, 2]); // → 2
 */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? (sorted[Math.floor((sorted.length - 1) / 2)] ?? 0) : 0;
}

/**
 * The range of the samples, rounded: `min–max`, or `?` for none.
 *
 * @example
 * range([3.2, 1.4, 2]); // → '1–3'
 */
export function range(values: readonly number[]): string {
  return values.length ? `${Math.round(Math.min(...values))}–${Math.round(Math.max(...values))}` : '?';
}

/**
 * Node CPU (user + system) per call of `call`, in µs, over `calls` sequential calls.
 *
 * @example
 * const us = await cpuPerCall(1000, () => tx(1));
 */
export async function cpuPerCall(calls: number, call: () => Promise<unknown>): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < calls; i++) await call();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / calls;
}
