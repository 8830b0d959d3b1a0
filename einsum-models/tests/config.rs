//! The model configuration: the hub's public configs parse to their known numbers, both
//! spellings of the rope agree, every failure is a typed error naming its key, and the rope
//! scalings give transformers' frequencies (expected values written out from transformers'
//! formulas in `modeling_rope_utils.py`, not from the code under test).

use std::f64::consts::PI;
use std::path::PathBuf;

use einsum_core::{DType, TensorDesc};
use einsum_models::config::{Activation, Biases, MAX_SIZE, SlidingWindow};
use einsum_models::{Architecture, ConfigError, Llama3Scaling, ModelConfig, RopeConfig, RopeScaling, YarnScaling};
use einsum_ops::Packing;
use einsum_ops::rope::{Rope, RopeFrequencies};
use serde_json::{Value, json};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name).join("config.json")
}

fn load(name: &str) -> ModelConfig {
    ModelConfig::from_file(data(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn parse(v: &Value) -> Result<ModelConfig, ConfigError> {
    ModelConfig::from_json_str(&v.to_string())
}

fn llama31_rope(original: usize) -> RopeScaling {
    RopeScaling::Llama3(Llama3Scaling {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: original,
    })
}

// ---- the public configs --------------------------------------------------------------

#[test]
fn llama_3_1_8b() {
    let c = load("Llama-3.1-8B");
    assert_eq!(c.architecture, Architecture::Llama);
    assert_eq!((c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim), (32, 32, 8, 128));
    assert_eq!((c.hidden_size, c.intermediate_size, c.vocab_size), (4096, 14336, 128256));
    assert_eq!(c.max_position_embeddings, 131072);
    assert_eq!(c.rms_norm_eps, 1e-5);
    assert_eq!(c.rope, RopeConfig { theta: 500000.0, scaling: llama31_rope(8192) });
    assert!(!c.tie_word_embeddings);
    assert_eq!(c.biases, Biases { qkv: false, o: false, mlp: false });
    assert_eq!(c.sliding_window, None);
    assert_eq!(c.dtype, Some(DType::BF16));
    assert_eq!((c.bos_token_ids.as_slice(), c.eos_token_ids.as_slice()), (&[128000][..], &[128001][..]));
    assert_eq!(c.hidden_act, Activation::Silu);
    assert_eq!(c.group_size(), 4);
}

#[test]
fn llama_3_1_70b() {
    let c = load("Llama-3.1-70B");
    assert_eq!(c.architecture, Architecture::Llama);
    assert_eq!((c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim), (80, 64, 8, 128));
    assert_eq!((c.hidden_size, c.intermediate_size, c.vocab_size), (8192, 28672, 128256));
    assert_eq!(c.max_position_embeddings, 131072);
    assert_eq!(c.rope, RopeConfig { theta: 500000.0, scaling: llama31_rope(8192) });
    assert!(!c.tie_word_embeddings);
    assert_eq!(c.biases, Biases { qkv: false, o: false, mlp: false });
}

#[test]
fn mistral_7b_v0_1() {
    let c = load("Mistral-7B-v0.1");
    assert_eq!(c.architecture, Architecture::Mistral);
    assert_eq!((c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim), (32, 32, 8, 128));
    assert_eq!((c.hidden_size, c.intermediate_size, c.vocab_size), (4096, 14336, 32000));
    assert_eq!(c.max_position_embeddings, 32768);
    assert_eq!(c.rope, RopeConfig { theta: 10000.0, scaling: RopeScaling::Default });
    assert_eq!(c.sliding_window, Some(SlidingWindow { size: 4096, first_layer: 0 }));
    assert_eq!(c.biases, Biases { qkv: false, o: false, mlp: false });
    assert_eq!((c.bos_token_ids.as_slice(), c.eos_token_ids.as_slice()), (&[1][..], &[2][..]));
}

#[test]
fn qwen2_7b() {
    let c = load("Qwen2-7B");
    assert_eq!(c.architecture, Architecture::Qwen2);
    assert_eq!((c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim), (28, 28, 4, 128));
    assert_eq!((c.hidden_size, c.intermediate_size, c.vocab_size), (3584, 18944, 152064));
    assert_eq!(c.rms_norm_eps, 1e-6);
    assert_eq!(c.rope, RopeConfig { theta: 1_000_000.0, scaling: RopeScaling::Default });
    // Qwen2's q/k/v projections always have a bias, its o_proj never.
    assert_eq!(c.biases, Biases { qkv: true, o: false, mlp: false });
    // `sliding_window` is set but `use_sliding_window` is false: no layer slides.
    assert_eq!(c.sliding_window, None);
    assert!(!c.tie_word_embeddings);
}

/// The tiny checkpoints' configs, written by transformers 5 (`rope_parameters`, `dtype`,
/// null token ids and windows).
#[test]
fn transformers_5_fixture_configs() {
    let fixture = |name: &str| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name).join("config.json");
        ModelConfig::from_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let llama3 = fixture("llama3");
    assert_eq!(llama3.rope, RopeConfig { theta: 500000.0, scaling: llama31_rope(16) });
    assert!(llama3.tie_word_embeddings);
    assert_eq!((llama3.head_dim, llama3.dtype), (16, Some(DType::F32)));
    let llama2 = fixture("llama2");
    assert_eq!(llama2.rope, RopeConfig { theta: 10000.0, scaling: RopeScaling::Default });
    let mistral = fixture("mistral");
    assert_eq!(mistral.rope.theta, 1_000_000.0);
    assert_eq!(mistral.sliding_window, None, "a null sliding_window disables it");
    let qwen2 = fixture("qwen2");
    assert_eq!(qwen2.biases, Biases { qkv: true, o: false, mlp: false });
    assert!(qwen2.bos_token_ids.is_empty() && qwen2.eos_token_ids.is_empty());
}

// ---- spellings and defaults ----------------------------------------------------------

fn hub_8b() -> Value {
    serde_json::from_str(&std::fs::read_to_string(data("Llama-3.1-8B")).unwrap()).unwrap()
}

#[test]
fn rope_parameters_and_rope_scaling_spell_the_same_config() {
    let hub = hub_8b();
    let mut v5 = hub.clone();
    let obj = v5.as_object_mut().unwrap();
    let mut rope = obj.remove("rope_scaling").unwrap();
    let theta = obj.remove("rope_theta").unwrap();
    rope.as_object_mut().unwrap().insert("rope_theta".into(), theta);
    obj.insert("rope_parameters".into(), rope);
    let dtype = obj.remove("torch_dtype").unwrap();
    obj.insert("dtype".into(), dtype);
    assert_eq!(parse(&v5).unwrap(), parse(&hub).unwrap());

    // The rope's own theta wins over the top-level one.
    let mut both = v5.clone();
    both["rope_theta"] = json!(10000.0);
    assert_eq!(parse(&both).unwrap().rope.theta, 500000.0);
}

#[test]
fn the_legacy_type_key_names_the_rope_type() {
    let base = json!({"architectures": ["LlamaForCausalLM"], "rope_theta": 10000.0});
    let with = |rope: Value| {
        let mut v = base.clone();
        v["rope_scaling"] = rope;
        parse(&v).unwrap().rope
    };
    let legacy = with(json!({"type": "linear", "factor": 2.0}));
    assert_eq!(legacy, RopeConfig { theta: 10000.0, scaling: RopeScaling::Linear { factor: 2.0 } });
    assert_eq!(with(json!({"rope_type": "linear", "factor": 2.0})), legacy);
    // Both present: `rope_type` wins, as in transformers' standardization.
    assert_eq!(
        with(json!({"rope_type": "dynamic", "type": "linear", "factor": 2.0})).scaling,
        RopeScaling::Dynamic { factor: 2.0 }
    );
    assert_eq!(with(Value::Null).scaling, RopeScaling::Default);
}

#[test]
fn absent_keys_take_transformers_defaults() {
    let llama = parse(&json!({"model_type": "llama"})).unwrap();
    assert_eq!((llama.vocab_size, llama.hidden_size, llama.intermediate_size), (32000, 4096, 11008));
    assert_eq!((llama.num_attention_heads, llama.num_key_value_heads, llama.head_dim), (32, 32, 128));
    assert_eq!((llama.max_position_embeddings, llama.rms_norm_eps), (2048, 1e-6));
    assert_eq!(llama.rope, RopeConfig { theta: 10000.0, scaling: RopeScaling::Default });
    assert_eq!((llama.bos_token_ids, llama.eos_token_ids), (vec![1], vec![2]));
    assert_eq!(llama.dtype, None);
    let mistral = parse(&json!({"architectures": ["MistralForCausalLM"]})).unwrap();
    assert_eq!((mistral.num_key_value_heads, mistral.intermediate_size), (8, 14336));
    assert_eq!(mistral.max_position_embeddings, 131072);
    assert_eq!(mistral.sliding_window, Some(SlidingWindow { size: 4096, first_layer: 0 }));
    let qwen = parse(&json!({"model_type": "qwen2", "use_sliding_window": true})).unwrap();
    assert_eq!((qwen.vocab_size, qwen.num_key_value_heads), (151936, 32));
    assert_eq!(qwen.sliding_window, Some(SlidingWindow { size: 4096, first_layer: 28 }));
    // A null key/value head count means as many as the query heads.
    let null_kv =
        parse(&json!({"model_type": "mistral", "num_attention_heads": 16, "num_key_value_heads": null})).unwrap();
    assert_eq!(null_kv.num_key_value_heads, 16);
    // head_dim may differ from hidden_size / heads (Llama 3.2-style explicit head_dim).
    let explicit = parse(&json!({"model_type": "llama", "hidden_size": 2048, "head_dim": 64})).unwrap();
    assert_eq!(explicit.head_dim, 64);
    let biased = parse(&json!({"model_type": "llama", "attention_bias": true, "mlp_bias": true})).unwrap();
    assert_eq!(biased.biases, Biases { qkv: true, o: true, mlp: true });
    let eos = parse(&json!({"model_type": "llama", "eos_token_id": [128001, 128008, 128009]})).unwrap();
    assert_eq!(eos.eos_token_ids, vec![128001, 128008, 128009]);
}

// ---- errors --------------------------------------------------------------------------

fn err(v: &Value) -> ConfigError {
    match parse(v) {
        Ok(c) => panic!("expected an error, parsed {c:?}"),
        Err(e) => e,
    }
}

#[test]
fn a_missing_key_is_named() {
    let e = err(&json!({"hidden_size": 64}));
    assert!(matches!(&e, ConfigError::MissingKey { key, .. } if key == "architectures"), "{e}");
    let mut v = hub_8b();
    v["rope_scaling"].as_object_mut().unwrap().remove("low_freq_factor");
    let e = err(&v);
    assert!(matches!(&e, ConfigError::MissingKey { key, .. } if key == "rope_scaling.low_freq_factor"), "{e}");
    assert!(e.to_string().contains("`rope_scaling.low_freq_factor`"), "{e}");
    let e = err(&json!({"model_type": "llama", "rope_scaling": {"rope_type": "linear"}}));
    assert!(matches!(&e, ConfigError::MissingKey { key, .. } if key == "rope_scaling.factor"), "{e}");
}

#[test]
fn an_unknown_architecture_lists_the_supported_ones() {
    let e = err(&json!({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}));
    assert!(
        matches!(&e, ConfigError::UnknownArchitecture { key, found, .. } if key == "architectures" && found == "GPT2LMHeadModel")
    );
    let msg = e.to_string();
    for name in ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"] {
        assert!(msg.contains(name), "{msg}");
    }
    let e = err(&json!({"model_type": "phi3"}));
    assert!(matches!(&e, ConfigError::UnknownArchitecture { key, .. } if key == "model_type"), "{e}");
    let e = err(&json!({"architectures": ["LlamaForCausalLM"], "model_type": "qwen2"}));
    assert!(matches!(&e, ConfigError::InvalidValue { key, .. } if key == "model_type"), "{e}");
}

#[test]
fn an_unsupported_rope_type_is_named_with_the_supported_ones() {
    let mut v = hub_8b();
    v["rope_scaling"] = json!({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]});
    let e = err(&v);
    assert!(
        matches!(&e, ConfigError::UnsupportedRopeType { key, found, .. } if key == "rope_scaling.rope_type" && found == "longrope"),
        "{e}"
    );
    let msg = e.to_string();
    for name in ["default", "linear", "dynamic", "yarn", "llama3"] {
        assert!(msg.contains(name), "{msg}");
    }
    v["rope_scaling"] = json!({"type": "su"});
    let e = err(&v);
    assert!(matches!(&e, ConfigError::UnsupportedRopeType { key, .. } if key == "rope_scaling.type"), "{e}");
}

#[test]
fn a_wrong_type_names_the_key_and_where() {
    let e = ModelConfig::from_json_str("{\n  \"model_type\": \"llama\",\n  \"num_attention_heads\": \"32\"\n}")
        .unwrap_err();
    assert!(matches!(&e, ConfigError::InvalidValue { key, .. } if key == "num_attention_heads"), "{e}");
    assert!(e.to_string().contains("line 3"), "{e}");
    let e = err(&json!({"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": "two"}}));
    assert!(matches!(&e, ConfigError::InvalidValue { key, .. } if key == "rope_scaling.factor"), "{e}");
    let e = err(&json!({"model_type": "llama", "rope_scaling": 8.0}));
    assert!(matches!(&e, ConfigError::InvalidValue { key, .. } if key == "rope_scaling"), "{e}");
    let e = err(&json!({"model_type": "llama", "hidden_act": "gelu"}));
    assert!(matches!(&e, ConfigError::UnsupportedActivation { found, .. } if found == "gelu"), "{e}");
    assert!(e.to_string().contains("hidden_act"), "{e}");
    let e = err(&json!({"model_type": "llama", "torch_dtype": "float8_e4m3fn"}));
    assert!(matches!(&e, ConfigError::InvalidValue { key, .. } if key == "torch_dtype"), "{e}");
    let e = err(&json!({"model_type": "llama", "eos_token_id": -1}));
    assert!(matches!(&e, ConfigError::InvalidValue { key, .. } if key == "eos_token_id"), "{e}");
}

#[test]
fn malformed_json_reports_line_and_column() {
    let e = ModelConfig::from_json_str("{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 40 96\n}").unwrap_err();
    assert!(matches!(e, ConfigError::Syntax { line: 3, .. }), "{e}");
    assert!(e.to_string().contains("line 3, column"), "{e}");
    let e = ModelConfig::from_json_str("{\"model_type\": \"llama\"} trailing").unwrap_err();
    assert!(matches!(e, ConfigError::Syntax { line: 1, .. }), "{e}");
    let e = ModelConfig::from_file(data("does-not-exist")).unwrap_err();
    assert!(matches!(&e, ConfigError::Io { file, .. } if file.contains("does-not-exist")), "{e}");
}

#[test]
fn impossible_shapes_are_errors_naming_the_key() {
    let cases = [
        (json!({"model_type": "llama", "num_attention_heads": 0}), "num_attention_heads"),
        (json!({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5}), "num_key_value_heads"),
        (json!({"model_type": "llama", "num_key_value_heads": 0}), "num_key_value_heads"),
        (json!({"model_type": "llama", "hidden_size": 16, "num_attention_heads": 32}), "num_attention_heads"),
        (json!({"model_type": "llama", "head_dim": 7}), "head_dim"),
        (json!({"model_type": "llama", "hidden_size": -4096}), "hidden_size"),
        (json!({"model_type": "llama", "vocab_size": MAX_SIZE + 1}), "vocab_size"),
        (json!({"model_type": "llama", "vocab_size": u64::MAX}), "vocab_size"),
        (json!({"model_type": "llama", "num_hidden_layers": 1e30}), "num_hidden_layers"),
        (json!({"model_type": "llama", "intermediate_size": 0}), "intermediate_size"),
        (json!({"model_type": "llama", "rms_norm_eps": -1.0}), "rms_norm_eps"),
        (json!({"model_type": "llama", "rope_theta": 0.0}), "rope_theta"),
        (json!({"model_type": "llama", "rope_theta": -1.0}), "rope_theta"),
        (json!({"model_type": "mistral", "sliding_window": 0}), "sliding_window"),
        (json!({"model_type": "llama", "partial_rotary_factor": 0.5}), "partial_rotary_factor"),
        (json!({"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 0.0}}), "rope_scaling.factor"),
        (
            json!({"model_type": "llama", "rope_parameters": {"rope_type": "dynamic", "factor": -2.0}}),
            "rope_parameters.factor",
        ),
        (
            json!({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}}),
            "rope_scaling.high_freq_factor",
        ),
        (
            json!({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 0}}),
            "rope_scaling.original_max_position_embeddings",
        ),
        // theta 1 makes YaRN's correction range undefined: its frequencies are not finite.
        (
            json!({"model_type": "llama", "rope_theta": 1.0, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}),
            "rope_scaling",
        ),
        (
            json!({"model_type": "qwen2", "rope_parameters": {"full_attention": {"rope_type": "default"}}}),
            "rope_parameters.full_attention",
        ),
    ];
    for (v, key) in cases {
        let e = err(&v);
        assert!(e.to_string().contains(&format!("`{key}`")), "{v}: {e}");
    }
    for text in ["", "null", "[]", "42", "\"llama\"", "{"] {
        assert!(ModelConfig::from_json_str(text).is_err(), "{text:?}");
    }
}

/// Every prefix of a real config, and every key of it replaced by hostile values, is parsed
/// without a panic; a truncated file is always an error.
#[test]
fn hostile_input_never_panics() {
    let text = std::fs::read_to_string(data("Llama-3.1-8B")).unwrap();
    let whole = text.trim_end().len();
    for cut in (0..whole).filter(|&i| text.is_char_boundary(i)) {
        assert!(ModelConfig::from_json_str(&text[..cut]).is_err(), "prefix of {cut} bytes parsed");
    }
    let hostile = [
        json!(null),
        json!(-1),
        json!(0),
        json!(1),
        json!(1e300),
        json!(-1e-300),
        json!(u64::MAX),
        json!("x"),
        json!([]),
        json!({}),
        json!(true),
    ];
    let hub = hub_8b();
    let mut paths: Vec<Vec<String>> = hub.as_object().unwrap().keys().map(|k| vec![k.clone()]).collect();
    paths.extend(hub["rope_scaling"].as_object().unwrap().keys().map(|k| vec!["rope_scaling".into(), k.clone()]));
    for path in &paths {
        for h in &hostile {
            let mut v = hub.clone();
            let mut slot = &mut v;
            for k in path {
                slot = &mut slot[k.as_str()];
            }
            *slot = h.clone();
            if let Err(e) = parse(&v) {
                assert!(e.to_string().contains('`'), "{path:?} = {h}: an error that names no key: {e}");
            }
        }
    }
}

// ---- rope frequencies ----------------------------------------------------------------

/// `theta^(-2i/d)`, as the operator has always computed it.
fn plain(theta: f64, d: usize) -> Vec<f64> {
    (0..d / 2).map(|i| theta.powf(-2.0 * i as f64 / d as f64)).collect()
}

fn close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= 1e-12 * y.abs(), "frequency {i}: {x} vs {y}");
    }
}

fn rope(theta: f64, scaling: RopeScaling) -> RopeConfig {
    RopeConfig { theta, scaling }
}

#[test]
fn default_frequencies_are_the_theta_formula_bit_for_bit() {
    for (theta, d) in [(10000.0, 16), (500000.0, 128), (1_000_000.0, 64)] {
        let f = rope(theta, RopeScaling::Default).frequencies(d, 4096, 100).unwrap();
        assert_eq!(f.inv_freq(), plain(theta, d).as_slice());
        assert_eq!(f.attention_factor(), 1.0);
        assert_eq!(f, RopeFrequencies::from_theta(theta, d).unwrap());
    }
}

#[test]
fn linear_divides_every_frequency() {
    let f = rope(10000.0, RopeScaling::Linear { factor: 4.0 }).frequencies(16, 64, 10).unwrap();
    let want: Vec<f64> = plain(10000.0, 16).iter().map(|w| w / 4.0).collect();
    close(f.inv_freq(), &want);
    assert_eq!(f.attention_factor(), 1.0);
}

#[test]
fn dynamic_rescales_the_base_only_beyond_the_context() {
    let r = rope(10000.0, RopeScaling::Dynamic { factor: 2.0 });
    // Up to max_position_embeddings (64): the unscaled frequencies.
    assert_eq!(r.frequencies(16, 64, 10).unwrap().inv_freq(), plain(10000.0, 16).as_slice());
    assert_eq!(r.frequencies(16, 64, 64).unwrap().inv_freq(), plain(10000.0, 16).as_slice());
    // 128 tokens: base = 10000 · (2·128/64 − 1)^(16/14) = 10000 · 3^(8/7).
    let base = 10000.0 * 3f64.powf(8.0 / 7.0);
    close(r.frequencies(16, 64, 128).unwrap().inv_freq(), &plain(base, 16));
    assert!(r.frequencies(2, 64, 128).is_err());
}

#[test]
fn yarn_ramps_between_extrapolation_and_interpolation() {
    let yarn = |truncate: bool, mscale: Option<(f64, f64)>| {
        RopeScaling::Yarn(YarnScaling {
            factor: 4.0,
            original_max_position_embeddings: 64,
            attention_factor: None,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: mscale.map(|m| m.0),
            mscale_all_dim: mscale.map(|m| m.1),
            truncate,
        })
    };
    let w = plain(10000.0, 16);
    // Correction dimensions d·ln(64/(2πr))/(2·ln 10000) for r = 32 and 1: −0.994 and 2.016,
    // truncated to 0 and 3. Dimension j is extrapolated (kept) with weight 1 − j/3, clamped.
    let correction = |r: f64| 16.0 * (64.0 / (r * 2.0 * PI)).ln() / (2.0 * 10000f64.ln());
    assert_eq!((correction(32.0).floor(), correction(1.0).ceil()), (-1.0, 3.0));
    let ramp = [0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    let want: Vec<f64> = w.iter().zip(ramp).map(|(w, r)| w / 4.0 * r + w * (1.0 - r)).collect();
    let f = rope(10000.0, yarn(true, None)).frequencies(16, 256, 10).unwrap();
    close(f.inv_freq(), &want);
    assert!((f.attention_factor() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
    // Untruncated: the ramp runs from 0 to 2.016.
    let high = correction(1.0);
    let want: Vec<f64> = w
        .iter()
        .enumerate()
        .map(|(j, w)| {
            let r = (j as f64 / high).clamp(0.0, 1.0);
            w / 4.0 * r + w * (1.0 - r)
        })
        .collect();
    close(rope(10000.0, yarn(false, None)).frequencies(16, 256, 10).unwrap().inv_freq(), &want);
    // DeepSeek's mscale: (0.1·1·ln 4 + 1) / (0.1·0.5·ln 4 + 1).
    let f = rope(10000.0, yarn(true, Some((1.0, 0.5)))).frequencies(16, 256, 10).unwrap();
    let want = (0.1 * 4f64.ln() + 1.0) / (0.05 * 4f64.ln() + 1.0);
    assert!((f.attention_factor() - want).abs() < 1e-15);
}

#[test]
fn yarn_reads_its_defaults_like_transformers() {
    let c = parse(&json!({"model_type": "qwen2", "max_position_embeddings": 131072,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}))
    .unwrap();
    let RopeScaling::Yarn(y) = &c.rope.scaling else { panic!("{:?}", c.rope) };
    assert_eq!((y.beta_fast, y.beta_slow, y.truncate, y.attention_factor), (32.0, 1.0, true, None));
    assert_eq!(y.original_max_position_embeddings, 32768);
    // No factor: the ratio of the contexts; `beta_fast: 0` reads as the default (Python's `or`).
    let c = parse(&json!({"model_type": "llama", "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "yarn", "original_max_position_embeddings": 2048, "beta_fast": 0,
        "attention_factor": 1.5}}))
    .unwrap();
    let RopeScaling::Yarn(y) = &c.rope.scaling else { panic!("{:?}", c.rope) };
    assert_eq!((y.factor, y.beta_fast, y.attention_factor()), (4.0, 32.0, 1.5));
    assert_eq!(c.rope_frequencies(10).unwrap().attention_factor(), 1.5);
}

#[test]
fn llama3_divides_low_frequencies_keeps_high_ones_and_smooths_between() {
    let l = Llama3Scaling {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 64,
    };
    let f = rope(10000.0, RopeScaling::Llama3(l)).frequencies(16, 512, 10).unwrap();
    let w = plain(10000.0, 16);
    // Wavelengths 2π·10000^(i/8): 6.3 (< 64/4: kept), 19.9 and 62.8 (between 16 and 64:
    // smoothed), then above 64 (divided by 8).
    assert_eq!(f.inv_freq()[0], w[0]);
    for (i, w) in w.iter().enumerate().skip(3) {
        assert!((f.inv_freq()[i] - w / 8.0).abs() <= 1e-15 * w, "{i}");
    }
    for i in [1, 2] {
        let smooth = (64.0 / (2.0 * PI / w[i]) - 1.0) / 3.0;
        let want = (1.0 - smooth) * w[i] / 8.0 + smooth * w[i];
        assert!((f.inv_freq()[i] - want).abs() <= 1e-15 * w[i], "{i}");
        assert!(f.inv_freq()[i] < w[i] && f.inv_freq()[i] > w[i] / 8.0, "{i}");
    }
    assert_eq!(f.attention_factor(), 1.0);
}

#[test]
fn llama_3_1_8b_frequencies_have_three_bands() {
    let c = load("Llama-3.1-8B");
    let f = c.rope_frequencies(4096).unwrap();
    let w = plain(500000.0, 128);
    let mut counts = [0; 3];
    for (i, (&s, &w)) in f.inv_freq().iter().zip(&w).enumerate() {
        let wavelen = 2.0 * PI / w;
        if wavelen < 8192.0 / 4.0 {
            assert_eq!(s, w, "{i}");
            counts[0] += 1;
        } else if wavelen > 8192.0 {
            assert!((s - w / 8.0).abs() <= 1e-15 * w, "{i}");
            counts[1] += 1;
        } else {
            assert!(s < w && s > w / 8.0, "{i}");
            counts[2] += 1;
        }
    }
    assert!(counts.iter().all(|&n| n > 0), "{counts:?}");
    // The operator takes them: 64 frequencies for a head of 128.
    let x = TensorDesc::of(&[("heads", 2), ("tokens", 5), ("d_head", 128)], DType::F32).unwrap();
    assert!(Rope::with_frequencies(&x, "tokens", "d_head", f, Packing::single(5)).is_ok());
}
