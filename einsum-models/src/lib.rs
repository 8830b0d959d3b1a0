//! Model families from Hugging Face directories: the model's `config.json` as transformers
//! and the hub write it ([`config`]), its rotary embedding with the scalings transformers
//! computes ([`rope_scaling`]), its weights from one or several safetensors files
//! ([`checkpoint`]), and the forward pass the config describes, as a graph whose weight inputs
//! are the checkpoint's tensors ([`llama`]), and the prefill and decode-step graphs of
//! generation with a KV cache ([`decode`]).
#![warn(missing_docs)]

pub mod checkpoint;
pub mod config;
pub mod decode;
pub mod llama;
pub mod rope_scaling;

pub use config::{Architecture, ConfigError, ModelConfig};
pub use rope_scaling::{Llama3Scaling, RopeConfig, RopeScaling, YarnScaling};
