//! An einsum with an elementwise epilogue: `y = stages(Σ A · B · ...)`, the contraction's
//! result going straight through a chain of unary operations and aligned binary ones
//! (`silu(x·W_gate) · up`, `h + o·W_o`) in one kernel, with no buffer for the contraction's
//! result and one launch instead of one per operation.
//!
//! # Decomposition
//! A nonlinear stage is only defined on the summed contraction, so the shardable indices
//! are the output's: a contracted index is never split and no partial output is summed.
//! The one exception is an epilogue that only adds a tensor (`h + o·W_o`, a residual):
//! `h + Σ_j p_j` is `(h + p_0) + p_1 + ...`, so every index may be split as the einsum's,
//! the function spec holding the first interval of every contracted index adds `h`, the
//! others compute their partial alone, and ⊕ = + sums them. Its output then differs from
//! the unfused pair's by the order of the sums, as any split contraction's does.
//!
//! # Numerics
//! The contraction computes what [`Einsum`]'s kernel computes, rounded to the storage
//! dtype, and the stages run as an [`ElementwiseChain`] (each rounded as its unfused
//! kernel's buffer would be): where no contracted index is split, the result equals the
//! unfused operators' bit for bit.

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::binary::BinaryOp;
use crate::common::{check_call, kernel_error};
use crate::einsum::{Einsum, Letters};
use crate::fused::{ElementwiseChain, Operand, Step};
use crate::unary::UnaryOp;

const KIND: &str = "einsum-epilogue";

/// One elementwise operation on the running result of an [`Epilogue`].
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// `op(y)`.
    Unary(UnaryOp),
    /// `op(y, t)` (or `op(t, y)` where `result_first` is false) with a tensor `t` laid out
    /// as the einsum's result: the same index names in the same order, the same extents and
    /// dtype.
    Binary {
        /// The operation.
        op: BinaryOp,
        /// The other operand's tensor.
        operand: TensorDesc,
        /// Whether the running result is the first operand.
        result_first: bool,
    },
}

/// An [`Einsum`] followed by elementwise [`Stage`]s, as one operator; see the module docs.
/// Its inputs are the einsum's, then each binary stage's operand in order.
#[derive(Clone, Debug)]
pub struct Epilogue {
    einsum: Einsum,
    stages: Vec<Stage>,
    chain: ElementwiseChain,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    shardable: Vec<ShardableIndex>,
    dims: DimIndex,
}

impl Epilogue {
    /// `stages` applied to `einsum`'s result. Fails on no stage, on an einsum of more than
    /// one output, and on a binary stage's operand not laid out as the einsum's result
    /// (naming the stage and both layouts): the stages are elementwise over one box, with no
    /// broadcast.
    pub fn new(einsum: Einsum, stages: Vec<Stage>) -> Result<Epilogue> {
        let invalid = |reason: String| Error::Invalid { op: KIND.into(), reason };
        let [y] = einsum.outputs() else {
            return Err(invalid("the einsum must have exactly one output".into()));
        };
        let y = y.clone();
        let mut inputs = einsum.inputs().to_vec();
        let mut steps = Vec::with_capacity(stages.len());
        for (i, stage) in stages.iter().enumerate() {
            let result = if i == 0 { Operand::Input(0) } else { Operand::Step(i - 1) };
            steps.push(match stage {
                Stage::Unary(op) => Step::Unary(*op, result),
                Stage::Binary { op, operand, result_first } => {
                    if *operand != y {
                        return Err(invalid(format!(
                            "stage {i} ({}): operand [{}] {} is not laid out as the einsum's result [{}] {}",
                            op.name(),
                            operand.dims_string(),
                            operand.dtype,
                            y.dims_string(),
                            y.dtype
                        )));
                    }
                    inputs.push(operand.clone());
                    let other = Operand::Input(inputs.len() - einsum.inputs().len());
                    if *result_first { Step::Binary(*op, result, other) } else { Step::Binary(*op, other, result) }
                }
            });
        }
        let extra = inputs.len() - einsum.inputs().len();
        let chain = ElementwiseChain::new(1 + extra, steps, y.dtype)
            .ok_or_else(|| invalid("an epilogue needs at least one stage".into()))?;
        // Only adding a tensor: contracted indices may be split.
        let additive = matches!(stages[..], [Stage::Binary { op: BinaryOp::Add, .. }]);
        let Letters { terms, out, names, extents } = einsum.letter_ids();
        // Shardable: every letter where the stages only add, else the output's letters.
        let letters: Vec<usize> = if additive { (0..names.len()).collect() } else { out.to_vec() };
        let shardable = letters.iter().map(|&l| ShardableIndex::any(names[l].clone(), extents[l])).collect();
        let index = |l: &usize| letters.iter().position(|x| x == l);
        let out_dims: Vec<Option<usize>> = out.iter().map(index).collect();
        let mut dims: DimIndex = terms.iter().map(|t| t.iter().map(index).collect()).collect();
        dims.extend(std::iter::repeat_n(out_dims, extra + 1));
        Ok(Epilogue { einsum, stages, chain, inputs, outputs: vec![y], shardable, dims })
    }

    /// The contraction.
    pub fn einsum(&self) -> &Einsum {
        &self.einsum
    }

    /// The stages, in order.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// The stages as one elementwise chain: input 0 the contraction's result, input `k` the
    /// `k`-th binary stage's operand (the operator's input `einsum inputs + k - 1`).
    pub fn chain(&self) -> &ElementwiseChain {
        &self.chain
    }

    /// Whether function spec `f` applies the stages: the spec holding the first interval
    /// of every contracted index (every spec where no contracted index is split). The
    /// others of an additive epilogue compute their partial alone.
    pub fn applies_stages(&self, f: &FunctionSpec) -> bool {
        let Letters { terms, out, .. } = self.einsum.letter_ids();
        terms
            .iter()
            .zip(&f.inputs)
            .all(|(term, block)| term.iter().zip(block.dims()).all(|(l, iv)| out.contains(l) || iv.lo == 0))
    }
}

impl AbstractOperator for Epilogue {
    fn kind(&self) -> &str {
        KIND
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Matmul
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    fn shardable(&self) -> Vec<ShardableIndex> {
        self.shardable.clone()
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable, &self.dims, intervals)
    }

    /// The contraction's flops, then each stage's per element of the output block.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        let n = self.einsum.inputs().len();
        let contraction = FunctionSpec { inputs: f.inputs[..n].to_vec(), outputs: f.outputs.clone() };
        let per_element: f64 = self
            .stages
            .iter()
            .map(|s| match s {
                Stage::Unary(op) => op.flops_per_element(),
                Stage::Binary { .. } => 1.0,
            })
            .sum();
        let stages = if self.applies_stages(f) { per_element * f.outputs[0].volume() as f64 } else { 0.0 };
        self.einsum.flops(&contraction) + stages
    }

    /// The input blocks the call reads (a partial of an additive epilogue that does not add
    /// reads no operand block) and the output block.
    fn bytes(&self, f: &FunctionSpec) -> f64 {
        let read = if self.applies_stages(f) { f.inputs.len() } else { self.einsum.inputs().len() };
        let blocks = f.inputs[..read].iter().zip(&self.inputs).chain(f.outputs.iter().zip(&self.outputs));
        blocks.map(|(t, d)| (t.volume() * d.dtype.size_bytes()) as f64).sum()
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let n = self.einsum.inputs().len();
        let contraction = FunctionSpec { inputs: f.inputs[..n].to_vec(), outputs: f.outputs.clone() };
        let mut result = self.einsum.compute(&contraction, &inputs[..n])?;
        if !self.applies_stages(f) {
            return Ok(result);
        }
        let mut operands = vec![result.remove(0)];
        operands.extend_from_slice(&inputs[n..]);
        let y = self.chain.compute(&operands, &f.outputs[0]).map_err(|e| kernel_error(KIND, e))?;
        Ok(vec![y])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::DType;
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole};

    use super::*;
    use crate::binary::Binary;
    use crate::unary::Unary;

    fn desc(dims: &[(&str, usize)], dtype: DType) -> TensorDesc {
        TensorDesc::of(dims, dtype).unwrap()
    }

    /// `silu(x·W) · u`, `x·W + h` and `h − x·W` fused equal the unfused operators run in
    /// turn, bit for bit, in every dtype.
    #[test]
    fn a_fused_epilogue_equals_its_operators_run_in_turn() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let (x, w) = (desc(&[("t", 12), ("d", 40)], dtype), desc(&[("d", 40), ("f", 24)], dtype));
            let y = desc(&[("t", 12), ("f", 24)], dtype);
            let einsum = Einsum::new("td,df->tf", &[x.clone(), w.clone()]).unwrap();
            let random = |d: &TensorDesc, seed| HostTensor::random(d.tensor_type(), dtype, seed);
            let (xs, ws, us) = (random(&x, 1), random(&w, 2), random(&y, 3));
            let run = |op: &dyn AbstractOperator, ins: &[HostTensor]| execute_whole(op, ins).unwrap().remove(0);
            let t = run(&einsum, &[xs.clone(), ws.clone()]);
            let cases: Vec<(Vec<Stage>, HostTensor)> = vec![
                (
                    vec![
                        Stage::Unary(UnaryOp::Silu),
                        Stage::Binary { op: BinaryOp::Mul, operand: y.clone(), result_first: true },
                    ],
                    run(
                        &Binary::new(&y, &y, BinaryOp::Mul).unwrap(),
                        &[run(&Unary::new(&y, UnaryOp::Silu).unwrap(), std::slice::from_ref(&t)), us.clone()],
                    ),
                ),
                (
                    vec![Stage::Binary { op: BinaryOp::Add, operand: y.clone(), result_first: true }],
                    run(&Binary::new(&y, &y, BinaryOp::Add).unwrap(), &[t.clone(), us.clone()]),
                ),
                (
                    vec![Stage::Binary { op: BinaryOp::Sub, operand: y.clone(), result_first: false }],
                    run(&Binary::new(&y, &y, BinaryOp::Sub).unwrap(), &[us.clone(), t.clone()]),
                ),
            ];
            for (stages, want) in cases {
                let fused = Epilogue::new(einsum.clone(), stages.clone()).unwrap();
                let mut ins = vec![xs.clone(), ws.clone()];
                ins.extend(std::iter::repeat_n(us.clone(), fused.inputs().len() - 2));
                assert_eq!(run(&fused, &ins), want, "{dtype} {stages:?}");
            }
        }
    }

    /// Every spec for 4 devices computes the whole result: a residual add's may split the
    /// contracted index (the first part adds the residual once), a SiLU's may not.
    #[test]
    fn every_spec_computes_the_whole_result() {
        let (x, w) = (desc(&[("t", 8), ("d", 16)], DType::F32), desc(&[("d", 16), ("f", 12)], DType::F32));
        let y = desc(&[("t", 8), ("f", 12)], DType::F32);
        let einsum = Einsum::new("td,df->tf", &[x, w]).unwrap();
        let add = Epilogue::new(
            einsum.clone(),
            vec![Stage::Binary { op: BinaryOp::Add, operand: y.clone(), result_first: false }],
        )
        .unwrap();
        let silu = Epilogue::new(einsum, vec![Stage::Unary(UnaryOp::Silu)]).unwrap();
        assert_eq!(add.shardable().len(), 3);
        assert_eq!(silu.shardable().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["t", "f"]);
        let specs = enumerate_specs(&add, 4).unwrap();
        let split_d = |s: &JoinAggSpec| s.functions.iter().any(|f| f.inputs[0].dim(1).len() < 16);
        assert!(specs.iter().any(|c| split_d(&c.spec)), "a residual add's contraction may be split");
        for c in &specs {
            assert!(decomposition_error(&add, &c.spec, 7).unwrap() < 1e-5);
        }
        for c in &enumerate_specs(&silu, 4).unwrap() {
            assert!(decomposition_error(&silu, &c.spec, 7).unwrap() < 1e-6);
        }
    }

    /// Adding the residual in every part of a split contraction (as a wrong epilogue would)
    /// is caught by the decomposition check: the check can fail.
    #[test]
    fn a_residual_added_by_every_part_is_caught() {
        let (x, w) = (desc(&[("t", 8), ("d", 16)], DType::F32), desc(&[("d", 16), ("f", 12)], DType::F32));
        let y = desc(&[("t", 8), ("f", 12)], DType::F32);
        let einsum = Einsum::new("td,df->tf", &[x, w]).unwrap();
        let add =
            Epilogue::new(einsum, vec![Stage::Binary { op: BinaryOp::Add, operand: y, result_first: true }]).unwrap();
        let spec = add
            .join_agg_spec(&[
                vec![Interval::full(8)],
                vec![Interval { lo: 0, hi: 8 }, Interval { lo: 8, hi: 16 }],
                vec![Interval::full(12)],
            ])
            .unwrap();
        /// The epilogue whose every part adds the residual.
        #[derive(Debug)]
        struct Everywhere(Epilogue);
        impl AbstractOperator for Everywhere {
            fn kind(&self) -> &str {
                "wrong"
            }
            fn kernel_class(&self) -> KernelClass {
                KernelClass::Matmul
            }
            fn inputs(&self) -> &[TensorDesc] {
                self.0.inputs()
            }
            fn outputs(&self) -> &[TensorDesc] {
                self.0.outputs()
            }
            fn shardable(&self) -> Vec<ShardableIndex> {
                self.0.shardable()
            }
            fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
                self.0.join_agg_spec(intervals)
            }
            fn flops(&self, f: &FunctionSpec) -> f64 {
                self.0.flops(f)
            }
            fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
                let contraction = FunctionSpec { inputs: f.inputs[..2].to_vec(), outputs: f.outputs.clone() };
                let t = self.0.einsum().compute(&contraction, &inputs[..2])?.remove(0);
                Ok(vec![self.0.chain().compute(&[t, inputs[2].clone()], &f.outputs[0]).unwrap()])
            }
        }
        assert!(decomposition_error(&add, &spec, 3).unwrap() < 1e-5);
        assert!(decomposition_error(&Everywhere(add), &spec, 3).unwrap() > 1e-2);
    }

    #[test]
    fn a_misaligned_operand_or_no_stage_is_refused() {
        let (x, w) = (desc(&[("t", 8), ("d", 16)], DType::F32), desc(&[("d", 16), ("f", 12)], DType::F32));
        let einsum = Einsum::new("td,df->tf", &[x, w]).unwrap();
        let transposed = desc(&[("f", 12), ("t", 8)], DType::F32);
        let stage = Stage::Binary { op: BinaryOp::Add, operand: transposed, result_first: true };
        let e = Epilogue::new(einsum.clone(), vec![stage]).unwrap_err().to_string();
        assert!(e.contains("stage 0 (add): operand [f=12, t=8]") && e.contains("not laid out"), "{e}");
        assert!(Epilogue::new(einsum, Vec::new()).unwrap_err().to_string().contains("at least one stage"));
    }
}
