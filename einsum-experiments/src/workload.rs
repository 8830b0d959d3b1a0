//! Named workloads, written `name:key=value,...` (e.g. `ffn:tokens=256,d_model=64,d_ff=128`),
//! shared by every command.
//!
//! A workload's size is known from its parameters before its graph exists
//! ([`Workload::estimate`]: nodes, operators, operands and host bytes, from the layers and
//! the dimensions that size an allocation), so that one too large for the machine is refused
//! with a [`TooLarge`] error instead of building until an allocation aborts the process:
//! [`Workload::build`] refuses a graph whose estimated bytes exceed the host memory this
//! process can still allocate ([`einsum_core::host_memory`]), and
//! [`Workload::check_tasks`] a graph whose compiled plan would exceed a task limit on `p`
//! devices (the compiler's, `einsum_compile::footprint::LIMITS`), from the least task count
//! any plan of it has.

use std::collections::BTreeMap;

use einsum_core::DType;
use einsum_core::host_memory::available_host_memory;
use einsum_joinagg::IndexRole;
use einsum_ops::{Packing, attention::AttentionConfig, binary::BinaryOp, rope::RopeFrequencies, unary::UnaryOp};

use einsum_graph::{Graph, Tensor};

use crate::{Error, Result};

/// The workloads and the keys each accepts, with their defaults.
const WORKLOADS: &[(&str, &[(&str, usize)])] = &[
    ("matmul", &[("m", 0), ("k", 0), ("n", 4096)]),
    ("ffn", &[("tokens", 8192), ("d_model", 4096), ("d_ff", 14336)]),
    // LLaMA-3-8B's attention alone: causal, grouped-query, over `seqs` packed sequences.
    ("attention", &[("tokens", 8192), ("seqs", 1), ("heads_q", 32), ("heads_kv", 8), ("d_head", 128)]),
    (
        "llama-block",
        &[
            ("tokens", 8192),
            ("seqs", 1),
            ("d_model", 4096),
            ("heads_q", 32),
            ("heads_kv", 8),
            ("d_head", 128),
            ("d_ff", 14336),
        ],
    ),
    (
        "llama",
        &[
            ("layers", 32),
            ("tokens", 8192),
            ("seqs", 1),
            ("d_model", 4096),
            ("heads_q", 32),
            ("heads_kv", 8),
            ("d_head", 128),
            ("d_ff", 14336),
        ],
    ),
    (
        "llama3-8b",
        &[
            ("layers", 32),
            ("tokens", 8192),
            ("seqs", 1),
            ("d_model", 4096),
            ("heads_q", 32),
            ("heads_kv", 8),
            ("d_head", 128),
            ("d_ff", 14336),
            ("vocab", 128_256),
        ],
    ),
    (
        "llama3-70b",
        &[
            ("layers", 80),
            ("tokens", 4096),
            ("seqs", 1),
            ("d_model", 8192),
            ("heads_q", 64),
            ("heads_kv", 8),
            ("d_head", 128),
            ("d_ff", 28672),
            ("vocab", 128_256),
        ],
    ),
    // One decode step: a new token for each of `batch` sequences, over a KV cache of `cache`
    // tokens per sequence (graph inputs, one pair per layer).
    (
        "llama-decode",
        &[
            ("layers", 1),
            ("batch", 8),
            ("cache", 4096),
            ("d_model", 4096),
            ("heads_q", 32),
            ("heads_kv", 8),
            ("d_head", 128),
            ("d_ff", 14336),
        ],
    ),
    (
        "llama3-8b-decode",
        &[
            ("layers", 32),
            ("batch", 1),
            ("cache", 4096),
            ("d_model", 4096),
            ("heads_q", 32),
            ("heads_kv", 8),
            ("d_head", 128),
            ("d_ff", 14336),
            ("vocab", 128_256),
        ],
    ),
    (
        "llama3-70b-decode",
        &[
            ("layers", 80),
            ("batch", 1),
            ("cache", 4096),
            ("d_model", 8192),
            ("heads_q", 64),
            ("heads_kv", 8),
            ("d_head", 128),
            ("d_ff", 28672),
            ("vocab", 128_256),
        ],
    ),
    ("chain-a", &[("scale", 1)]),
    ("chain-b", &[("scale", 1)]),
    ("chain-c", &[("scale", 1)]),
    ("chain-d", &[("scale", 1)]),
    ("chain-e", &[("scale", 1)]),
];

/// The matrix chains of Section 6: the dimensions `d0..dn` (matrix `Mi` is
/// `d(i-1) × d(i)`) and the fixed parenthesisation, as the paper prints it.
const CHAINS: &[(&str, &[usize], &str)] = &[
    (
        "chain-a",
        &[10240, 16384, 6144, 16384, 6144, 16384, 6144, 16384, 6144, 10240],
        "(M1 M2) ((M3 M4)((M5 M6)(M7 M8))) M9",
    ),
    ("chain-b", &[9216, 20480, 5120, 20480, 5120, 9216], "(M1 M2) ((M3 M4) M5)"),
    ("chain-c", &[10240, 12288, 32768, 2048], "M1 (M2 M3)"),
    (
        "chain-d",
        &[24576, 1536, 20480, 20480, 20480, 20480, 20480, 20480, 1536, 24576],
        "M1 (M2 (M3 (M4 (M5 (M6 (M7 M8)))))) M9",
    ),
    (
        "chain-e",
        &[49152, 1024, 20480, 20480, 20480, 20480, 20480, 20480, 20480, 20480, 20480, 20480, 1024, 49152],
        "M1 (M2 (M3 (M4 (M5 (M6 (M7 (M8 (M9 (M10 (M11 M12)))))))))) M13",
    ),
];

/// A parsed workload description: its name and every key with its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    name: String,
    params: BTreeMap<String, usize>,
}

impl Workload {
    /// Parses `name:key=value,...`; unknown names or keys are errors listing the valid ones.
    pub fn parse(spec: &str) -> Result<Self> {
        let err = |reason: String| Error::Workload { spec: spec.to_string(), reason };
        let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
        let Some((_, keys)) = WORKLOADS.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = WORKLOADS.iter().map(|(n, _)| *n).collect();
            return Err(err(format!("unknown workload `{name}`; valid workloads: {}", names.join(", "))));
        };
        let mut params: BTreeMap<String, usize> = keys.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        let mut given: Vec<(&str, &str)> = Vec::new(); // (key, `key=value` as written)
        for arg in args.split(',').filter(|a| !a.is_empty()) {
            let (k, v) = arg.split_once('=').ok_or_else(|| err(format!("`{arg}` is not key=value")))?;
            if !params.contains_key(k) {
                let valid: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
                return Err(err(format!("unknown key `{k}` for {name}; valid keys: {}", valid.join(", "))));
            }
            if let Some((_, first)) = given.iter().find(|(g, _)| *g == k) {
                return Err(err(format!("`{k}` is given twice (as `{first}` and `{arg}`)")));
            }
            let v: usize = v.parse().map_err(|_| {
                if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
                    err(format!("value of `{k}` is too large, got `{v}` (at most {})", usize::MAX))
                } else {
                    err(format!("value of `{k}` must be a positive integer, got `{v}`"))
                }
            })?;
            if v == 0 {
                return Err(err(format!("`{k}` must be positive")));
            }
            params.insert(k.to_string(), v);
            given.push((k, arg));
        }
        if name == "matmul" {
            // `matmul:n=N` is square; `m` and `k` default to `n`.
            let n = params["n"];
            for k in ["m", "k"] {
                if !given.iter().any(|(g, _)| *g == k) {
                    params.insert(k.to_string(), n);
                }
            }
        }
        Ok(Self { name: name.to_string(), params })
    }

    /// The workload's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every key, with its value (given or default).
    pub fn params(&self) -> &BTreeMap<String, usize> {
        &self.params
    }

    /// The size of the workload's graph, from its parameters alone ([`GraphEstimate`]):
    /// nothing is built.
    pub fn estimate(&self) -> GraphEstimate {
        let p = |k: &str| self.params[k];
        let (shape, packed_sequences) = match self.name.as_str() {
            "matmul" => (Shape { inputs: 2, ops: 1, operands: 2, packed: 0 }, 0),
            "ffn" => (Shape { inputs: 3, ops: 3, operands: 5, packed: 0 }, 0),
            "attention" => (Shape { inputs: 3, ops: 1, operands: 3, packed: 1 }, p("seqs")),
            "llama-block" | "llama" | "llama3-8b" | "llama3-70b" => {
                // The embedded tokens `x`, the blocks, and the head where there is a vocabulary.
                let x = Shape { inputs: 1, ops: 0, operands: 0, packed: 0 };
                let layers = if self.name == "llama-block" { 1 } else { p("layers") };
                let head = if self.params.contains_key("vocab") { LM_HEAD } else { Shape::default() };
                (x.plus(LLAMA_BLOCK.times(layers)).plus(head), p("seqs"))
            }
            "llama-decode" | "llama3-8b-decode" | "llama3-70b-decode" => {
                // The new tokens' embeddings and positions, the blocks, the head.
                let x = Shape { inputs: 2, ops: 0, operands: 0, packed: 0 };
                let head = if self.params.contains_key("vocab") { LM_HEAD } else { Shape::default() };
                (x.plus(DECODE_BLOCK.times(p("layers"))).plus(head), 0)
            }
            chain => {
                let (_, dims, _) = CHAINS.iter().find(|(n, _, _)| *n == chain).expect("parse accepts known workloads");
                let mats = dims.len() - 1;
                (Shape { inputs: mats, ops: mats - 1, operands: 2 * (mats - 1), packed: 0 }, 0)
            }
        };
        let nodes = shape.inputs.saturating_add(shape.ops);
        // The workload's own packing, and one copy in each operator that carries it.
        let packings = if shape.packed > 0 { shape.packed.saturating_add(1) } else { 0 };
        let host_bytes = nodes
            .saturating_mul(BYTES_PER_NODE)
            .saturating_add(packings.saturating_mul(packed_sequences).saturating_mul(BYTES_PER_SEQUENCE));
        GraphEstimate { nodes, ops: shape.ops, operands: shape.operands, host_bytes }
    }

    /// Refuses, from [`Workload::estimate`] and before anything is built, a workload whose
    /// compiled plan on `devices` devices would have more than `limit` tasks
    /// ([`GraphEstimate::min_tasks`], the least any plan has), so that a graph the compiler
    /// would refuse is not built first. Returns the estimate.
    ///
    /// # Errors
    /// [`TooLarge::Tasks`] with the count and the limit.
    pub fn check_tasks(&self, devices: usize, limit: usize) -> Result<GraphEstimate> {
        let estimate = self.estimate();
        let tasks = estimate.min_tasks(devices);
        if tasks > limit {
            return Err(TooLarge::Tasks { workload: self.to_string(), devices, ops: estimate.ops, tasks, limit }.into());
        }
        Ok(estimate)
    }

    /// Builds the workload's graph with every tensor in `dtype`, refusing first one whose
    /// estimated host bytes exceed what this process can still allocate
    /// ([`Workload::build_within`] with [`available_host_memory`]).
    pub fn build(&self, dtype: DType) -> Result<Graph> {
        self.build_within(dtype, available_host_memory())
    }

    /// Builds the workload's graph with every tensor in `dtype`, if its estimated host bytes
    /// ([`GraphEstimate::host_bytes`]) fit in `host_bytes` (`None`: no limit).
    ///
    /// # Errors
    /// [`TooLarge::HostMemory`] before anything is allocated when they do not; the builder's
    /// errors (dimensions an operator cannot take).
    pub fn build_within(&self, dtype: DType, host_bytes: Option<usize>) -> Result<Graph> {
        let estimate = self.estimate();
        if let Some(available) = host_bytes.filter(|&limit| estimate.host_bytes > limit) {
            return Err(TooLarge::HostMemory {
                workload: self.to_string(),
                nodes: estimate.nodes,
                bytes: estimate.host_bytes,
                available,
            }
            .into());
        }
        let p = |k: &str| self.params[k];
        let mut g = Graph::new();
        match self.name.as_str() {
            "matmul" => {
                let a = g.input("a", &[("m", p("m")), ("k", p("k"))], dtype)?;
                let b = g.input("b", &[("k", p("k")), ("n", p("n"))], dtype)?;
                let c = g.matmul(a, b)?;
                g.save_as(c, "c")?;
            }
            "ffn" => {
                let (t, d, f) = (p("tokens"), p("d_model"), p("d_ff"));
                // No attention declares the token index here; the hidden index is the FFN's.
                g.role("tokens", IndexRole::Tokens)?;
                g.role("d_ff", IndexRole::FfnHidden)?;
                let x = g.input("x", &[("tokens", t), ("d_model", d)], dtype)?;
                let w1 = g.input("w1", &[("d_model", d), ("d_ff", f)], dtype)?;
                let w2 = g.input("w2", &[("d_ff", f), ("d_model", d)], dtype)?;
                let act = g.matmul(x, w1)?;
                let hidden = g.unary(act, UnaryOp::Relu)?;
                let y = g.matmul(hidden, w2)?;
                g.save_as(y, "y")?;
            }
            "attention" => {
                let (t, seqs, e) = (p("tokens"), p("seqs"), p("d_head"));
                let packing = packing(self, t, seqs)?;
                let q = g.input("q", &[("heads_q", p("heads_q")), ("tokens", t), ("d_head", e)], dtype)?;
                let k = g.input("k", &[("heads_kv", p("heads_kv")), ("tokens", t), ("d_head", e)], dtype)?;
                let v = g.input("v", &[("heads_kv", p("heads_kv")), ("tokens", t), ("d_head", e)], dtype)?;
                let a =
                    g.attention(q, k, v, "tokens", "d_head", AttentionConfig { causal: true, packing, scale: None })?;
                g.save_as(a, "out")?;
            }
            "llama-block" | "llama" | "llama3-8b" | "llama3-70b" => {
                let layers = if self.name == "llama-block" { 1 } else { p("layers") };
                let dims = LlamaDims::from_params(self, p("tokens"));
                let attend = Attend::Prompt(packing(self, dims.tokens, p("seqs"))?);
                // Attention declares the token and head indices; the FFN's hidden index is ours.
                g.role("d_ff", IndexRole::FfnHidden)?;
                let mut x = g.input("x", &[("tokens", dims.tokens), ("d_model", dims.d_model)], dtype)?;
                for layer in 0..layers {
                    // A single block's weights carry the plain names of the block's definition.
                    let prefix = if self.name == "llama-block" { String::new() } else { format!("l{layer}.") };
                    x = llama_block(&mut g, x, &dims, &prefix, &attend, dtype)?;
                }
                save_output(&mut g, x, &dims, self.params.get("vocab").copied(), dtype)?;
            }
            "llama-decode" | "llama3-8b-decode" | "llama3-70b-decode" => {
                let (batch, cache) = (p("batch"), p("cache"));
                let dims = LlamaDims::from_params(self, batch);
                g.role("d_ff", IndexRole::FfnHidden)?;
                let mut x = g.input("x", &[("tokens", batch), ("d_model", dims.d_model)], dtype)?;
                let positions = g.input("positions", &[("tokens", batch)], DType::I32)?;
                let attend = Attend::Cached { positions, cache };
                for layer in 0..p("layers") {
                    x = llama_block(&mut g, x, &dims, &format!("l{layer}."), &attend, dtype)?;
                }
                save_output(&mut g, x, &dims, self.params.get("vocab").copied(), dtype)?;
            }
            chain if chain.starts_with("chain-") => {
                let (_, dims, order) = CHAINS.iter().find(|(n, _, _)| *n == chain).expect("parse accepts known chains");
                let scale = p("scale");
                let dims: Vec<usize> = dims.iter().map(|d| (d / scale).max(1)).collect();
                let mats = (1..dims.len())
                    .map(|i| {
                        g.input(
                            &format!("M{i}"),
                            &[(&format!("d{}", i - 1), dims[i - 1]), (&format!("d{i}"), dims[i])],
                            dtype,
                        )
                    })
                    .collect::<einsum_graph::Result<Vec<_>>>()?;
                let product = build_chain(&mut g, &mats, order)?;
                g.save_as(product, "product")?;
            }
            other => unreachable!("parse accepts only known workloads, got {other}"),
        }
        Ok(g)
    }
}

impl std::fmt::Display for Workload {
    /// `name:key=value,...` with every key (given or default), in key order: a description
    /// [`Workload::parse`] reads back as this workload.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let params: Vec<String> = self.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "{}:{}", self.name, params.join(","))
    }
}

/// Host bytes one node (an input or an operator) of a built graph takes, all told: its
/// operator, descriptors, names and index entries. Measured as the growth of peak resident
/// memory while building `llama:layers=L` (L = 1 000, 10 000 and 20 000, 25 nodes per layer:
/// 1.20 kB per node, linear in L and independent of the dimensions), rounded up to cover a
/// table's doubling at the wrong moment.
pub const BYTES_PER_NODE: usize = 2048;

/// Host bytes of one packed sequence in a packing (its end, a `usize`): the workload keeps
/// one packing, and each operator that carries it (attention, RoPE) a copy, so `seqs` sizes
/// an allocation of every such operator (measured: 24 bytes per sequence per LLaMA block, its
/// two RoPEs and its attention).
pub const BYTES_PER_SEQUENCE: usize = 8;

/// The size of a workload's graph, estimated from its parameters before it is built
/// ([`Workload::estimate`]). The counts are exact; the bytes lean high.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphEstimate {
    /// Nodes: inputs and operators.
    pub nodes: usize,
    /// Operators.
    pub ops: usize,
    /// Operands of the operators, summed (an operator reading one tensor twice counts two).
    pub operands: usize,
    /// Host bytes the built graph takes: [`BYTES_PER_NODE`] per node, and
    /// [`BYTES_PER_SEQUENCE`] per packed sequence per copy of the packing.
    pub host_bytes: usize,
}

impl GraphEstimate {
    /// The fewest tasks any plan of this graph compiles to on `devices` devices: per device,
    /// one kernel per operator and one load per operand (the count the compiler's task
    /// estimate starts from, before the transfers between operators, which only add).
    pub fn min_tasks(&self, devices: usize) -> usize {
        devices.saturating_mul(self.ops.saturating_add(self.operands))
    }
}

/// A workload refused from its [`GraphEstimate`] before its graph is built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TooLarge {
    /// Its graph would not fit in the host memory this process can still allocate.
    #[error(
        "workload `{workload}`: its graph of {nodes} nodes would take about {bytes} bytes of host memory, more than the {available} bytes available; refused before building it (give fewer layers or smaller dimensions)"
    )]
    HostMemory {
        /// The workload, with every key.
        workload: String,
        /// Its nodes.
        nodes: usize,
        /// The estimated bytes.
        bytes: usize,
        /// The bytes available.
        available: usize,
    },
    /// Its compiled plan would have more tasks than the compiler accepts.
    #[error(
        "workload `{workload}` on {devices} devices compiles to at least {tasks} tasks (a kernel per operator and a load per operand, {ops} operators, on every device), more than the limit of {limit}; refused before building its graph (give fewer layers or devices)"
    )]
    Tasks {
        /// The workload, with every key.
        workload: String,
        /// The device count.
        devices: usize,
        /// Its operators.
        ops: usize,
        /// The fewest tasks of any plan ([`GraphEstimate::min_tasks`]).
        tasks: usize,
        /// The limit.
        limit: usize,
    },
}

/// Inputs, operators, operands and operators carrying the packing of a part of a workload.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    inputs: usize,
    ops: usize,
    operands: usize,
    packed: usize,
}

impl Shape {
    fn plus(self, o: Shape) -> Shape {
        Shape {
            inputs: self.inputs.saturating_add(o.inputs),
            ops: self.ops.saturating_add(o.ops),
            operands: self.operands.saturating_add(o.operands),
            packed: self.packed.saturating_add(o.packed),
        }
    }

    fn times(self, n: usize) -> Shape {
        Shape {
            inputs: self.inputs.saturating_mul(n),
            ops: self.ops.saturating_mul(n),
            operands: self.operands.saturating_mul(n),
            packed: self.packed.saturating_mul(n),
        }
    }
}

/// One LLaMA block ([`llama_block`]): nine weights; two RMSNorms, three projections, two
/// RoPEs, attention, the output projection, two residual adds, three FFN matmuls, SiLU and
/// the gate's product.
const LLAMA_BLOCK: Shape = Shape { inputs: 9, ops: 16, operands: 30, packed: 3 };

/// One decode block: [`LLAMA_BLOCK`] with its two key/value cache inputs, each RoPE reading
/// the positions and the attention reading both caches and the positions.
const DECODE_BLOCK: Shape = Shape { inputs: 11, ops: 16, operands: 35, packed: 0 };

/// The model's head ([`lm_head`]): the final norm's weight and the projection; RMSNorm and
/// a matmul.
const LM_HEAD: Shape = Shape { inputs: 2, ops: 2, operands: 4, packed: 0 };

/// Multiplies the matrices `mats` (`M1` is `mats[0]`) in the order `order` gives, written as
/// in the paper: juxtaposition multiplies, left to right, and parentheses group.
fn build_chain(g: &mut Graph, mats: &[Tensor], order: &str) -> Result<Tensor> {
    fn sequence(
        g: &mut Graph,
        mats: &[Tensor],
        tokens: &mut std::iter::Peekable<std::vec::IntoIter<String>>,
    ) -> Result<Tensor> {
        let mut acc: Option<Tensor> = None;
        while let Some(tok) = tokens.peek().cloned() {
            let factor = match tok.as_str() {
                ")" => break,
                "(" => {
                    tokens.next();
                    let inner = sequence(g, mats, tokens)?;
                    tokens.next(); // the matching ')'
                    inner
                }
                name => {
                    tokens.next();
                    let i: usize = name[1..].parse().expect("chain tables name matrices M1..Mn");
                    mats[i - 1]
                }
            };
            acc = Some(match acc {
                None => factor,
                Some(left) => g.matmul(left, factor)?,
            });
        }
        Ok(acc.expect("chain tables have no empty group"))
    }
    let spaced = order.replace('(', " ( ").replace(')', " ) ");
    let tokens: Vec<String> = spaced.split_whitespace().map(str::to_string).collect();
    sequence(g, mats, &mut tokens.into_iter().peekable())
}

/// The RoPE base of the LLaMA 3 blocks.
const ROPE_THETA: f32 = 500_000.0;

/// How a block's attention sees its keys.
enum Attend {
    /// Causal attention over the prompt's packed sequences.
    Prompt(Packing),
    /// One new token per sequence at the i32 `positions`, over a cache of `cache` tokens.
    Cached { positions: Tensor, cache: usize },
}

/// The dimensions of a LLaMA-style transformer block.
struct LlamaDims {
    tokens: usize,
    d_model: usize,
    heads_q: usize,
    heads_kv: usize,
    d_head: usize,
    d_ff: usize,
}

impl LlamaDims {
    /// The block dimensions of `w`'s keys over `tokens` tokens.
    fn from_params(w: &Workload, tokens: usize) -> Self {
        let p = |k: &str| w.params[k];
        Self {
            tokens,
            d_model: p("d_model"),
            heads_q: p("heads_q"),
            heads_kv: p("heads_kv"),
            d_head: p("d_head"),
            d_ff: p("d_ff"),
        }
    }
}

/// `seqs` packed sequences of equal length over `tokens` tokens.
fn packing(w: &Workload, tokens: usize, seqs: usize) -> Result<Packing> {
    if !tokens.is_multiple_of(seqs) {
        return Err(Error::Workload {
            spec: w.name.clone(),
            reason: format!("tokens ({tokens}) must be a multiple of seqs ({seqs})"),
        });
    }
    Ok(Packing::uniform(seqs, tokens / seqs)?)
}

/// One pre-norm LLaMA block, exactly as `docs/llama-block.md` defines it:
/// `h = x + attention(rmsnorm(x))`, `y = h + w_down(silu(w_gate·n) ⊙ (w_up·n))` with
/// `n = rmsnorm(h)`; RMSNorm with eps 1e-5 and a weight; RoPE (rotate-half, θ = 500000,
/// positions from the start of each packed sequence) on queries and keys; attention scaled
/// by 1/√d_head, causal within each packed sequence, query head `g·(heads_q/heads_kv) + i`
/// reading key/value head `g`.
///
/// Under [`Attend::Cached`] the block is a decode step instead: the tokens are one new token
/// per sequence at the i32 `positions`, rotated there, attending over the block's cache
/// inputs `k_cache` and `v_cache` (`[heads_kv, tokens, cache, d_head]`) and their own keys.
fn llama_block(g: &mut Graph, x: Tensor, d: &LlamaDims, prefix: &str, attend: &Attend, dtype: DType) -> Result<Tensor> {
    let w = |name: &str| format!("{prefix}{name}");
    let norm1 = g.input(&w("attn_norm"), &[("d_model", d.d_model)], dtype)?;
    let wq = g.input(&w("wq"), &[("d_model", d.d_model), ("heads_q", d.heads_q), ("d_head", d.d_head)], dtype)?;
    let wk = g.input(&w("wk"), &[("d_model", d.d_model), ("heads_kv", d.heads_kv), ("d_head", d.d_head)], dtype)?;
    let wv = g.input(&w("wv"), &[("d_model", d.d_model), ("heads_kv", d.heads_kv), ("d_head", d.d_head)], dtype)?;
    let wo = g.input(&w("wo"), &[("heads_q", d.heads_q), ("d_head", d.d_head), ("d_model", d.d_model)], dtype)?;
    let norm2 = g.input(&w("ffn_norm"), &[("d_model", d.d_model)], dtype)?;
    let w_gate = g.input(&w("w_gate"), &[("d_model", d.d_model), ("d_ff", d.d_ff)], dtype)?;
    let w_up = g.input(&w("w_up"), &[("d_model", d.d_model), ("d_ff", d.d_ff)], dtype)?;
    let w_down = g.input(&w("w_down"), &[("d_ff", d.d_ff), ("d_model", d.d_model)], dtype)?;

    let h = g.rmsnorm(x, norm1, "d_model", 1e-5)?;
    let q = g.einsum("td,dhe->hte", &[h, wq])?;
    let k = g.einsum("td,dhe->hte", &[h, wk])?;
    let v = g.einsum("td,dhe->hte", &[h, wv])?;
    let a = match *attend {
        Attend::Prompt(ref packing) => {
            let q = g.rope(q, "tokens", "d_head", ROPE_THETA, packing.clone())?;
            let k = g.rope(k, "tokens", "d_head", ROPE_THETA, packing.clone())?;
            let config = AttentionConfig { causal: true, packing: packing.clone(), scale: None };
            g.attention(q, k, v, "tokens", "d_head", config)?
        }
        Attend::Cached { positions, cache } => {
            let freqs = RopeFrequencies::from_theta(f64::from(ROPE_THETA), d.d_head)?;
            let q = g.rope_at(q, positions, "tokens", "d_head", freqs.clone(), cache)?;
            let k = g.rope_at(k, positions, "tokens", "d_head", freqs, cache)?;
            let dims = [("heads_kv", d.heads_kv), ("tokens", d.tokens), ("cache", cache), ("d_head", d.d_head)];
            let k_cache = g.input(&w("k_cache"), &dims, dtype)?;
            let v_cache = g.input(&w("v_cache"), &dims, dtype)?;
            g.cached_attention(q, k, v, k_cache, v_cache, positions, "tokens", "d_head", None)?
        }
    };
    let o = g.einsum("hte,hed->td", &[a, wo])?;
    let x = g.binary(x, o, BinaryOp::Add)?;

    let h = g.rmsnorm(x, norm2, "d_model", 1e-5)?;
    let gate = g.matmul(h, w_gate)?;
    let up = g.matmul(h, w_up)?;
    let gate = g.unary(gate, UnaryOp::Silu)?;
    let act = g.binary(gate, up, BinaryOp::Mul)?;
    let down = g.matmul(act, w_down)?;
    Ok(g.binary(x, down, BinaryOp::Add)?)
}

/// Saves the blocks' output `x`: through the model's head as `logits` where the workload has
/// a vocabulary, as `hidden` otherwise.
fn save_output(g: &mut Graph, x: Tensor, d: &LlamaDims, vocab: Option<usize>, dtype: DType) -> Result<()> {
    match vocab {
        Some(vocab) => {
            let logits = lm_head(g, x, d, vocab, dtype)?;
            g.save_as(logits, "logits")?;
        }
        None => g.save_as(x, "hidden")?,
    }
    Ok(())
}

/// The model's head after the last block: the final RMSNorm (eps 1e-5, with a weight) and
/// the output projection to the vocabulary's logits, `logits[t, v] = norm(x)[t, d]·lm_head[d, v]`.
/// (The token embedding is a table lookup done before the graph: its input `x` is the embedded
/// tokens, so the embedding table is not a weight of the computation.)
fn lm_head(g: &mut Graph, x: Tensor, d: &LlamaDims, vocab: usize, dtype: DType) -> Result<Tensor> {
    let norm = g.input("norm", &[("d_model", d.d_model)], dtype)?;
    let head = g.input("lm_head", &[("d_model", d.d_model), ("vocab", vocab)], dtype)?;
    let h = g.rmsnorm(x, norm, "d_model", 1e-5)?;
    Ok(g.matmul(h, head)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_fills_defaults_and_rejects_unknowns() {
        let w = Workload::parse("matmul:n=64").unwrap();
        assert_eq!((w.params["m"], w.params["k"], w.params["n"]), (64, 64, 64));
        let w = Workload::parse("matmul:m=8,n=64").unwrap();
        assert_eq!((w.params["m"], w.params["k"]), (8, 64));
        let e = Workload::parse("mlp").unwrap_err().to_string();
        assert!(e.contains("valid workloads: matmul, ffn"), "{e}");
        let e = Workload::parse("ffn:width=3").unwrap_err().to_string();
        assert!(e.contains("unknown key `width`") && e.contains("d_ff"), "{e}");
        assert!(Workload::parse("ffn:tokens=x").is_err());
        assert!(Workload::parse("ffn:tokens=0").is_err());
        assert!(Workload::parse("ffn:tokens").is_err());
    }

    #[test]
    fn attention_alone_is_llama_blocks_attention() {
        let g = Workload::parse("attention:tokens=64,seqs=2,heads_q=4,heads_kv=2,d_head=16").unwrap();
        let graph = g.build(DType::BF16).unwrap();
        let comp = graph.computation();
        let ops: Vec<_> = comp.ops().map(|(_, op, _)| op.kind().to_string()).collect();
        assert_eq!(ops, ["attention"]);
        assert_eq!(comp.desc(comp.saved()[0]).unwrap().shape(), vec![4, 64, 16]);
        let e = Workload::parse("attention:tokens=64,seqs=3").unwrap().build(DType::F32).err().unwrap().to_string();
        assert!(e.contains("multiple of seqs"), "{e}");
    }

    #[test]
    fn parse_rejects_repeated_keys_and_overflowing_values() {
        let e = Workload::parse("matmul:n=3,m=2,n=4").unwrap_err().to_string();
        assert!(e.contains("`n` is given twice (as `n=3` and `n=4`)"), "{e}");
        let e = Workload::parse("matmul:n=99999999999999999999").unwrap_err().to_string();
        assert!(e.contains("value of `n` is too large"), "{e}");
        let e = Workload::parse("matmul:n=-1").unwrap_err().to_string();
        assert!(e.contains("must be a positive integer, got `-1`"), "{e}");
    }

    #[test]
    fn chains_follow_the_papers_parenthesisation() {
        for (name, dims, _) in CHAINS {
            let g = Workload::parse(&format!("{name}:scale=512")).unwrap().build(DType::F32).unwrap();
            let comp = g.computation();
            assert_eq!(comp.ops().count(), dims.len() - 2, "{name}");
            let out = comp.desc(comp.saved()[0]).unwrap();
            assert_eq!(out.shape(), vec![dims[0] / 512, dims[dims.len() - 1] / 512], "{name}");
        }
        // Chain C is right-associated: M1 (M2 M3); its last product is 20 × 4 over k = 24.
        let g = Workload::parse("chain-c:scale=512").unwrap().build(DType::F32).unwrap();
        let (_, last, _) = g.computation().ops().last().unwrap();
        assert_eq!(last.inputs()[1].shape(), vec![24, 4]);
    }

    /// The presets are the real models' shapes: LLaMA-3-70B's weights are about 139 GB in f16
    /// (136.9 GB in the 80 blocks, 2.1 GB in the head), LLaMA-3-8B's about 15 GB.
    #[test]
    fn llama3_presets_have_the_real_models_weights() {
        let weights = |spec: &str| {
            let g = Workload::parse(spec).unwrap().build(DType::F16).unwrap();
            let comp = g.computation();
            let weights = comp.inputs().into_iter().filter(|t| comp.node(t.op).unwrap().name() != "x");
            weights.map(|t| comp.desc(t).unwrap().size_bytes()).sum::<usize>() as f64 / 1e9
        };
        let big = weights("llama3-70b");
        assert!((big - 139.0).abs() < 0.1, "{big}");
        let small = weights("llama3-8b");
        assert!((small - 15.0).abs() < 0.1, "{small}");
        let w = Workload::parse("llama3-70b:layers=2,tokens=512").unwrap();
        assert_eq!((w.params["layers"], w.params["tokens"], w.params["d_model"]), (2, 512, 8192));
        let ops = w.build(DType::F16).unwrap().computation().ops().count();
        assert_eq!(ops, 2 * 16 + 2, "two blocks, then the final norm and the head");
    }

    #[test]
    fn llama_block_has_the_expected_operators() {
        let w =
            Workload::parse("llama-block:tokens=16,seqs=2,d_model=8,heads_q=4,heads_kv=2,d_head=4,d_ff=16").unwrap();
        let g = w.build(DType::F32).unwrap();
        let kinds: Vec<&str> = g.computation().ops().map(|(_, op, _)| op.kind()).collect();
        assert_eq!(kinds.iter().filter(|k| **k == "attention").count(), 1);
        assert_eq!(kinds.iter().filter(|k| **k == "rope").count(), 2);
        assert_eq!(kinds.iter().filter(|k| **k == "rmsnorm").count(), 2);
        assert_eq!(kinds.len(), 16);
        assert!(Workload::parse("llama-block:tokens=15,seqs=2").unwrap().build(DType::F32).is_err());
    }

    /// A decode step is the block with a cache: its estimate is exact, and the presets carry
    /// the models' weights plus a cache of `2 · layers · heads_kv · batch · cache · d_head`.
    #[test]
    fn decode_workloads_read_a_cache_per_layer() {
        let w =
            Workload::parse("llama-decode:layers=2,batch=3,cache=32,d_model=8,heads_q=4,heads_kv=2,d_head=4,d_ff=16")
                .unwrap();
        let g = w.build(DType::F32).unwrap();
        let comp = g.computation();
        let kinds: Vec<&str> = comp.ops().map(|(_, op, _)| op.kind()).collect();
        assert_eq!(kinds.iter().filter(|k| **k == "cached_attention").count(), 2);
        assert_eq!(kinds.iter().filter(|k| **k == "rope_at").count(), 4);
        let e = w.estimate();
        assert_eq!((e.ops, e.nodes), (comp.ops().count(), comp.ops().count() + comp.inputs().len()));
        let operands: usize = comp.ops().map(|(_, op, _)| op.inputs().len()).sum();
        assert_eq!(e.operands, operands);
        let cache = comp.inputs().into_iter().find(|t| comp.node(t.op).unwrap().name() == "l1.v_cache").unwrap();
        assert_eq!(comp.desc(cache).unwrap().shape(), [2, 3, 32, 4]);
        let w = Workload::parse("llama3-8b-decode:layers=1").unwrap();
        assert_eq!((w.params["batch"], w.params["cache"], w.params["vocab"]), (1, 4096, 128_256));
        assert_eq!(w.build(DType::F16).unwrap().computation().ops().count(), 16 + 2);
    }
}
