//! The CUDA backend through the driver: `--backend cuda` fails cleanly without a GPU, and
//! with one a small LLaMA block at p = 1 and p = 8 (virtual devices sharing the GPUs)
//! matches the single-device CPU reference in f32, f16 and bf16, replayed and eager, with
//! and without kernel fusion.

use std::{process::Command, sync::Arc};

use einsum_core::taskgraph::TaskGraph;
use einsum_core::{KernelLibrary, scaled_error};
use einsummable::{
    BackendParams, CompileOptions, CudaBackend, CudaOptions, DType, Workload, backend_by_name, check::tolerance,
    compile,
};

/// (The tests that lower a compiled plan themselves compile it with rewrites off: they pair
/// its kernels with the graph as written.)
const SMALL_LLAMA: &str = "llama-block:tokens=64,seqs=2,d_model=64,heads_q=8,heads_kv=4,d_head=16,d_ff=96";

#[test]
fn run_with_the_cuda_backend_says_whether_a_driver_is_found() {
    let out = Command::new(env!("CARGO_BIN_EXE_einsummable"))
        .args(["run", "matmul:n=8", "--devices", "2", "--backend", "cuda", "--check"])
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if einsum_cuda::availability::check_cuda().is_err() {
        assert!(!out.status.success());
        assert!(stderr.contains("no CUDA driver found"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    } else {
        assert!(out.status.success(), "{stderr}");
    }
}

#[test]
fn compile_refuses_cuda_without_a_driver_and_unknown_backends() {
    let graph = Workload::parse("matmul:n=8").unwrap().build(DType::F32).unwrap();
    let options = CompileOptions {
        devices: 2,
        backend: Arc::new(CudaBackend::new(CudaOptions::default())),
        ..CompileOptions::default()
    };
    if einsum_cuda::availability::check_cuda().is_err() {
        let err = compile(&graph, &options).err().expect("no driver: an error").to_string();
        assert!(err.contains("no CUDA driver found"), "{err}");
    }
    // A backend is a value now: an unknown name fails where names become backends.
    let err = backend_by_name("tpu", &BackendParams::default()).err().expect("unknown backend").to_string();
    assert!(err.contains("cpu, cuda"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU (scripts/gpu-check.sh runs it with --include-ignored)"]
fn llama_block_on_the_gpu_matches_the_cpu_reference() {
    // Every configuration runs; the failures are reported together at the end.
    let mut failures = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let graph = Workload::parse(SMALL_LLAMA).unwrap().build(dtype).unwrap();
        for devices in [1, 8] {
            // Replayed and eager with fusion, and replayed without it.
            for (eager, fuse) in [(false, true), (true, true), (false, false)] {
                let label = format!("{dtype} p = {devices} eager {eager} fuse {fuse}");
                let options = CompileOptions {
                    devices,
                    backend: Arc::new(CudaBackend::new(CudaOptions { eager, fuse, ..CudaOptions::default() })),
                    ..CompileOptions::default()
                };
                let run = || -> Result<f32, String> {
                    let mut exe = compile(&graph, &options).map_err(|e| format!("compile: {e}"))?;
                    exe.load_random(devices as u64).map_err(|e| format!("load: {e}"))?;
                    let reference = graph.computation().evaluate(&exe.loaded_inputs()).map_err(|e| e.to_string())?;
                    // Twice: a replayed graph must give the same answer as its first launch.
                    let mut worst = 0.0f32;
                    for _ in 0..2 {
                        exe.execute().map_err(|e| format!("execute: {e}"))?;
                        let err = reference
                            .iter()
                            .map(|(t, r)| scaled_error(&exe.outputs()[t], r, 1.0))
                            .fold(0.0f32, f32::max);
                        worst = worst.max(err);
                    }
                    Ok(worst)
                };
                match run() {
                    Ok(err) if err <= 10.0 * tolerance(dtype) => println!("ok   {label}: error {err:.2e}"),
                    Ok(err) => failures.push(format!("{label}: error {err}")),
                    Err(e) => failures.push(format!("{label}: {e}")),
                }
            }
        }
    }
    for f in &failures {
        println!("FAIL {f}");
    }
    assert!(failures.is_empty(), "{} configurations failed:\n{}", failures.len(), failures.join("\n"));
}

/// Without a GPU: the CUDA lowering of a whole LLaMA block at p = 1 and p = 8, with and
/// without kernel fusion, run on the host emulator with the virtual devices on one and on two
/// GPUs, matches the reference.
#[test]
fn llama_block_lowering_matches_the_reference_on_the_emulator() {
    for dtype in [DType::F32, DType::BF16] {
        let graph = Workload::parse(SMALL_LLAMA).unwrap().build(dtype).unwrap();
        for devices in [1, 8] {
            let mut exe =
                compile(&graph, &CompileOptions { devices, rewrites: false, ..CompileOptions::default() }).unwrap();
            exe.load_random(3).unwrap();
            let comp = graph.computation();
            let compiled = exe.compiled();
            let kernels = einsum_compile::ComputationKernels(comp, &compiled.kernels);
            let fusion = einsum_cuda::fusion::fuse(&compiled.graph, &kernels).unwrap();
            assert!(fusion.fused() >= 1, "p = {devices}: nothing fused");
            println!("{dtype} p = {devices}: {} pairs fused", fusion.fused());
            let values = exe.loaded_inputs();
            let ordered: Vec<_> = comp.inputs().iter().map(|t| values[t].clone()).collect();
            let reference = comp.evaluate(&values).unwrap();
            let plans: [(&TaskGraph, &dyn KernelLibrary); 2] =
                [(&compiled.graph, &kernels), (&fusion.graph, &fusion.kernels)];
            for (fused, (task_graph, library)) in plans.into_iter().enumerate() {
                let lowered = einsum_cuda::lower::lower(task_graph, library, &einsum_cuda::KernelRegistry::default())
                    .unwrap_or_else(|e| panic!("{e}"));
                for gpus in [1, 2] {
                    let outs = einsum_cuda::emulate::run(task_graph, &lowered, gpus, &ordered);
                    for (t, out) in comp.saved().iter().zip(&outs) {
                        let err = scaled_error(out, &reference[t], 1.0);
                        let at = format!("{dtype} p = {devices} on {gpus} GPUs, fused {}", fused == 1);
                        assert!(err <= 10.0 * tolerance(dtype), "{at}: error {err}");
                    }
                }
            }
        }
    }
}

/// The small block with its elementwise chains fused into their einsums (the epilogue rule
/// alone) lowers each fused operator to its GEMM and the stages in place on its output, and
/// matches the written graph's reference on the emulator at p = 1 and 8, in f32 and bf16.
#[test]
fn fused_epilogues_lower_and_match_the_reference_on_the_emulator() {
    use einsummable::rewrite::Rules;
    let only_epilogues =
        Rules { contraction: Vec::new(), orders: None, transposes: None, merges: Vec::new(), ..Rules::default() };
    for dtype in [DType::F32, DType::BF16] {
        let graph = Workload::parse(SMALL_LLAMA).unwrap().build(dtype).unwrap();
        for devices in [1, 8] {
            let options = CompileOptions { devices, rules: only_epilogues.clone(), ..CompileOptions::default() };
            let mut exe = compile(&graph, &options).unwrap();
            let fused = exe.rewrites().unwrap().iter().filter(|c| !c.as_written()).count();
            assert_eq!(fused, 3, "{dtype} p = {devices}: {:?}", exe.rewrites());
            exe.load_random(3).unwrap();
            let (comp, form) = (graph.computation(), exe.planned_computation());
            let compiled = exe.compiled();
            let kernels = einsum_compile::ComputationKernels(form, &compiled.kernels);
            let lowered = einsum_cuda::lower::lower(&compiled.graph, &kernels, &einsum_cuda::KernelRegistry::default())
                .unwrap_or_else(|e| panic!("{e}"));
            let values = exe.loaded_inputs();
            let by_name: std::collections::HashMap<String, _> =
                values.iter().map(|(t, v)| (comp.tensor_name(*t), v.clone())).collect();
            let ordered: Vec<_> = form.inputs().iter().map(|t| by_name[&form.tensor_name(*t)].clone()).collect();
            let reference = comp.evaluate(&values).unwrap();
            let outs = einsum_cuda::emulate::run(&compiled.graph, &lowered, 1, &ordered);
            for (t, out) in comp.saved().iter().zip(&outs) {
                let err = scaled_error(out, &reference[t], 1.0);
                assert!(err <= 10.0 * tolerance(dtype), "{dtype} p = {devices}: error {err}");
            }
        }
    }
}

/// Fusion on the small LLaMA block at p = 1: the FFN's SiLU and the multiply by `up` become
/// one task (their intermediate dropped), and the residual add with the second RMSNorm
/// another (the sum kept: the last residual add reads it), so two tasks, one buffer and two
/// kernel launches fewer; the fused kernels are the ones launched.
#[test]
fn llama_block_fusion_at_p_1_saves_two_tasks_one_buffer_and_two_launches() {
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(DType::BF16).unwrap();
    let exe = compile(&graph, &CompileOptions { devices: 1, rewrites: false, ..CompileOptions::default() }).unwrap();
    let compiled = exe.compiled();
    let kernels = einsum_compile::ComputationKernels(graph.computation(), &compiled.kernels);
    let fusion = einsum_cuda::fusion::fuse(&compiled.graph, &kernels).unwrap();
    let (before, after) = (&compiled.graph, &fusion.graph);
    assert_eq!(fusion.fused(), 2);
    assert_eq!(after.nodes().len(), before.nodes().len() - 2);
    assert_eq!(after.buffers().len(), before.buffers().len() - 1);
    assert!(after.check_complete().is_ok());
    let launches = |g: &TaskGraph, k: &dyn KernelLibrary| {
        let lowered =
            einsum_cuda::lower::lower(g, k, &einsum_cuda::KernelRegistry::default()).unwrap_or_else(|e| panic!("{e}"));
        let mut names = std::collections::BTreeMap::<String, usize>::new();
        for op in lowered.ops.iter().flatten() {
            // The operation's variant: `Unary`, `Binary`, `Rows`, `UnaryBinary`, ...
            let name = format!("{op:?}").split(['(', ' ', '{']).next().unwrap_or_default().to_string();
            *names.entry(name).or_default() += 1;
        }
        names
    };
    let (b, a) = (launches(before, &kernels), launches(after, &fusion.kernels));
    let count = |m: &std::collections::BTreeMap<String, usize>, k: &str| m.get(k).copied().unwrap_or(0);
    assert_eq!(a.values().sum::<usize>(), b.values().sum::<usize>() - 2, "{b:?} -> {a:?}");
    assert_eq!((count(&b, "UnaryBinary"), count(&b, "BinaryRmsNorm")), (0, 0), "{b:?}");
    assert_eq!((count(&a, "UnaryBinary"), count(&a, "BinaryRmsNorm")), (1, 1), "{a:?}");
    assert_eq!(count(&a, "Unary"), count(&b, "Unary") - 1, "{b:?} -> {a:?}");
    assert_eq!(count(&a, "Binary"), count(&b, "Binary") - 2, "{b:?} -> {a:?}");
    assert_eq!(count(&a, "Rows"), count(&b, "Rows") - 1, "{b:?} -> {a:?}");
    let fused: Vec<&str> = after.nodes().iter().filter(|n| n.label.contains(" + ")).map(|n| n.label.as_str()).collect();
    assert_eq!(fused.len(), 2, "{fused:?}");
}

/// The memory-bound kernels' variants engage on a real graph: the small LLaMA block at p = 8
/// in bf16 (every offset within 31 bits) launches no 64-bit strided kernel, some 16-byte
/// vector ones, and one `aggregate` launch per aggregation task (none has over 8 sources).
#[test]
fn llama_block_lowering_picks_the_fast_memory_bound_kernels() {
    use einsum_core::taskgraph::Task;
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(DType::BF16).unwrap();
    let exe = compile(&graph, &CompileOptions { devices: 8, rewrites: false, ..CompileOptions::default() }).unwrap();
    let compiled = exe.compiled();
    let kernels = einsum_compile::ComputationKernels(graph.computation(), &compiled.kernels);
    let lowered = einsum_cuda::lower::lower(&compiled.graph, &kernels, &einsum_cuda::KernelRegistry::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut launches = std::collections::BTreeMap::<&str, usize>::new();
    for op in lowered.ops.iter().flatten() {
        if let Some(name) = op.kernel_name() {
            *launches.entry(name).or_default() += 1;
        }
    }
    println!("{launches:?}");
    for wide in ["box_copy", "binary", "reduce"] {
        assert!(!launches.contains_key(wide), "a 64-bit `{wide}` launch in {launches:?}");
    }
    assert!(launches.keys().any(|k| k.ends_with("_vec")), "no vector launch in {launches:?}");
    for (node, ops) in compiled.graph.nodes().iter().zip(&lowered.ops) {
        if let Task::Aggregate { srcs, .. } = &node.task {
            assert!(srcs.len() <= einsum_cuda::lower::MAX_AGG_SOURCES);
            assert_eq!(ops.len(), 1, "{}: {} sources in {} launches", node.label, srcs.len(), ops.len());
        }
    }
}

/// Without a GPU: the stream plans of a LLaMA block at p = 1 and p = 8 on one and two GPUs,
/// with 1 and 4 streams per GPU, unfused and fused, pass the race checker, which flags any of their waits
/// dropped (a sample of them); and a run with the streams interleaved at random (each
/// stream's order and the event waits only) matches the reference.
#[test]
fn llama_block_stream_plans_are_race_free_and_interleaved_runs_match_the_reference() {
    use einsum_cuda::race_check::{RaceError, check};
    use einsum_cuda::stream_plan::StreamPlan;
    let dtype = DType::F32;
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(dtype).unwrap();
    for devices in [1, 8] {
        let mut exe =
            compile(&graph, &CompileOptions { devices, rewrites: false, ..CompileOptions::default() }).unwrap();
        exe.load_random(5).unwrap();
        let comp = graph.computation();
        let compiled = exe.compiled();
        let kernels = einsum_compile::ComputationKernels(comp, &compiled.kernels);
        let fusion = einsum_cuda::fusion::fuse(&compiled.graph, &kernels).unwrap();
        let values = exe.loaded_inputs();
        let ordered: Vec<_> = comp.inputs().iter().map(|t| values[t].clone()).collect();
        let reference = comp.evaluate(&values).unwrap();
        let graphs: [(&TaskGraph, &dyn KernelLibrary); 2] =
            [(&compiled.graph, &kernels), (&fusion.graph, &fusion.kernels)];
        for (fused, (task_graph, library)) in graphs.into_iter().enumerate() {
            let lowered = einsum_cuda::lower::lower(task_graph, library, &einsum_cuda::KernelRegistry::default())
                .unwrap_or_else(|e| panic!("{e}"));
            for gpus in [1, 2] {
                for streams in [1, 4] {
                    let at = format!("p = {devices} on {gpus} GPUs, {streams} streams per GPU, fused {}", fused == 1);
                    let plan = StreamPlan::new(task_graph, gpus, streams, &lowered.scratch);
                    check(task_graph, &plan, &lowered.scratch).unwrap_or_else(|e| panic!("{at}: {e}"));
                    if devices == 1 && streams == 4 {
                        let used: std::collections::BTreeSet<_> = plan.stream.iter().collect();
                        assert!(used.len() > 1, "{at}: independent tasks stay on one stream");
                    }
                    let waits: Vec<(usize, usize)> =
                        plan.waits.iter().enumerate().flat_map(|(t, w)| (0..w.len()).map(move |i| (t, i))).collect();
                    assert!(devices == 1 && streams == 1 || !waits.is_empty(), "{at}: no event at all");
                    for &(t, i) in waits.iter().step_by((waits.len() / 12).max(1)) {
                        let mut dropped = plan.clone();
                        dropped.waits[t].remove(i);
                        let err = check(task_graph, &dropped, &lowered.scratch);
                        assert!(
                            matches!(err, Err(RaceError::Race { .. })),
                            "{at}: dropping task {t}'s wait {i}: {err:?}"
                        );
                    }
                    let mut e = einsum_cuda::emulate::Emulator::with_streams(task_graph, &lowered, gpus, streams);
                    e.load_all(&ordered).unwrap();
                    let outs = e.run_interleaved(devices as u64 * 10 + streams as u64).unwrap();
                    for (t, out) in comp.saved().iter().zip(&outs) {
                        let err = scaled_error(out, &reference[t], 1.0);
                        assert!(err <= 10.0 * tolerance(dtype), "{at}: error {err}");
                    }
                }
            }
        }
    }
}

/// Without a GPU: with p = 8 virtual devices on one GPU, transfers between them share the
/// source's memory instead of copying: fewer copies are issued (none: all 224 transfers of
/// this block are between virtual devices of the one GPU), the pool is no larger (equal on
/// this block: the copies never set the pool's high-water mark), the plan is race-free and
/// the emulated run (which lays memory out as the GPU does) matches the reference.
#[test]
fn virtual_devices_on_one_gpu_share_buffers_instead_of_copying() {
    use einsum_cuda::stream_plan::{PlanOptions, StreamPlan};
    use einsum_cuda::work::Op;
    let dtype = DType::F32;
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(dtype).unwrap();
    let mut exe =
        compile(&graph, &CompileOptions { devices: 8, rewrites: false, ..CompileOptions::default() }).unwrap();
    exe.load_random(9).unwrap();
    let comp = graph.computation();
    let compiled = exe.compiled();
    let kernels = einsum_compile::ComputationKernels(comp, &compiled.kernels);
    let lowered = einsum_cuda::lower::lower(&compiled.graph, &kernels, &einsum_cuda::KernelRegistry::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let g = &compiled.graph;
    let shared = StreamPlan::new(g, 1, 4, &lowered.scratch);
    let copying =
        StreamPlan::with_options(g, 1, &PlanOptions { streams_per_gpu: 4, alias_transfers: false }, &lowered.scratch);
    let copies = |plan: &StreamPlan| {
        let issued = lowered.ops.iter().zip(&plan.elided).filter(|(_, e)| !**e).flat_map(|(ops, _)| ops);
        issued.filter(|op| matches!(op, Op::Memcpy(_))).count()
    };
    eprintln!(
        "copies issued: {} shared, {} copying; pool bytes: {} shared, {} copying",
        copies(&shared),
        copies(&copying),
        shared.pool_bytes[0],
        copying.pool_bytes[0]
    );
    assert!(copies(&shared) < copies(&copying), "{} vs {}", copies(&shared), copies(&copying));
    assert!(shared.pool_bytes[0] <= copying.pool_bytes[0], "{:?} vs {:?}", shared.pool_bytes, copying.pool_bytes);
    for plan in [&shared, &copying] {
        einsum_cuda::race_check::check(g, plan, &lowered.scratch).unwrap_or_else(|e| panic!("{e}"));
    }
    let values = exe.loaded_inputs();
    let ordered: Vec<_> = comp.inputs().iter().map(|t| values[t].clone()).collect();
    let reference = comp.evaluate(&values).unwrap();
    let outs = einsum_cuda::emulate::run(g, &lowered, 1, &ordered);
    for (t, out) in comp.saved().iter().zip(&outs) {
        let err = scaled_error(out, &reference[t], 1.0);
        assert!(err <= 10.0 * tolerance(dtype), "error {err}");
    }
}

/// Without a GPU: the small LLaMA block planned for 8 devices (two groups of four, one per
/// sequence) and run by a job of 4 ranks (two devices each) and of 8 (one each), each rank
/// with one GPU of its own (as NCCL runs them): every rank's share of the fused
/// graph is lowered and planned alone (only its devices' memory; its sends and receives one
/// group per step on an exchange stream) and is race-free, a wait for a step dropped is
/// flagged, and the ranks emulated together, exchanging their steps' blocks, give
/// outputs bit-equal to the one-process emulation of the same graph.
#[test]
fn llama_block_split_over_ranks_matches_one_process_on_the_emulator() {
    use einsum_core::HostTensor;
    use einsum_cuda::emulate::{Emulator, run_ranks};
    use einsum_cuda::lower::{Lowered, lower, lower_rank};
    use einsum_cuda::race_check::{RaceError, check};
    use einsum_cuda::rank_schedule::{RankSchedule, stored_blocks};
    let dtype = DType::F32;
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(dtype).unwrap();
    let mut exe =
        compile(&graph, &CompileOptions { devices: 8, rewrites: false, ..CompileOptions::default() }).unwrap();
    exe.load_random(11).unwrap();
    let comp = graph.computation();
    let compiled = exe.compiled();
    let kernels = einsum_compile::ComputationKernels(comp, &compiled.kernels);
    let fusion = einsum_cuda::fusion::fuse(&compiled.graph, &kernels).unwrap();
    let (g, library) = (&fusion.graph, &fusion.kernels);
    let registry = einsum_cuda::KernelRegistry::default();
    let values = exe.loaded_inputs();
    let ordered: Vec<_> = comp.inputs().iter().map(|t| values[t].clone()).collect();
    let whole_lowered = lower(g, library, &registry).unwrap_or_else(|e| panic!("{e}"));
    let mut whole = Emulator::new(g, &whole_lowered, 1);
    whole.load_all(&ordered).unwrap();
    let one_process = whole.run().unwrap();
    let whole_pool = whole.stream_plan().pool_bytes[0];
    for ranks in [4, 8] {
        let device_rank: Vec<usize> = (0..8).map(|d| d / (8 / ranks)).collect();
        let schedules: Vec<RankSchedule> =
            (0..ranks).map(|r| RankSchedule::new(g, &device_rank, r, ranks).unwrap()).collect();
        let lowered: Vec<Lowered> =
            schedules.iter().map(|s| lower_rank(s, library, &registry).unwrap_or_else(|e| panic!("{e}"))).collect();
        let mut emulators: Vec<Emulator> =
            schedules.iter().zip(&lowered).map(|(s, l)| Emulator::for_rank(s, l, 1, 4)).collect();
        let mut exchanged = 0;
        for (r, ((e, s), l)) in emulators.iter().zip(&schedules).zip(&lowered).enumerate() {
            let at = format!("rank {r} of {ranks}");
            let plan = e.stream_plan();
            check(&s.graph, plan, &l.scratch).unwrap_or_else(|err| panic!("{at}: {err}"));
            assert!(!plan.steps.is_empty(), "{at}: no exchange");
            assert!(plan.pool_bytes[0] < whole_pool, "{at}: pool {} of {whole_pool}", plan.pool_bytes[0]);
            exchanged += plan.steps.iter().flatten().count();
            // A task that no longer waits for a step it depends on races with it.
            let exchange = |t: &einsum_core::taskgraph::TaskId| plan.roles[t.0 as usize].step().is_some();
            let (t, i) = (0..plan.waits.len())
                .find_map(|t| plan.waits[t].iter().position(exchange).map(|i| (t, i)))
                .expect("a task waits for a step");
            let mut dropped = plan.clone();
            dropped.waits[t].remove(i);
            let err = check(&s.graph, &dropped, &l.scratch);
            assert!(matches!(err, Err(RaceError::Race { .. })), "{at}: dropping task {t}'s wait {i}: {err:?}");
        }
        // Every crossing transfer is one rank's send and another's receive.
        let crossing = g.nodes().iter().filter(|n| match n.task {
            einsum_core::taskgraph::Task::Transfer { src, dst } => {
                device_rank[g.buffer(src).device.0 as usize] != device_rank[g.buffer(dst).device.0 as usize]
            }
            _ => false,
        });
        assert_eq!(exchanged, 2 * crossing.count(), "{ranks} ranks");
        for e in &mut emulators {
            e.load_all(&ordered).unwrap();
        }
        let outs = run_ranks(&mut emulators).unwrap();
        let mut gathered: Vec<HostTensor> =
            one_process.iter().map(|o| HostTensor::filled(o.ty().clone(), o.dtype(), f32::NAN)).collect();
        for (s, out) in schedules.iter().zip(&outs) {
            for (o, block) in stored_blocks(&s.graph, &s.roles) {
                gathered[o].overwrite(&out[o].slice(&block).unwrap()).unwrap();
            }
        }
        for (o, (got, want)) in gathered.iter().zip(&one_process).enumerate() {
            assert!(got.to_ne_bytes() == want.to_ne_bytes(), "{ranks} ranks: output {o} differs");
        }
    }
}

/// On two GPUs with NCCL: the small LLaMA block planned for 8 devices, run as two ranks
/// (threads here, one GPU and one communicator each, four devices each) whose transfers to
/// each other go over NCCL, replayed twice: the blocks each rank stores, put together, match
/// the single-device reference.
#[cfg(feature = "nccl")]
#[test]
#[ignore = "needs two GPUs and NCCL"]
fn llama_block_over_two_nccl_ranks_matches_the_reference() {
    use einsum_core::HostTensor;
    use einsum_cuda::nccl::{NcclRank, UniqueId};
    use einsum_cuda::{CudaExecutable, RankShare};
    let dtype = DType::F32;
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(dtype).unwrap();
    let mut exe =
        compile(&graph, &CompileOptions { devices: 8, rewrites: false, ..CompileOptions::default() }).unwrap();
    exe.load_random(13).unwrap();
    let comp = graph.computation();
    let compiled = exe.compiled();
    let kernels = einsum_compile::ComputationKernels(comp, &compiled.kernels);
    let values = exe.loaded_inputs();
    let ordered: Vec<_> = comp.inputs().iter().map(|t| values[t].clone()).collect();
    let reference = comp.evaluate(&values).unwrap();
    let id = UniqueId::new().expect("NCCL");
    let device_rank: Vec<usize> = (0..8).map(|d| d / 4).collect();
    // Per rank, its outputs and the blocks of them it stored.
    type Stored = (Vec<HostTensor>, Vec<(usize, einsum_core::TensorType)>);
    let ranks: Vec<Stored> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2usize)
            .map(|rank| {
                let (kernels, ordered, device_rank) = (&kernels, &ordered, device_rank.clone());
                s.spawn(move || {
                    let nccl = NcclRank::init(&id, rank, 2, rank).expect("joined, a GPU per rank");
                    let share = RankShare { device_rank, rank, ranks: 2, exchange: Box::new(nccl) };
                    let options = CudaOptions { first_gpu: rank, max_gpus: Some(1), ..CudaOptions::default() };
                    let mut e =
                        CudaExecutable::prepare_rank(&compiled.graph, kernels, &options, share).expect("prepared");
                    e.load_all(ordered).expect("loaded");
                    let first = e.run().expect("ran");
                    let second = e.run().expect("replayed");
                    assert!(first == second, "rank {rank}: a replay differs from the first run");
                    (second, e.stored_blocks().to_vec())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank")).collect()
    });
    for (o, t) in comp.saved().iter().enumerate() {
        let mut whole = HostTensor::filled(reference[t].ty().clone(), reference[t].dtype(), f32::NAN);
        for (outs, stored) in &ranks {
            for (_, block) in stored.iter().filter(|(out, _)| *out == o) {
                whole.overwrite(&outs[o].slice(block).unwrap()).unwrap();
            }
        }
        let err = scaled_error(&whole, &reference[t], 1.0);
        assert!(err <= 10.0 * tolerance(dtype), "output {o}: error {err}");
    }
}

/// `--warmup W --repeat N` runs W + N times and reports the median of the N timed runs.
#[test]
fn repeat_reports_the_median_of_the_timed_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_einsummable"))
        .args(["run", "matmul:n=8", "--devices", "2", "--warmup", "1", "--repeat", "3", "--json"])
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"], 3);
    assert!(v["wall_ms"].as_f64().unwrap() >= 0.0);
    // The CPU backend measures no device time apart from the wall time.
    assert!(v["device_ms"].is_null(), "{v}");
}
