//! Token embedding: a lookup of rows of a table by index,
//! `y[t.., d..] = table[ids[t..], d..]`, as `torch.nn.Embedding` computes it.
//!
//! Three ways to split it, each a grid over one kind of index:
//! - the ids' indices (tokens): each block looks up its own tokens in the whole table;
//! - the table's other indices (`d_model`): each block reads a slice of every row;
//! - the vocabulary: each block holds a range of the table's rows and looks up only the ids
//!   that fall in it, writing zeros for the others, and the partial results are summed
//!   (Megatron's vocabulary-parallel embedding). Exactly one block holds each id, so the sum
//!   adds zeros to the looked-up row and is exact in every dtype.
//!
//! An id outside `0..vocab` is an error naming its position and value, whatever the split.

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::common::{check_call, every_index, kernel_error};

const KIND: &str = "embedding";

/// Rows of `table` looked up by the indices in `ids`: the output has `ids`' indices, then
/// the table's indices other than the vocabulary, in the table's order, and the table's
/// dtype.
#[derive(Clone, Debug)]
pub struct Embedding {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    vocab_axis: usize,
}

impl Embedding {
    /// The lookup of `ids` (i32) in `table`, whose rows are indexed by `vocab`.
    ///
    /// Errors name the offending index: `table` without `vocab`, an index of `ids` the table
    /// also has, or a table of one index only; `ids` not i32 or `table` not floating point is
    /// [`Error::Invalid`].
    pub fn new(table: &TensorDesc, ids: &TensorDesc, vocab: &str) -> Result<Embedding> {
        let shape = |index: &str, reason: String| Error::Shape { op: KIND.into(), index: index.into(), reason };
        let invalid = |reason: String| Error::Invalid { op: KIND.into(), reason };
        let vocab_axis = table
            .position(vocab)
            .ok_or_else(|| shape(vocab, format!("not an index of the table [{}]", table.dims_string())))?;
        if ids.dtype != einsum_core::DType::I32 {
            return Err(invalid(format!("the ids [{}] must be i32, not {}", ids.dims_string(), ids.dtype)));
        }
        if !table.dtype.is_float() {
            return Err(invalid(format!("the table [{}] must be floating point", table.dims_string())));
        }
        if table.rank() < 2 {
            return Err(shape(vocab, "the table needs an index besides the vocabulary".into()));
        }
        if let Some(d) = ids.dims.iter().find(|d| table.position(&d.name).is_some()) {
            return Err(shape(&d.name, "an index of both the ids and the table".into()));
        }
        let dims =
            ids.dims.iter().chain(table.dims.iter().enumerate().filter(|(a, _)| *a != vocab_axis).map(|(_, d)| d));
        let y = TensorDesc::new(dims.cloned().collect(), table.dtype)?;
        Ok(Embedding { inputs: vec![table.clone(), ids.clone()], outputs: vec![y], vocab_axis })
    }

    /// The name of the vocabulary index.
    pub fn vocab(&self) -> &str {
        &self.inputs[0].dims[self.vocab_axis].name
    }

    /// The vocabulary's extent (every id lies below it).
    pub fn vocab_size(&self) -> usize {
        self.inputs[0].dims[self.vocab_axis].extent
    }
}

impl AbstractOperator for Embedding {
    fn kind(&self) -> &str {
        KIND
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Copy
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    /// The ids are input 1.
    fn index_bound(&self, input: usize) -> Option<usize> {
        (input == 1).then(|| self.vocab_size())
    }

    /// The output's indices (the ids', then the table's others), then the vocabulary.
    fn shardable(&self) -> Vec<ShardableIndex> {
        let vocab = &self.inputs[0].dims[self.vocab_axis];
        let mut indices = every_index(&self.outputs[0]);
        indices.push(ShardableIndex::any(vocab.name.clone(), vocab.extent));
        indices
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let (table, ids, y) = (&self.inputs[0], &self.inputs[1], &self.outputs[0]);
        let vocab = y.rank();
        let position = |name: &str| y.position(name).expect("the output holds every index but the vocabulary");
        let table_dims = table
            .dims
            .iter()
            .enumerate()
            .map(|(a, d)| Some(if a == self.vocab_axis { vocab } else { position(&d.name) }));
        let dims: DimIndex = vec![
            table_dims.collect(),
            ids.dims.iter().map(|d| Some(position(&d.name))).collect(),
            (0..y.rank()).map(Some).collect(),
        ];
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// None: a lookup moves bytes.
    fn flops(&self, _: &FunctionSpec) -> f64 {
        0.0
    }

    /// Converts only the rows the ids look up (a view of the table block per token), never
    /// the whole table.
    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let (table, ids, y) = (&f.inputs[0], &f.inputs[1], &f.outputs[0]);
        let rows = table.dim(self.vocab_axis);
        // A row: the table block's other indices' box, row-major (the output's order).
        let width: usize = (0..table.rank()).filter(|&a| a != self.vocab_axis).map(|a| table.dim(a).len()).product();
        let mut out = vec![0.0f32; y.volume()];
        for (t, &id) in inputs[1].to_i32().iter().enumerate() {
            if id < 0 || id as usize >= self.vocab_size() {
                let at = position_of(ids, t);
                return Err(kernel_error(
                    KIND,
                    format!("id {id} at {at:?} of the ids is outside the vocabulary 0..{}", self.vocab_size()),
                ));
            }
            let id = id as usize;
            if (rows.lo..rows.hi).contains(&id) {
                let mut row = table.dims().to_vec();
                row[self.vocab_axis] = Interval { lo: id, hi: id + 1 };
                let row = inputs[0].view(&TensorType::from_intervals(row))?.to_f32();
                out[t * width..][..width].copy_from_slice(&row);
            }
        }
        Ok(vec![HostTensor::from_f32(y.clone(), self.outputs[0].dtype, out)?])
    }
}

/// The absolute index vector of the `i`th element (row-major) of `ty`.
fn position_of(ty: &TensorType, mut i: usize) -> Vec<usize> {
    let shape = ty.shape();
    let mut at = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        at[d] = ty.dim(d).lo + i % shape[d].max(1);
        i /= shape[d].max(1);
    }
    at
}

#[cfg(test)]
mod tests {
    use einsum_core::DType;
    use einsum_joinagg::{Computation, decomposition_error, enumerate_specs, execute_whole};

    use super::*;
    use crate::unary::{Unary, UnaryOp};

    fn descs(vocab: usize, d: usize, tokens: usize, dtype: DType) -> (TensorDesc, TensorDesc) {
        let table = TensorDesc::of(&[("vocab", vocab), ("d_model", d)], dtype).unwrap();
        let ids = TensorDesc::of(&[("tokens", tokens)], DType::I32).unwrap();
        (table, ids)
    }

    #[test]
    fn looks_up_rows_as_torch_embedding_does() {
        let (table, ids) = descs(5, 3, 4, DType::F32);
        let op = Embedding::new(&table, &ids, "vocab").unwrap();
        assert_eq!(op.outputs()[0].dims_string(), "tokens=4, d_model=3");
        let t = HostTensor::from_f32(table.tensor_type(), DType::F32, (0..15).map(|x| x as f32).collect()).unwrap();
        let i = HostTensor::from_i32(ids.tensor_type(), vec![4, 0, 2, 4]).unwrap();
        let y = execute_whole(&op, &[t, i]).unwrap();
        assert_eq!(y[0].to_f32(), [12.0, 13.0, 14.0, 0.0, 1.0, 2.0, 6.0, 7.0, 8.0, 12.0, 13.0, 14.0]);
    }

    /// Every spec on 1 to 4 devices (by tokens, by d_model, by vocabulary with summed
    /// partials, and mixes) equals the whole lookup exactly, in f32 and bf16, with the table's
    /// vocabulary in the middle of its indices too.
    #[test]
    fn every_spec_equals_the_whole_lookup() {
        for dtype in [DType::F32, DType::BF16] {
            let layouts = [
                TensorDesc::of(&[("vocab", 11), ("d_model", 6)], dtype).unwrap(),
                TensorDesc::of(&[("heads", 2), ("vocab", 11), ("d_head", 3)], dtype).unwrap(),
            ];
            for table in layouts {
                let ids = TensorDesc::of(&[("seqs", 2), ("tokens", 5)], DType::I32).unwrap();
                let op = Embedding::new(&table, &ids, "vocab").unwrap();
                for p in 1..=4 {
                    for (seed, choice) in enumerate_specs(&op, p).unwrap().iter().enumerate() {
                        let err = decomposition_error(&op, &choice.spec, seed as u64).unwrap();
                        assert_eq!(err, 0.0, "{dtype} {} p = {p} {:?}", table.dims_string(), choice.counts);
                    }
                }
            }
        }
    }

    #[test]
    fn an_id_outside_the_vocabulary_is_an_error_naming_it() {
        let (table, ids) = descs(5, 3, 3, DType::F32);
        let op = Embedding::new(&table, &ids, "vocab").unwrap();
        let t = HostTensor::random(table.tensor_type(), DType::F32, 1);
        for bad in [5, -1] {
            let i = HostTensor::from_i32(ids.tensor_type(), vec![0, bad, 1]).unwrap();
            let e = execute_whole(&op, &[t.clone(), i]).unwrap_err().to_string();
            assert!(e.contains(&format!("id {bad} at [1]")) && e.contains("0..5"), "{e}");
        }
    }

    #[test]
    fn malformed_lookups_are_refused_naming_the_index() {
        let (table, ids) = descs(5, 3, 3, DType::F32);
        let e = Embedding::new(&table, &ids, "vocabulary").unwrap_err().to_string();
        assert!(e.contains("vocabulary"), "{e}");
        let float_ids = TensorDesc::of(&[("tokens", 3)], DType::F32).unwrap();
        assert!(Embedding::new(&table, &float_ids, "vocab").unwrap_err().to_string().contains("i32"));
        let clash = TensorDesc::of(&[("d_model", 3)], DType::I32).unwrap();
        assert!(Embedding::new(&table, &clash, "vocab").unwrap_err().to_string().contains("d_model"));
    }

    /// A computation refuses indices given to an operator that computes on values, and draws
    /// random ids below the vocabulary for the embedding.
    #[test]
    fn indices_reach_only_the_operators_that_take_them() {
        let (table, ids) = descs(7, 3, 50, DType::F32);
        let mut c = Computation::new();
        let (t, i) = (c.add_input("table", table.clone()), c.add_input("ids", ids.clone()));
        let relu = Unary::new(&ids, UnaryOp::Relu).unwrap();
        let e = c.add_op("relu", Box::new(relu), &[i]).unwrap_err().to_string();
        assert!(e.contains("i32") && e.contains("floating-point"), "{e}");
        let y = c.add_op("embed", Box::new(Embedding::new(&table, &ids, "vocab").unwrap()), &[t, i]).unwrap();
        c.save(y[0]).unwrap();
        let values = c.random_inputs(3)[&i].to_i32();
        assert!(values.iter().all(|&v| (0..7).contains(&v)) && values.iter().any(|&v| v > 0), "{values:?}");
    }
}
