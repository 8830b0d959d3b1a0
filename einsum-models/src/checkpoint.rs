//! The weights of a checkpoint (safetensors files).
