//! The KV cache's hand-off from the prefill plan to the decode plan: the bytes it moves
//! equal an element-by-element count over the two compiled plans, nothing moves on one
//! device, and a generation reports the hand-off of its prefill.

use std::path::{Path, PathBuf};

use einsum_core::TensorType;
use einsum_models::ModelConfig;
use einsum_models::checkpoint::Checkpoint;
use einsum_models::decode::{build_decoder, build_prefill};
use einsummable::generate::handoff::handoff;
use einsummable::generate::{GenerateOptions, Generator, Sampling};
use einsummable::{CompileOptions, DType, Executable, compile};

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("einsum-models/tests/fixtures").join(family)
}

/// The (block, device) pairs of `exe`'s plan for operator output `tensor` (`read`: false)
/// or for every function spec reading the input `tensor` (`read`: true).
fn blocks(exe: &Executable, tensor: einsum_graph::Tensor, read: bool) -> Vec<(TensorType, u32)> {
    // The form planned (elementwise chains may be fused), where `tensor` is an input or a
    // saved output.
    let comp = exe.planned_computation();
    let id = exe.planned_tensor(tensor).unwrap();
    let mut out = Vec::new();
    let uses: Vec<(einsum_joinagg::OpId, usize)> = if read { comp.consumers(id) } else { vec![(id.op, id.output)] };
    for (op, k) in uses {
        let planned = exe.plan().ops.iter().find(|o| o.id == op).unwrap();
        for (f, device) in planned.spec.functions.iter().zip(&exe.compiled().placement[&op]) {
            let block = if read { &f.inputs[k] } else { &f.outputs[k] };
            out.push((block.clone(), device.0));
        }
    }
    out
}

fn holds(block: &TensorType, at: &[usize]) -> bool {
    at.iter().enumerate().all(|(d, &i)| block.dim(d).lo <= i && i < block.dim(d).hi)
}

/// The bytes the hand-off must move, counted element by element: every cache element of a
/// prompt row, for every decode device that reads it, unless a prefill block on that device
/// holds it.
fn counted(config: &ModelConfig, lengths: &[usize], max_tokens: usize, devices: usize) -> (f64, f64) {
    let options = CompileOptions::default().devices(devices);
    let prefill = build_prefill(config, lengths, max_tokens, DType::F32).unwrap();
    let decoder = build_decoder(config, lengths.len(), max_tokens, DType::F32).unwrap();
    let from = compile(&prefill.graph, &options).unwrap();
    let to = compile(&decoder.graph, &options).unwrap();
    let planned = handoff(&prefill, &from, &decoder, &to, &options.topology).unwrap();
    let mut bytes = 0.0;
    for (kv, cache) in prefill.kv.iter().zip(&decoder.caches) {
        for (out, input) in [(kv.k, cache.k), (kv.v, cache.v)] {
            let held = blocks(&from, out, false);
            let mut read = blocks(&to, input, true);
            read.sort_by_key(|(b, d)| (format!("{b}"), *d));
            read.dedup();
            let desc = from.computation().desc(out.id()).unwrap();
            let (heads, d_head) = (desc.dims[0].extent, desc.dims[2].extent);
            let mut start = 0;
            for (b, &len) in lengths.iter().enumerate() {
                for (h, r, e) in
                    (0..heads).flat_map(|h| (0..len).flat_map(move |r| (0..d_head).map(move |e| (h, r, e))))
                {
                    for (block, dst) in &read {
                        let on_dst = held.iter().any(|(p, d)| d == dst && holds(p, &[h, start + r, e]));
                        if holds(block, &[h, b, r, e]) && !on_dst {
                            bytes += 4.0;
                        }
                    }
                }
                start += len;
            }
        }
    }
    (bytes, planned.bytes)
}

#[test]
fn the_planned_bytes_are_the_elements_each_decode_device_reads_and_does_not_hold() {
    let config = ModelConfig::from_file(fixture("llama3").join("config.json")).unwrap();
    for devices in [1, 2, 4, 8] {
        for lengths in [vec![5], vec![3, 7]] {
            let (want, got) = counted(&config, &lengths, 16, devices);
            assert_eq!(got, want, "{devices} devices, prompts {lengths:?}");
            if devices == 1 {
                assert_eq!(got, 0.0, "one device holds everything");
            }
        }
    }
}

#[test]
fn a_generation_reports_its_prefills_handoff() {
    let config = ModelConfig::from_file(fixture("llama3").join("config.json")).unwrap();
    for devices in [1, 4] {
        let options = CompileOptions::default().devices(devices);
        let checkpoint = Checkpoint::open(fixture("llama3")).unwrap();
        let mut generator = Generator::new(config.clone(), checkpoint, 2, 16, DType::F32, options).unwrap();
        let greedy = GenerateOptions { max_new_tokens: 3, stop_tokens: Vec::new(), sampling: Sampling::greedy() };
        let generation = generator.generate(&[vec![1, 2, 3], vec![4, 5, 6, 7, 8, 9, 10]], &greedy).unwrap();
        let handoff = generation.handoff.expect("a prefill ran");
        let (want, _) = counted(&config, &[3, 7], 16, devices);
        assert_eq!(handoff.bytes, want, "{devices} devices");
        assert_eq!(handoff.predicted_ms > 0.0, handoff.bytes > 0.0, "{handoff:?}");
        assert_eq!(handoff.pairs == 0, handoff.bytes == 0.0, "{handoff:?}");
        let none = generator.generate(&[vec![1]], &GenerateOptions { max_new_tokens: 0, ..greedy }).unwrap();
        assert_eq!(none.handoff, None, "nothing generated, nothing moved");
    }
}
