//! Cross-module tests of the host API (modes, idempotence, confinement).
