//! RoPE and its scalings, computed as transformers computes them.
//!
//! A model's rope is a base `theta` and a [`RopeScaling`]: none (`default`), `linear`,
//! `dynamic` (NTK-aware, depending on the sequence length), `yarn` or `llama3` (LLaMA 3.1 and
//! 3.2). [`RopeConfig::frequencies`] turns it into the operator's
//! [`RopeFrequencies`]: the inverse frequencies and the attention factor that scales cos and
//! sin, following transformers' `modeling_rope_utils.py` (`_compute_default_rope_parameters`,
//! `_compute_linear_scaling_rope_parameters`, `_compute_dynamic_ntk_parameters`,
//! `_compute_yarn_parameters`, `_compute_llama3_parameters`), in f64 where transformers
//! computes in f32.
//!
//! The parameters are read from a config's `rope_scaling` (the hub's spelling, with
//! `rope_theta` at the top level, the type under `rope_type` or the older `type`) or
//! `rope_parameters` (transformers 5's spelling, `rope_theta` inside); see
//! [`crate::config`].

use std::f64::consts::PI;

use einsum_ops::rope::RopeFrequencies;

use crate::config::ConfigError;

/// The rope types this crate computes, as config files name them.
pub const SUPPORTED_ROPE_TYPES: [&str; 5] = ["default", "linear", "dynamic", "yarn", "llama3"];

/// transformers' base frequency when a config names none (`default_theta`).
pub const DEFAULT_THETA: f64 = 10_000.0;

/// A model's rotary position embedding: base frequency and scaling.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    /// The base frequency (`rope_theta`).
    pub theta: f64,
    /// How the frequencies are scaled.
    pub scaling: RopeScaling,
}

/// A rope scaling, with its parameters as transformers reads them (defaults applied).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// No scaling: `theta^(-2i/d)`.
    Default,
    /// Position interpolation: every frequency divided by `factor`.
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// NTK-aware scaling recomputed for sequences longer than `max_position_embeddings`: the
    /// base becomes `theta · (factor·s/max − (factor − 1))^(d/(d−2))` for a sequence of `s`
    /// tokens (unchanged up to `max_position_embeddings`).
    Dynamic {
        /// The scaling factor.
        factor: f64,
    },
    /// YaRN: interpolation for low frequencies, extrapolation for high ones, a linear ramp in
    /// between, and an attention factor.
    Yarn(YarnScaling),
    /// LLaMA 3.1's scaling: low frequencies divided by `factor`, high ones unchanged, a
    /// smooth interpolation in between.
    Llama3(Llama3Scaling),
}

/// YaRN's parameters (`rope_type: "yarn"`).
#[derive(Clone, Debug, PartialEq)]
pub struct YarnScaling {
    /// The context extension factor (from `factor`, or `max_position_embeddings /
    /// original_max_position_embeddings` when `factor` is null or absent).
    pub factor: f64,
    /// The pre-training context length (`original_max_position_embeddings`, else the
    /// model's `max_position_embeddings`).
    pub original_max_position_embeddings: usize,
    /// The factor scaling cos and sin, when the config gives it; else derived from
    /// `factor`, `mscale` and `mscale_all_dim`.
    pub attention_factor: Option<f64>,
    /// Rotations bounding the extrapolated band (`beta_fast`, default 32).
    pub beta_fast: f64,
    /// Rotations bounding the interpolated band (`beta_slow`, default 1).
    pub beta_slow: f64,
    /// DeepSeek's `mscale` (used with `mscale_all_dim`).
    pub mscale: Option<f64>,
    /// DeepSeek's `mscale_all_dim`.
    pub mscale_all_dim: Option<f64>,
    /// Whether the correction range is rounded to whole dimensions (`truncate`, default true).
    pub truncate: bool,
}

/// LLaMA 3.1's parameters (`rope_type: "llama3"`).
#[derive(Clone, Debug, PartialEq)]
pub struct Llama3Scaling {
    /// The divisor of the low frequencies (8 in LLaMA 3.1, 32 in 3.2).
    pub factor: f64,
    /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are divided.
    pub low_freq_factor: f64,
    /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
    pub high_freq_factor: f64,
    /// The pre-training context length (8192 in LLaMA 3.1).
    pub original_max_position_embeddings: usize,
}

impl RopeScaling {
    /// The rope type as config files name it.
    pub fn rope_type(&self) -> &'static str {
        match self {
            RopeScaling::Default => "default",
            RopeScaling::Linear { .. } => "linear",
            RopeScaling::Dynamic { .. } => "dynamic",
            RopeScaling::Yarn(_) => "yarn",
            RopeScaling::Llama3(_) => "llama3",
        }
    }
}

impl YarnScaling {
    /// The factor scaling cos and sin: the configured one, else `mscale(factor, mscale) /
    /// mscale(factor, mscale_all_dim)` when both are given and non-zero, else
    /// `mscale(factor, 1)`, where `mscale(s, m) = 0.1·m·ln(s) + 1` for `s > 1` and 1 otherwise.
    pub fn attention_factor(&self) -> f64 {
        let mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
        if let Some(a) = self.attention_factor {
            return a;
        }
        match (self.mscale, self.mscale_all_dim) {
            (Some(m), Some(all)) if m != 0.0 && all != 0.0 => mscale(self.factor, m) / mscale(self.factor, all),
            _ => mscale(self.factor, 1.0),
        }
    }
}

impl RopeConfig {
    /// The frequencies of a head of `head_dim` features for a model whose context is
    /// `max_position_embeddings`, rotating a sequence of `sequence_length` tokens (only the
    /// `dynamic` type depends on it: transformers recomputes its frequencies when the
    /// sequence exceeds `max_position_embeddings`, and uses the unscaled ones otherwise).
    ///
    /// Errors ([`ConfigError::InvalidValue`], naming `head_dim`): an odd or zero head
    /// dimension, a `dynamic` rope on a head of 2 (its exponent `d/(d−2)` is undefined), or
    /// parameters whose frequencies are not finite.
    pub fn frequencies(
        &self,
        head_dim: usize,
        max_position_embeddings: usize,
        sequence_length: usize,
    ) -> Result<RopeFrequencies, ConfigError> {
        let invalid =
            |reason: String| ConfigError::InvalidValue { file: "config.json".into(), key: "head_dim".into(), reason };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(invalid(format!("the rotated dimension must be even and positive, got {head_dim}")));
        }
        let d = head_dim as f64;
        let exponents = (0..head_dim / 2).map(|i| 2.0 * i as f64 / d);
        let (inv_freq, attention_factor): (Vec<f64>, f64) = match &self.scaling {
            RopeScaling::Default => {
                return RopeFrequencies::from_theta(self.theta, head_dim).map_err(|e| invalid(e.to_string()));
            }
            RopeScaling::Linear { factor } => (exponents.map(|e| self.theta.powf(-e) / factor).collect(), 1.0),
            RopeScaling::Dynamic { factor } => {
                if head_dim == 2 {
                    return Err(invalid("a dynamic rope needs a rotated dimension above 2".into()));
                }
                let max = max_position_embeddings as f64;
                let s = sequence_length.max(max_position_embeddings) as f64;
                let base = self.theta * (factor * s / max - (factor - 1.0)).powf(d / (d - 2.0));
                (exponents.map(|e| base.powf(-e)).collect(), 1.0)
            }
            RopeScaling::Yarn(yarn) => (yarn_inv_freq(self.theta, head_dim, yarn), yarn.attention_factor()),
            RopeScaling::Llama3(l) => (exponents.map(|e| llama3_inv_freq(self.theta.powf(-e), l)).collect(), 1.0),
        };
        RopeFrequencies::new(inv_freq, attention_factor).map_err(|e| invalid(e.to_string()))
    }
}

/// One LLaMA 3.1 frequency from the unscaled `w` (transformers' `_compute_llama3_parameters`).
fn llama3_inv_freq(w: f64, l: &Llama3Scaling) -> f64 {
    let old = l.original_max_position_embeddings as f64;
    let (low_wavelen, high_wavelen) = (old / l.low_freq_factor, old / l.high_freq_factor);
    let wavelen = 2.0 * PI / w;
    if wavelen < high_wavelen {
        w
    } else if wavelen > low_wavelen {
        w / l.factor
    } else {
        let smooth = (old / wavelen - l.low_freq_factor) / (l.high_freq_factor - l.low_freq_factor);
        (1.0 - smooth) * w / l.factor + smooth * w
    }
}

/// YaRN's frequencies (transformers' `_compute_yarn_parameters`): the extrapolated `1/p_i`
/// and interpolated `1/(factor·p_i)`, `p_i = theta^(2i/d)`, blended by a ramp between the
/// dimensions where a wavelength makes `beta_fast` and `beta_slow` rotations over the
/// original context.
fn yarn_inv_freq(theta: f64, head_dim: usize, y: &YarnScaling) -> Vec<f64> {
    let d = head_dim as f64;
    let original = y.original_max_position_embeddings as f64;
    let correction_dim = |rotations: f64| d * (original / (rotations * 2.0 * PI)).ln() / (2.0 * theta.ln());
    let (mut low, mut high) = (correction_dim(y.beta_fast), correction_dim(y.beta_slow));
    if y.truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
    if low == high {
        high += 0.001;
    }
    (0..head_dim / 2)
        .map(|i| {
            let pos_freq = theta.powf(2.0 * i as f64 / d);
            let (extrapolation, interpolation) = (1.0 / pos_freq, 1.0 / (y.factor * pos_freq));
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let extrapolation_factor = 1.0 - ramp;
            interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor
        })
        .collect()
}
