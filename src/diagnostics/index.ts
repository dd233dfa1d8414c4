// Public surface of this module (re-exports only).
export {};
