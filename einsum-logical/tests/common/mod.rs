//! Shared by the integration tests that build LLaMA-shaped computations by hand.

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, Computation, TensorId};
use einsum_ops::einsum::Einsum;

/// Builds a computation operator by operator, naming each after its role; inputs take
/// `dtype`.
pub struct Builder {
    pub comp: Computation,
    pub dtype: DType,
}

impl Builder {
    pub fn new(dtype: DType) -> Self {
        Builder { comp: Computation::new(), dtype }
    }

    pub fn input(&mut self, name: &str, dims: &[(&str, usize)]) -> TensorId {
        self.comp.add_input(name, TensorDesc::of(dims, self.dtype).unwrap())
    }

    pub fn desc(&self, t: TensorId) -> TensorDesc {
        self.comp.desc(t).unwrap().clone()
    }

    pub fn op(&mut self, name: &str, op: impl AbstractOperator + 'static, args: &[TensorId]) -> TensorId {
        self.comp.add_op(name, Box::new(op), args).unwrap()[0]
    }

    pub fn einsum(&mut self, name: &str, eq: &str, args: &[TensorId]) -> TensorId {
        let descs: Vec<TensorDesc> = args.iter().map(|&t| self.desc(t)).collect();
        self.op(name, Einsum::new(eq, &descs).unwrap(), args)
    }
}
