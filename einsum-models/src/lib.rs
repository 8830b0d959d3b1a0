//! Model families from Hugging Face directories: the model's `config.json` as transformers
//! and the hub write it ([`config`]), its rotary embedding with the scalings transformers
//! computes ([`rope_scaling`]), and its weights from one or several safetensors files
//! ([`checkpoint`]).
#![warn(missing_docs)]

pub mod checkpoint;
pub mod config;
pub mod rope_scaling;

pub use config::{Architecture, ConfigError, ModelConfig};
pub use rope_scaling::{Llama3Scaling, RopeConfig, RopeScaling, YarnScaling};
