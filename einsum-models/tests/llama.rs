//! The LLaMA-family graph against the fixture checkpoints: every checkpoint tensor is a
//! weight of the graph and loads into it, and a config that disagrees with its checkpoint is
//! an error naming the tensor.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use einsum_core::{DType, HostTensor};
use einsum_models::checkpoint::{Checkpoint, CheckpointError};
use einsum_models::llama::{self, ModelError};
use einsum_models::{Architecture, ModelConfig};

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(family)
}

fn config(family: &str) -> ModelConfig {
    ModelConfig::from_file(fixture(family).join("config.json")).unwrap()
}

/// Loads `model` from `checkpoint` into a map by weight name.
fn load(model: &llama::Model, checkpoint: &Checkpoint) -> Result<HashMap<String, HostTensor>, CheckpointError> {
    let names: HashMap<_, _> = model.weights.iter().map(|w| (w.input.id(), w.name.clone())).collect();
    let mut loaded = HashMap::new();
    model.load_weights(checkpoint, |input, value| -> Result<(), CheckpointError> {
        loaded.insert(names[&input.id()].clone(), value);
        Ok(())
    })?;
    Ok(loaded)
}

#[test]
fn every_checkpoint_tensor_is_a_weight_and_loads_in_its_input_type() {
    for family in ["llama3", "llama2", "mistral", "qwen2"] {
        let config = config(family);
        let model = llama::build(&config, 5, DType::BF16).unwrap();
        let checkpoint = Checkpoint::open(fixture(family)).unwrap();
        let loaded = load(&model, &checkpoint).unwrap();
        let mut stored: Vec<&str> = checkpoint.names().collect();
        let mut weights: Vec<&str> = loaded.keys().map(String::as_str).collect();
        stored.sort_unstable();
        weights.sort_unstable();
        assert_eq!(weights, stored, "{family}: the graph's weights are the checkpoint's tensors");
        for w in &model.weights {
            let value = &loaded[&w.name];
            assert_eq!((value.ty().shape(), value.dtype()), (w.desc.shape(), DType::BF16), "{}", w.name);
        }
        assert_eq!(loaded.contains_key("lm_head.weight"), !config.tie_word_embeddings, "{family}");
        let biases = loaded.keys().any(|k| k.ends_with("q_proj.bias"));
        assert_eq!(biases, config.architecture == Architecture::Qwen2, "{family}");
    }
}

#[test]
fn a_config_that_disagrees_with_its_checkpoint_names_the_tensor() {
    let checkpoint = Checkpoint::open(fixture("llama2")).unwrap();
    let mut wide = config("llama2");
    wide.intermediate_size += 1;
    let model = llama::build(&wide, 4, DType::F32).unwrap();
    match load(&model, &checkpoint) {
        Err(CheckpointError::Shape { tensor, .. }) => assert_eq!(tensor, "model.layers.0.mlp.gate_proj.weight"),
        other => panic!("expected a shape error, got {other:?}"),
    }
    let mut deep = config("llama2");
    deep.num_hidden_layers += 1;
    let model = llama::build(&deep, 4, DType::F32).unwrap();
    let err = load(&model, &checkpoint).unwrap_err().to_string();
    assert!(err.contains("model.layers.2.input_layernorm.weight"), "{err}");
}

#[test]
fn prompts_the_model_cannot_take_are_refused() {
    assert!(matches!(llama::build(&config("llama3"), 0, DType::F32), Err(ModelError::Prompt(_))));
    let mut windowed = config("mistral");
    windowed.sliding_window = Some(einsum_models::config::SlidingWindow { size: 4, first_layer: 0 });
    let err = llama::build(&windowed, 5, DType::F32).unwrap_err().to_string();
    assert!(err.contains("sliding window of 4"), "{err}");
    assert!(llama::build(&windowed, 4, DType::F32).is_ok());
}

/// Every weight's parts read alone equal the same part of the whole tensor read, bit for bit,
/// in every target dtype, for parts at random positions (rows, columns, inner boxes, single
/// elements, empty); a part outside the tensor is an error naming it.
#[test]
fn a_part_of_a_weight_reads_as_that_part_of_the_whole() {
    let mut rng = einsum_core::SeededRng::new(17);
    for family in ["llama3", "llama2"] {
        let checkpoint = Checkpoint::open(fixture(family)).unwrap();
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let model = llama::build(&config(family), 5, dtype).unwrap();
            for w in &model.weights {
                let whole = checkpoint.read_as(&w.name, &w.desc).unwrap();
                for _ in 0..4 {
                    let (lo, hi): (Vec<usize>, Vec<usize>) = whole
                        .ty()
                        .shape()
                        .iter()
                        .map(|&n| {
                            let a = rng.below(n + 1);
                            let b = rng.below(n + 1);
                            (a.min(b), a.max(b))
                        })
                        .unzip();
                    let part = einsum_core::TensorType::new(&lo, &hi).unwrap();
                    let got = checkpoint.read_part(&w.name, &w.desc, &part).unwrap();
                    let want = whole.slice(&part).unwrap();
                    assert_eq!(got.ty(), want.ty(), "{family} {}", w.name);
                    assert!(got.to_ne_bytes() == want.to_ne_bytes(), "{family} {dtype} {} part {part}", w.name);
                }
            }
            let w = &model.weights[0];
            let shape = w.desc.shape();
            let outside =
                einsum_core::TensorType::new(&vec![0; shape.len()], &shape.iter().map(|n| n + 1).collect::<Vec<_>>())
                    .unwrap();
            let e = checkpoint.read_part(&w.name, &w.desc, &outside).unwrap_err();
            assert!(e.to_string().contains(&w.name), "{e}");
        }
    }
}
