//! The model configuration (`config.json`).
