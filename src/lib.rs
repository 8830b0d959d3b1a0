//! Einsummable driver (placeholder during bootstrap).
