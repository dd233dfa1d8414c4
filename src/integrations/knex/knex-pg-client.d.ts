// knex ships no types for its dialect classes; pg-txkit extends the PostgreSQL one (present in every knex 3).
declare module 'knex/lib/dialects/postgres/index.js' {
  import type { Knex } from 'knex';

  const Client_PG: typeof Knex.Client;
  export default Client_PG;
}
