// The errors module's barrel for the library's own modules; src/index.ts picks the public names.
export {
  type ClassifyRules,
  classify,
  classifyOrRethrow,
  isConnectionError,
  looksLikeDatabaseError,
} from './classify.js';
export * from './errors.js';
export { invalid, parseOptions, toOptionIssues } from './parse-options.js';
export { SQLSTATE, type SqlStateEntry, sqlState } from './sqlstate.js';
