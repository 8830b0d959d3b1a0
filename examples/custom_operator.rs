//! An operator defined outside the workspace, used in a `Graph` and compiled like any other.
//!
//! `SwiGlu` is the fused gate of a LLaMA feed-forward block, `y[t, f] = silu(gate[t, f]) ·
//! up[t, f]`. Nothing in the library knows it: it implements `AbstractOperator` (its kind,
//! kernel class, shardable indices, join-agg specs, FLOPs and CPU kernel), and
//! `Graph::op` adds it between the matmuls `x·w_gate`, `x·w_up` and `·w_down`. The example
//! checks every spec it offers on 4 devices against its whole kernel, compiles the block for
//! 4 CPU devices with the DP, runs it on random inputs and checks the outputs against the
//! single-device reference. The CPU backend runs any operator through its CPU kernel.
//!
//! The CUDA backend finds kernels by operator type in a `KernelRegistry`: without an entry
//! for SwiGlu, compiling the block for it is refused at once, naming the operator. SwiGlu
//! brings its own: a few lines of CUDA C ([`SWIGLU_CU`], compiled by NVRTC with the backend's
//! prelude) and a `CudaKernel` impl that lowers each block to a launch of it, with a host
//! mirror of what it computes. With that registered, the example lowers the 4-device plan
//! for the GPU, checks that its stream plan launches the kernel once per SwiGlu block, and
//! runs the plan on the host emulator (the GPUs' memory laid out byte for byte), whose
//! outputs must match the CPU reference; with a GPU it also runs the block there.
//!
//! `cargo run --release --example custom_operator`

use std::sync::Arc;

use einsum_compile::ComputationKernels;
use einsum_core::taskgraph::Task;
use einsum_core::{BackendError, KernelLibrary};
use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc, scaled_error};
use einsum_cuda::KernelRegistry;
use einsum_cuda::emulate::{self, EmulatedMemory};
use einsum_cuda::kernels::codes::OpCode;
use einsum_cuda::kernels::registry::{Call, CudaKernel};
use einsum_cuda::kernels::sources::Module;
use einsum_cuda::lower::{KernelCtx, lower};
use einsum_cuda::work::{Arg, HostFn, Launch, Op, linear};
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

/// SwiGlu's CUDA kernel over `n` contiguous elements of one block of each operand. NVRTC
/// compiles it with the backend's prelude before it: `i64`, `ld`/`st` (element `i` of a
/// block in storage dtype `dt`, as f32) and the `GRID_STRIDE` loop.
const SWIGLU_CU: Module = Module {
    name: "swiglu",
    kernels: &["swiglu"],
    source: r#"
extern "C" __global__ void swiglu(const void* gate, const void* up, void* y, int dt, i64 n) {
    GRID_STRIDE(i, n) {
        float g = ld(gate, i, dt);
        st(y, i, dt, g / (1.0f + __expf(-g)) * ld(up, i, dt));
    }
}
"#,
};

impl CudaKernel for SwiGlu {
    /// One `swiglu` launch per block: the gate, up and output blocks are the same box.
    fn lower(&self, call: &Call<'_>, _: &mut KernelCtx<'_>) -> std::result::Result<Vec<Op>, String> {
        let y = call.y;
        if call.inputs.iter().any(|b| b != y) {
            return Err(format!("the gate and up blocks {:?} differ from the output block {y}", call.inputs));
        }
        let (gate, up, out, dtype, n) = (call.ins[0], call.ins[1], call.outs[0], call.dtype, y.volume());
        let args = vec![Arg::Ptr(gate), Arg::Ptr(up), Arg::Ptr(out), Arg::I32(dtype.code()), Arg::I64(n as i64)];
        // What the kernel computes, for the emulator: f32 arithmetic, one rounding at the store.
        let host: HostFn = Arc::new(move |m: &mut EmulatedMemory| {
            for i in 0..n {
                let g = m.ld(gate, i, dtype);
                let v = g / (1.0 + (-g).exp()) * m.ld(up, i, dtype);
                m.st(out, i, dtype, v);
            }
        });
        // SAFETY: `swiglu(gate, up, y, dt, n)` takes three pointers, an int and a long long,
        // as `args` gives them, and its grid-stride loop touches the n elements of each block.
        let launch = unsafe { Launch::new(SWIGLU_CU, "swiglu", args, linear(n), host) }?;
        Ok(vec![Op::Launch(launch)])
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

    // The CUDA backend's library has no kernel for SwiGlu: compiling for it is refused before
    // any planning or CUDA call, naming the operator (with or without a GPU).
    let cuda = CompileOptions::default().devices(4).backend(Arc::new(CudaBackend::new(CudaOptions::default())));
    match compile(&g, &cuda) {
        Err(DriverError::Backend(BackendError::Unsupported { backend, operator, kind })) => {
            println!("on the {backend} backend without its kernel: refused, no kernel for `{operator}` ({kind})");
            assert_eq!((backend.as_str(), operator.as_str(), kind.as_str()), ("cuda", "swiglu #3", KIND));
        }
        Err(other) => panic!("expected the CUDA backend to refuse swiglu, got: {other}"),
        Ok(_) => panic!("the CUDA backend compiled an operator it has no kernel for"),
    }

    // With SwiGlu's kernel registered, the 4-device plan lowers for the GPU: its stream plan
    // launches the user's kernel once per SwiGlu block, and on the host emulator it computes
    // what the CPU reference computes.
    let registry = KernelRegistry::default().with::<SwiGlu>();
    let compiled = exe.compiled();
    let kernels = ComputationKernels(g.computation(), &compiled.kernels);
    let lowered = lower(&compiled.graph, &kernels, &registry).map_err(|e| e.into_backend_error(&compiled.graph))?;
    let is_swiglu = |task: &Task| match task {
        Task::Kernel { kernel, .. } => kernels.info(*kernel).is_some_and(|info| info.operator.kind == KIND),
        _ => false,
    };
    let blocks = compiled.graph.nodes().iter().filter(|n| is_swiglu(&n.task)).count();
    let launches = lowered.ops.iter().flatten().filter(|op| matches!(op, Op::Launch(l) if l.entry() == "swiglu"));
    println!("lowered for CUDA: {} swiglu launches for {blocks} swiglu tasks", launches.clone().count());
    assert!(blocks > 0 && launches.count() == blocks, "the stream plan does not launch the registered kernel");
    assert_eq!(lowered.modules, [SWIGLU_CU]);
    let values = exe.loaded_inputs();
    let ordered: Vec<HostTensor> = g.computation().inputs().iter().map(|t| values[t].clone()).collect();
    for gpus in [1, 2] {
        let outputs = emulate::run(&compiled.graph, &lowered, gpus, &ordered);
        let saved = g.computation().saved();
        let error =
            saved.iter().zip(&outputs).map(|(t, out)| scaled_error(out, &reference[t], 1.0)).fold(0.0, f32::max);
        println!("  on the host emulator, {gpus} GPU(s): max error against the reference {error:.3e}");
        assert!(error <= 1e-5, "the emulated CUDA plan computes a different result: error {error}");
    }

    // On a machine with a GPU the block runs there; without one, compiling says so.
    let options = CudaOptions { kernels: registry, ..CudaOptions::default() };
    let cuda = CompileOptions::default().devices(4).backend(Arc::new(CudaBackend::new(options)));
    match compile(&g, &cuda) {
        Ok(mut gpu) => {
            gpu.load_random(1)?;
            gpu.execute()?;
            let error = reference.iter().map(|(t, r)| scaled_error(&gpu.outputs()[t], r, 1.0)).fold(0.0f32, f32::max);
            println!("  on the GPU: max error against the reference {error:.3e}");
            assert!(error <= 1e-5, "the CUDA run computes a different result: error {error}");
        }
        Err(DriverError::Backend(BackendError::Unavailable(why))) => println!("  no GPU run: {why}"),
        Err(other) => return Err(other),
    }
    Ok(())
}

/// `cargo test` runs the example once (it is built with the test harness, `test = true`).
#[test]
fn the_custom_operator_compiles_and_runs_correctly() {
    main().unwrap();
}

/// The kernel's CUDA C compiles with NVRTC (CI runs it with NVRTC on the library path).
#[test]
#[ignore = "needs the NVRTC library"]
fn the_swiglu_source_compiles_with_nvrtc() {
    assert!(einsum_cuda::availability::nvrtc_present(), "NVRTC is not on the library path");
    einsum_cuda::kernels::compile::compile(&SWIGLU_CU, &[], None).unwrap();
}
