//! Overwriting part of a tensor: [`HostTensor::overwrite`], copy-on-write.

use std::sync::Arc;

use super::{Block, HostTensor, copy_elems, mismatch};
use crate::Result;

impl HostTensor {
    /// Writes the elements of `part` into this tensor where `part` lies; every other element
    /// keeps its value. `part`'s type must be a projection of this tensor's
    /// ([`CoreError::NotAProjection`](crate::CoreError::NotAProjection) otherwise) and its
    /// dtype this tensor's ([`CoreError::TensorMismatch`](crate::CoreError::TensorMismatch)).
    ///
    /// Copy-on-write: the elements are written in place when this tensor is the only reader
    /// of its block and the block is exactly its own (compact, on the heap). Otherwise (a
    /// clone or a view shares the block, this tensor is a view of a larger one, or its memory
    /// is lent by a backend that wants it back) it first becomes a compact copy of its own,
    /// so that no other tensor sees the write. Only the first overwrite may thus copy the
    /// whole tensor; later ones cost the part alone, which is how a key-value cache gets one
    /// new row per generated token.
    pub fn overwrite(&mut self, part: &HostTensor) -> Result<()> {
        part.ty.check_projection_of(&self.ty)?;
        if part.dtype() != self.dtype() {
            return Err(mismatch("overwrite", self, part));
        }
        if part.is_empty() {
            return Ok(());
        }
        let own = self.ty == self.data.frame && !self.is_lent();
        let src = (part.data.storage.elems(), &part.data.frame);
        if let Some(Block { frame, storage }) = Arc::get_mut(&mut self.data).filter(|_| own) {
            // Nothing else reads the block, so `part` is not a view of it either.
            copy_elems(src.0, src.1, storage.elems_mut(), frame, &part.ty);
        } else {
            // `part` may read the old block (a view of this tensor): it is read before the
            // new block replaces it.
            let mut storage = self.gathered();
            copy_elems(src.0, src.1, storage.elems_mut(), &self.ty, &part.ty);
            self.data = Arc::new(Block { frame: self.ty.clone(), storage });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{CoreError, DType, HostTensor, TensorType};

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    /// Every index of `ty`, row-major.
    fn indices(ty: &TensorType) -> Vec<Vec<usize>> {
        let mut all = vec![vec![]];
        for d in ty.dims() {
            all =
                all.into_iter().flat_map(|i: Vec<usize>| (d.lo..d.hi).map(move |x| [&i[..], &[x]].concat())).collect();
        }
        all
    }

    /// `whole` overwritten by `part` holds `part`'s elements where it lies and `before`'s
    /// elsewhere.
    fn assert_overwritten(whole: &HostTensor, before: &HostTensor, part: &HostTensor) {
        for i in indices(whole.ty()) {
            let want = if part.ty().contains(&i) { part.get(&i) } else { before.get(&i) };
            assert_eq!(whole.get(&i).map(f32::to_bits), want.map(f32::to_bits), "at {i:?}");
        }
    }

    /// One row of the middle dimension of a 3-D tensor (a strided part: a run of the last
    /// dimension in every outer index), a box inside, and the whole, in every dtype.
    #[test]
    fn a_part_replaces_exactly_its_elements_in_every_dtype() {
        let ty = tt(&[0, 0, 0], &[3, 4, 5]);
        let parts = [tt(&[0, 2, 0], &[3, 3, 5]), tt(&[1, 1, 2], &[3, 4, 4]), ty.clone(), tt(&[2, 3, 4], &[3, 4, 5])];
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            for (seed, p) in parts.iter().enumerate() {
                let before = HostTensor::random(ty.clone(), dtype, 1);
                let part = HostTensor::random(p.clone(), dtype, 100 + seed as u64);
                let mut t = before.compact_in(None).unwrap();
                t.overwrite(&part).unwrap();
                assert_overwritten(&t, &before, &part);
            }
        }
    }

    /// A tensor with non-zero lower bounds takes a part at its absolute position, and a part
    /// that is itself a strided view of another tensor is read through its frame.
    #[test]
    fn absolute_positions_and_strided_sources() {
        let ty = tt(&[2, 10], &[6, 16]);
        let before = HostTensor::random(ty.clone(), DType::F32, 5);
        let source = HostTensor::random(tt(&[0, 0], &[8, 20]), DType::F32, 6);
        let part = source.view(&tt(&[3, 11], &[5, 13])).unwrap();
        assert!(!part.is_contiguous());
        let mut t = before.clone();
        t.overwrite(&part).unwrap();
        assert_overwritten(&t, &before, &part);
    }

    /// The tensor a clone or a view shares elements with is not modified through the
    /// overwritten one, nor the other way round; a tensor overwritten with a view of
    /// itself keeps its values.
    #[test]
    fn tensors_sharing_the_elements_are_not_modified() {
        let ty = tt(&[0, 0, 0], &[3, 4, 5]);
        let original = HostTensor::random(ty.clone(), DType::F32, 2);
        let snapshot = original.compact_in(None).unwrap();
        let row = tt(&[0, 1, 0], &[3, 2, 5]);
        let part = HostTensor::random(row.clone(), DType::F32, 3);

        let mut copy = original.clone();
        copy.overwrite(&part).unwrap();
        assert_eq!(original, snapshot);
        assert!(!copy.shares_elements(&original));
        assert_overwritten(&copy, &original, &part);

        let mut view = original.view(&tt(&[1, 0, 0], &[3, 4, 5])).unwrap();
        let inner = HostTensor::random(tt(&[1, 1, 0], &[3, 2, 5]), DType::F32, 4);
        view.overwrite(&inner).unwrap();
        assert_eq!(original, snapshot);
        assert_overwritten(&view, &original.slice(view.ty()).unwrap(), &inner);

        let mut same = original.clone();
        same.overwrite(&original.view(&row).unwrap()).unwrap();
        assert_eq!(same, snapshot);
    }

    /// A tensor that owns its compact block is written in place; a shared one is copied
    /// once, and written in place from then on.
    #[test]
    fn only_the_first_overwrite_of_a_shared_tensor_copies() {
        let ty = tt(&[0, 0], &[4, 6]);
        let at = |x: &HostTensor| x.as_f32().unwrap().as_ptr();
        let mut own = HostTensor::random(ty.clone(), DType::F32, 1);
        let before = at(&own);
        own.overwrite(&HostTensor::random(tt(&[1, 2], &[3, 4]), DType::F32, 2)).unwrap();
        assert_eq!(at(&own), before);

        let shared = HostTensor::random(ty.clone(), DType::F32, 3);
        let mut t = shared.clone();
        t.overwrite(&HostTensor::random(tt(&[0, 0], &[1, 6]), DType::F32, 4)).unwrap();
        let copied = at(&t);
        assert_ne!(copied, at(&shared));
        t.overwrite(&HostTensor::random(tt(&[3, 0], &[4, 6]), DType::F32, 5)).unwrap();
        assert_eq!(at(&t), copied);
    }

    /// A part outside the tensor, of another rank or of another dtype is a typed error and
    /// leaves the tensor as it was.
    #[test]
    fn a_part_outside_or_of_another_dtype_is_refused() {
        let t = HostTensor::random(tt(&[0, 0], &[4, 6]), DType::F16, 1);
        let mut u = t.clone();
        let outside = HostTensor::random(tt(&[3, 0], &[5, 6]), DType::F16, 2);
        assert!(matches!(u.overwrite(&outside), Err(CoreError::NotAProjection { .. })));
        let rank = HostTensor::random(tt(&[0], &[4]), DType::F16, 2);
        assert!(matches!(u.overwrite(&rank), Err(CoreError::NotAProjection { .. })));
        let dtype = HostTensor::random(tt(&[0, 0], &[1, 6]), DType::F32, 2);
        assert!(matches!(u.overwrite(&dtype), Err(CoreError::TensorMismatch { op: "overwrite", .. })));
        assert!(u == t && u.shares_elements(&t));
    }
}
