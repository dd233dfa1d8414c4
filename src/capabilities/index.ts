// Public surface of the capabilities module (re-exports only).
export {
  type Capabilities,
  type CapabilitiesTarget,
  capabilities,
} from './capabilities.js';
export type { Engine } from './engine-of.js';
export type { ExtensionStatus } from './extension-status.js';
