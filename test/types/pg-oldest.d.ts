// The `pg-oldest` devDependency is pg 8.11 under another name (tests of the oldest supported pg);
// its API is pg's, so it takes pg's types.
declare module 'pg-oldest' {
  import pg from 'pg';
  export default pg;
}
