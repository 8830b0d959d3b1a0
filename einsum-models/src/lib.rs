//! Model families from Hugging Face directories: the model's `config.json` as transformers
//! and the hub write it ([`config`]), and its weights from one or several safetensors files
//! ([`checkpoint`]).
#![warn(missing_docs)]

pub mod checkpoint;
pub mod config;
