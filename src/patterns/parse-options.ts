// The patterns validate their input with the shared helper of the error module.
export { invalid, parseOptions } from '../errors/parse-options.js';
