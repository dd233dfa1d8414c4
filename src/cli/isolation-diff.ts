type Edit = { readonly op: ' ' | '-' | '+'; readonly line: string };

/** The shortest edit script between two line lists (longest common subsequence). */
function edits(a: readonly string[], b: readonly string[]): Edit[] {
  const n = a.length;
  const m = b.length;
  const width = m + 1;
  const lcs = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i * width + j] =
        a[i] === b[j]
          ? (lcs[(i + 1) * width + j + 1] as number) + 1
          : Math.max(lcs[(i + 1) * width + j] as number, lcs[i * width + j + 1] as number);
    }
  }
  const out: Edit[] = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      out.push({ op: ' ', line: a[i] as string });
      i++;
      j++;
    } else if (
      j < m &&
      (i >= n || (lcs[i * width + j + 1] as number) > (lcs[(i + 1) * width + j] as number))
    ) {
      out.push({ op: '+', line: b[j] as string });
      j++;
    } else {
      out.push({ op: '-', line: a[i] as string });
      i++;
    }
  }
  return out;
}

/**
 * A unified diff (`diff -u` style, 3 lines of context) from `expected` to `actual`, or `''` when they
 * are equal.
 *
 * @example
 * unifiedDiff('a\nb\n', 'a\nc\n', 'expected.out', 'actual');
 * // '--- expected.out\n+++ actual\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n'
 */
export function unifiedDiff(expected: string, actual: string, fromLabel: string, toLabel: string): string {
  if (expected === actual) return '';
  const split = (text: string): string[] => {
    const lines = text.split('\n');
    if (lines[lines.length - 1] === '') lines.pop();
    return lines;
  };
  const script = edits(split(expected), split(actual));
  const context = 3;
  let out = `--- ${fromLabel}\n+++ ${toLabel}\n`;
  // 1-based line numbers in each file at each index of the script
  const posA: number[] = [];
  const posB: number[] = [];
  let lineA = 1;
  let lineB = 1;
  for (const e of script) {
    posA.push(lineA);
    posB.push(lineB);
    if (e.op !== '+') lineA++;
    if (e.op !== '-') lineB++;
  }
  const changes = script.flatMap((e, i) => (e.op === ' ' ? [] : [i]));
  // changes closer than 2 × context lines share a hunk
  const groups: number[][] = [];
  for (const i of changes) {
    const last = groups[groups.length - 1];
    if (last && i - (last[last.length - 1] as number) <= 2 * context) last.push(i);
    else groups.push([i]);
  }
  for (const group of groups) {
    const start = Math.max(0, (group[0] as number) - context);
    const end = Math.min(script.length, (group[group.length - 1] as number) + context + 1);
    const hunk = script.slice(start, end);
    const lenA = hunk.filter((e) => e.op !== '+').length;
    const lenB = hunk.filter((e) => e.op !== '-').length;
    const fromA = (posA[start] as number) - (lenA === 0 ? 1 : 0);
    const fromB = (posB[start] as number) - (lenB === 0 ? 1 : 0);
    out += `@@ -${fromA},${lenA} +${fromB},${lenB} @@\n`;
    for (const e of hunk) out += `${e.op}${e.line}\n`;
  }
  return out;
}
