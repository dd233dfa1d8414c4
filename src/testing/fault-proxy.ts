import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { z } from 'zod/v4';
import { InvalidOptions } from '../errors/index.js';

const targetSchema = z.union([
  z.string().min(1),
  z.object({ host: z.string().min(1), port: z.number().int().min(1).max(65535) }).strict(),
]);

const faultProxyOptionsSchema = z
  .object({
    /** Where to forward: a connection string (`postgres://…`) or a host and port. */
    target: targetSchema,
    /** Port to listen on (127.0.0.1); 0 (default) picks a free one. */
    listenPort: z.number().int().min(0).max(65535).default(0),
  })
  .strict();

/** Options of {@link FaultProxy.start}. */
export type FaultProxyOptions = z.input<typeof faultProxyOptionsSchema>;

interface Direction {
  readonly to: Socket;
  readonly queue: { readonly chunk: Buffer; readonly at: number }[];
  ended: boolean;
  timer: NodeJS.Timeout | undefined;
}

interface Link {
  readonly client: Socket;
  readonly upstream: Socket;
  readonly up: Direction;
  readonly down: Direction;
}

function parseTarget(target: FaultProxyOptions['target']): { host: string; port: number; url?: URL } {
  if (typeof target !== 'string') return { host: target.host, port: target.port };
  let url: URL;
  try {
    url = new URL(target);
  } catch (error) {
    throw new InvalidOptions([{ path: ['target'], message: 'not a valid connection string' }], error);
  }
  const host = url.hostname.replace(/^\[|\]$/g, '') || 'localhost';
  return { host, port: url.port ? Number(url.port) : 5432, url };
}

/**
 * A TCP proxy in front of PostgreSQL that misbehaves on demand, the way a serverless provider's
 * proxy or a suspended compute does: cut every connection (`dropAll`), black-hole traffic (`stall`
 * / `resume`), slow it down (`latency`). Point a pool at `proxy.url` instead of the server's URL.
 *
 * @example
 * const proxy = await FaultProxy.start({ target: url });
 * const pool = new pg.Pool({ connectionString: proxy.url });
 * const client = await pool.connect();
 * await client.query('BEGIN');
 * await client.query('UPDATE acct SET n = 0 WHERE id = 1');
 * proxy.dropAll(); // the next query fails with ECONNRESET; the server rolls the transaction back
 * await proxy.close();
 */
export class FaultProxy {
  /** The target's connection string with host and port replaced by the proxy's. */
  readonly url: string;
  /** The port the proxy listens on (127.0.0.1). */
  readonly port: number;
  readonly #server: Server;
  readonly #links = new Set<Link>();
  #target: { host: string; port: number };
  #stalled = false;
  #latencyMs = 0;
  #closed = false;

  private constructor(server: Server, port: number, url: string, target: { host: string; port: number }) {
    this.#server = server;
    this.#target = target;
    this.port = port;
    this.url = url;
  }

  /**
   * Starts listening on 127.0.0.1. Throws `InvalidOptions` on bad options.
   *
   * @example
   * const proxy = await FaultProxy.start({ target: { host: '127.0.0.1', port: 5432 }, listenPort: 0 });
   */
  static async start(options: FaultProxyOptions): Promise<FaultProxy> {
    const parsed = faultProxyOptionsSchema.safeParse(options);
    if (!parsed.success) {
      throw new InvalidOptions(
        parsed.error.issues.map((i) => ({ path: i.path, message: i.message, code: i.code })),
        parsed.error,
      );
    }
    const target = parseTarget(parsed.data.target);
    let proxy: FaultProxy | undefined;
    const server = createServer((client) => {
      if (proxy) proxy.#accept(client, proxy.#target);
      else client.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(parsed.data.listenPort, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : parsed.data.listenPort;
    let url: string;
    if (target.url) {
      const rewritten = new URL(target.url.toString());
      rewritten.hostname = '127.0.0.1';
      rewritten.port = String(port);
      url = rewritten.toString();
    } else {
      url = `postgres://127.0.0.1:${port}/`;
    }
    proxy = new FaultProxy(server, port, url, { host: target.host, port: target.port });
    return proxy;
  }

  /** Number of client connections currently open through the proxy. */
  get connections(): number {
    return this.#links.size;
  }

  /** Is traffic stalled? */
  get stalled(): boolean {
    return this.#stalled;
  }

  /**
   * Resets every open connection on both sides (TCP RST): clients see `ECONNRESET`, the server sees
   * its clients vanish and rolls their transactions back. New connections are still accepted.
   * Returns how many connections were dropped.
   *
   * @example
   * proxy.dropAll();
   */
  dropAll(): number {
    const links = [...this.#links];
    for (const link of links) this.#reset(link);
    return links.length;
  }

  /**
   * Stops forwarding bytes in both directions without closing anything (a black hole: queries hang,
   * no error). Bytes are held until {@link FaultProxy.resume}; `dropAll()` discards them.
   *
   * @example
   * proxy.stall();
   * const pending = pool.query('SELECT 1'); // hangs
   * proxy.resume(); // now it completes
   */
  stall(): void {
    this.#stalled = true;
  }

  /** Forwards again, flushing in order what was held during the stall. */
  resume(): void {
    this.#stalled = false;
    for (const link of this.#links) {
      this.#pump(link.up);
      this.#pump(link.down);
    }
  }

  /**
   * Delays every chunk by `ms` in each direction (a round trip gets `2 * ms` slower), keeping byte
   * order. `latency(0)` turns it off.
   *
   * @example
   * proxy.latency(50);
   */
  latency(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`latency must be >= 0 ms, got ${ms}`);
    this.#latencyMs = ms;
    for (const link of this.#links) {
      this.#pump(link.up);
      this.#pump(link.down);
    }
  }

  /**
   * Sends NEW connections to another server from now on (what a DNS name or a virtual IP does when
   * a failover moves it to a promoted standby); connections already open stay on the old one until
   * they end or {@link FaultProxy.dropAll} cuts them. {@link FaultProxy.url} does not change: user,
   * password and database must be valid on the new target too. Throws `InvalidOptions` on a bad target.
   *
   * @example
   * proxy.retarget(standby.url); // the new primary after `await standby.promote()`
   * proxy.dropAll(); // and the old connections are gone, as after a real failover
   */
  retarget(target: FaultProxyOptions['target']): void {
    const parsed = targetSchema.safeParse(target);
    if (!parsed.success) {
      throw new InvalidOptions(
        parsed.error.issues.map((i) => ({ path: ['target', ...i.path], message: i.message, code: i.code })),
        parsed.error,
      );
    }
    const { host, port } = parseTarget(parsed.data);
    this.#target = { host, port };
  }

  /** Stops listening and resets every connection. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.dropAll();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(client: Socket, target: { host: string; port: number }): void {
    if (this.#closed) {
      client.destroy();
      return;
    }
    client.setNoDelay(true);
    const upstream = tcpConnect({ host: target.host, port: target.port });
    upstream.setNoDelay(true);
    const link: Link = {
      client,
      upstream,
      up: { to: upstream, queue: [], ended: false, timer: undefined },
      down: { to: client, queue: [], ended: false, timer: undefined },
    };
    this.#links.add(link);
    const wire = (from: Socket, direction: Direction, other: Socket): void => {
      from.on('data', (chunk: Buffer) => {
        direction.queue.push({ chunk, at: Date.now() });
        this.#pump(direction);
      });
      from.on('end', () => {
        direction.ended = true;
        this.#pump(direction);
      });
      // An error on one side (a reset, a refused connection) resets the other side too.
      from.on('error', () => this.#reset(link));
      from.on('close', () => {
        if (other.destroyed) this.#forget(link);
      });
    };
    wire(client, link.up, upstream);
    wire(upstream, link.down, client);
  }

  #pump(direction: Direction): void {
    if (direction.timer !== undefined) return;
    for (;;) {
      if (this.#stalled || direction.to.destroyed) return;
      const head = direction.queue[0];
      if (!head) {
        if (direction.ended && !direction.to.writableEnded) direction.to.end();
        return;
      }
      const wait = head.at + this.#latencyMs - Date.now();
      if (wait > 0) {
        direction.timer = setTimeout(() => {
          direction.timer = undefined;
          this.#pump(direction);
        }, wait);
        return;
      }
      direction.queue.shift();
      direction.to.write(head.chunk);
    }
  }

  #reset(link: Link): void {
    for (const direction of [link.up, link.down]) {
      if (direction.timer !== undefined) clearTimeout(direction.timer);
      direction.timer = undefined;
      direction.queue.length = 0;
    }
    for (const socket of [link.client, link.upstream]) {
      if (socket.destroyed) continue;
      // resetAndDestroy sends a TCP RST (the peer sees ECONNRESET); it needs a connected socket.
      if (socket.connecting || socket.pending) socket.destroy();
      else socket.resetAndDestroy();
    }
    this.#forget(link);
  }

  #forget(link: Link): void {
    this.#links.delete(link);
  }
}
