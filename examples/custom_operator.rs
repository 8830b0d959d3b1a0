//! An operator defined outside the workspace, used in a `Graph` and compiled like any other.
//!
//! `SwiGlu` is the fused gate of a LLaMA feed-forward block, `y[t, f] = silu(gate[t, f]) ·
//! up[t, f]`. Nothing in the library knows it: it implements `AbstractOperator` (its kind,
//! kernel class, shardable indices, join-agg specs, FLOPs and CPU kernel), and
//! `Graph::op` adds it between the matmuls `x·w_gate`, `x·w_up` and `·w_down`. The example
//! checks every spec it offers on 4 devices against its whole kernel, compiles the block for
//! 4 CPU devices with the DP, runs it on random inputs and checks the outputs against the
//! single-device reference. The CPU backend runs any operator through its CPU kernel; the
//! CUDA backend has kernels only for the library's operators (by type), so compiling the
//! block for it is refused at once, naming the operator, with or without a GPU.
//!
//! `cargo run --release --example custom_operator`

use std::sync::Arc;

use einsum_core::BackendError;
use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc, scaled_error};
use einsum_joinagg::{
    AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, decomposition_error,
    enumerate_specs, grid_spec,
};
use einsummable::{CompileOptions, CudaBackend, CudaOptions, DType, Error as DriverError, Graph, compile};

const KIND: &str = "swiglu";

/// `y[tokens, d_ff] = silu(gate[tokens, d_ff]) · up[tokens, d_ff]`, with `silu(g) = g ·
/// sigmoid(g)`. Every element is independent, so both indices shard anywhere.
#[derive(Clone, Debug)]
struct SwiGlu {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
}

impl SwiGlu {
    /// The gate of `gate` and `up`, which must both be `[tokens, d_ff]` of one dtype.
    fn new(gate: &TensorDesc, up: &TensorDesc) -> Result<SwiGlu> {
        let names: Vec<&str> = gate.dims.iter().map(|d| d.name.as_str()).collect();
        if names != ["tokens", "d_ff"] || gate != up {
            return Err(Error::Invalid {
                op: KIND.into(),
                reason: format!(
                    "gate [{}] and up [{}] must be the same [tokens, d_ff] tensor type",
                    gate.dims_string(),
                    up.dims_string()
                ),
            });
        }
        Ok(SwiGlu { inputs: vec![gate.clone(), up.clone()], outputs: vec![gate.clone()] })
    }
}

impl AbstractOperator for SwiGlu {
    fn kind(&self) -> &str {
        KIND
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Elementwise
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    fn shardable(&self) -> Vec<ShardableIndex> {
        self.outputs[0].dims.iter().map(|d| ShardableIndex::any(d.name.clone(), d.extent)).collect()
    }

    /// A grid over `tokens × d_ff`: every tensor's dimension `d` follows shardable index `d`.
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let dims: DimIndex = vec![vec![Some(0), Some(1)]; 3];
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// Per element: the exponential, the add and divide of the sigmoid, and two multiplies.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        5.0 * f.outputs[0].volume() as f64
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let y = &f.outputs[0];
        if inputs.len() != 2 || inputs.iter().zip(&f.inputs).any(|(t, ty)| t.ty() != ty || ty != y) {
            return Err(Error::Kernel {
                op: KIND.into(),
                reason: format!("expected two input blocks of type {y}, one per input of the function spec"),
            });
        }
        let (gate, up) = (inputs[0].to_f32(), inputs[1].to_f32());
        let data = gate.iter().zip(&up).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u).collect();
        Ok(vec![HostTensor::from_f32(y.clone(), self.outputs[0].dtype, data)?])
    }
}

/// x·w_gate and x·w_up, the fused gate, then ·w_down.
fn block_graph() -> einsummable::Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", 64), ("d_model", 32)], DType::F32)?;
    let w_gate = g.input("w_gate", &[("d_model", 32), ("d_ff", 96)], DType::F32)?;
    let w_up = g.input("w_up", &[("d_model", 32), ("d_ff", 96)], DType::F32)?;
    let w_down = g.input("w_down", &[("d_ff", 96), ("d_model", 32)], DType::F32)?;
    let gate = g.matmul(x, w_gate)?;
    let up = g.matmul(x, w_up)?;
    let swiglu = SwiGlu::new(g.desc(gate)?, g.desc(up)?)?;
    let hidden = g.op(Box::new(swiglu), &[gate, up])?[0];
    let y = g.matmul(hidden, w_down)?;
    g.save(y)?;
    Ok(g)
}

fn main() -> einsummable::Result<()> {
    // Every spec the operator offers on 4 devices computes what its whole kernel computes.
    let block = TensorDesc::of(&[("tokens", 64), ("d_ff", 96)], DType::F32)?;
    let op = SwiGlu::new(&block, &block)?;
    let specs = enumerate_specs(&op, 4)?;
    for (seed, choice) in specs.iter().enumerate() {
        let error = decomposition_error(&op, &choice.spec, seed as u64)?;
        println!("swiglu spec {:?} (tokens, d_ff) on 4 devices: error {error:.3e}", choice.counts);
        assert!(error <= 1e-5, "spec {:?} disagrees with the whole kernel: error {error}", choice.counts);
    }

    let g = block_graph()?;
    let mut exe = compile(&g, &CompileOptions::default().devices(4))?;
    exe.load_random(1)?;
    exe.execute()?;
    let reference = g.computation().evaluate(&exe.loaded_inputs())?;
    let error = reference.iter().map(|(t, r)| scaled_error(&exe.outputs()[t], r, 1.0)).fold(0.0f32, f32::max);
    println!("x·w_gate, x·w_up -> swiglu -> ·w_down on 4 CPU devices ({}):", exe.plan().optimizer);
    for planned in &exe.plan().ops {
        println!("  {:<12} splits {:?}", planned.name, planned.splits);
    }
    println!("  max error against the single-device reference: {error:.3e}");
    assert!(error <= 1e-5, "the compiled block computes a different result: error {error}");

    // The CUDA backend has no kernel for SwiGlu: compiling for it is refused before any
    // planning or CUDA call, naming the operator (with or without a GPU).
    let cuda = CompileOptions::default().devices(4).backend(Arc::new(CudaBackend::new(CudaOptions::default())));
    match compile(&g, &cuda) {
        Err(DriverError::Backend(BackendError::Unsupported { backend, operator, kind })) => {
            println!("on the {backend} backend: refused, no kernel for `{operator}` ({kind})");
            assert_eq!((backend.as_str(), operator.as_str(), kind.as_str()), ("cuda", "swiglu #3", KIND));
        }
        Err(other) => panic!("expected the CUDA backend to refuse swiglu, got: {other}"),
        Ok(_) => panic!("the CUDA backend compiled an operator it has no kernel for"),
    }
    Ok(())
}

/// `cargo test` runs the example once (it is built with the test harness, `test = true`).
#[test]
fn the_custom_operator_compiles_and_runs_correctly() {
    main().unwrap();
}
