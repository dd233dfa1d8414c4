// The advisory module validates its input with the shared helper of the error module.
export { invalid, parseOptions } from '../errors/parse-options.js';
