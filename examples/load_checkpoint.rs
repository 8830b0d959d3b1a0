//! How much host memory loading a Hugging Face checkpoint costs beyond the weights the
//! devices keep: builds the model of `DIR/config.json`, compiles it for CPU devices, loads
//! `DIR`'s safetensors weights tensor by tensor, and prints the process's peak resident
//! memory growth against the devices' resident bytes and the largest tensor.
//!
//! `cargo run --release --example load_checkpoint -- DIR [DEVICES] [DTYPE]`
//! (a checkpoint of the size the loader is measured on: `python3 scripts/make_hf_fixtures.py
//! --big DIR`; DEVICES defaults to 1, DTYPE to the checkpoint's f32)

use std::error::Error;

use einsum_core::host_memory::{reset_peak_resident_set, resident_set};
use einsum_models::ModelConfig;
use einsum_models::checkpoint::Checkpoint;
use einsum_models::llama;
use einsummable::{CompileOptions, DType, compile};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.first().ok_or("usage: load_checkpoint DIR [DEVICES] [DTYPE]")?;
    let devices: usize = args.get(1).map_or(Ok(1), |d| d.parse())?;
    let dtype: DType = args.get(2).map_or(Ok(DType::F32), |d| d.parse())?;
    let config = ModelConfig::from_file(std::path::Path::new(dir).join("config.json"))?;
    let model = llama::build(&config, 8, dtype)?;
    let mut exe = compile(&model.graph, &CompileOptions::default().devices(devices))?;
    let checkpoint = Checkpoint::open(dir)?;
    let resident: usize = model.weights.iter().map(|w| w.desc.size_bytes()).sum();
    let largest = model.weights.iter().map(|w| w.desc.size_bytes()).max().unwrap_or(0);

    // Reset the peak to the current resident set, then load.
    if !reset_peak_resident_set() {
        return Err("cannot reset the peak resident set (/proc/self/clear_refs)".into());
    }
    let (before, _) = resident_set().ok_or("cannot read the resident set (/proc/self/status)")?;
    let start = std::time::Instant::now();
    model.load_weights(&checkpoint, |input, value| -> Result<(), Box<dyn Error>> {
        Ok(exe.load_resident(input, value)?)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let (now, peak) = resident_set().ok_or("cannot read the resident set (/proc/self/status)")?;
    let (peak, after) = (peak.saturating_sub(before), now.saturating_sub(before));

    let mb = |b: f64| b / 1e6;
    let beyond = peak as f64 - resident as f64;
    let bound = largest as f64 + 256e6;
    println!("checkpoint {dir}: {} tensors, {devices} device(s), {dtype}", model.weights.len());
    println!(
        "| resident weights | largest tensor | peak growth | beyond resident | bound (largest + 256 MB) | after load | load time |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {:.0} MB | {:.0} MB | {:.0} MB | {:.0} MB | {:.0} MB | {:.0} MB | {seconds:.1} s |",
        mb(resident as f64),
        mb(largest as f64),
        mb(peak as f64),
        mb(beyond),
        mb(bound),
        mb(after as f64)
    );
    if beyond > bound {
        return Err(format!("loading took {:.0} MB beyond the resident weights, over the bound", mb(beyond)).into());
    }
    Ok(())
}
