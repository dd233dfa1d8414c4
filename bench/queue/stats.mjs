// The summary every one-connection queue benchmark reports: the median of its rounds, with min–max.

/**
 * The median of `xs` (the upper one of an even count).
 *
 * @example
 * median([3, 1, 2]); // 2
 */
export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * `median (min–max)` of `xs`, with `digits` decimals.
 *
 * @example
 * span([3, 1, 2]); // '2.0 (1.0–3.0)'
 */
export const span = (xs, digits = 1) =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`;
