//! Input slots: the computation inputs a prepared executable expects (the task graph's input
//! boundary) and which of them are loaded.
//!
//! Inputs are loaded once and stay resident (see [`crate::resident`]); a run needs every
//! input loaded. Both checks live here so the GPU executable and the host emulator
//! ([`crate::emulate`]) refuse the same things with the same typed errors.

use einsum_core::taskgraph::Boundary;
use einsum_core::{BackendError, HostTensor};

use crate::resident::ResidentPlan;

/// The declared inputs and which are loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSlots {
    boundaries: Vec<Boundary>,
    loaded: Vec<bool>,
}

impl InputSlots {
    /// Slots for `boundaries` (the task graph's inputs, in order), none loaded.
    pub fn new(boundaries: &[Boundary]) -> InputSlots {
        InputSlots { boundaries: boundaries.to_vec(), loaded: vec![false; boundaries.len()] }
    }

    /// Number of inputs.
    pub fn len(&self) -> usize {
        self.boundaries.len()
    }

    /// True when the computation has no input.
    pub fn is_empty(&self) -> bool {
        self.boundaries.is_empty()
    }

    /// Whether input `input` is loaded.
    pub fn is_loaded(&self, input: usize) -> bool {
        self.loaded.get(input).copied().unwrap_or(false)
    }

    fn error(&self, index: usize, reason: String) -> BackendError {
        let name = self.boundaries.get(index).map_or_else(String::new, |b| b.name.clone());
        BackendError::Input { index, name, reason }
    }

    /// Checks that `value` may be loaded as input `input`: the input exists and `value` has
    /// its type and dtype.
    pub fn check(&self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        let Some(b) = self.boundaries.get(input) else {
            return Err(self.error(input, format!("no such input: the graph has {}", self.len())));
        };
        if *value.ty() != b.ty || value.dtype() != b.dtype {
            return Err(
                self.error(input, format!("expected {} {}, got {} {}", b.ty, b.dtype, value.ty(), value.dtype()))
            );
        }
        Ok(())
    }

    /// Checks that `part` may be written into input `input`: the input exists, `part`'s type
    /// lies in its type and its dtype is the input's; and that the input is loaded
    /// ([`BackendError::NotLoaded`] otherwise).
    pub fn check_part(&self, input: usize, part: &HostTensor) -> Result<(), BackendError> {
        let Some(b) = self.boundaries.get(input) else {
            return Err(self.error(input, format!("no such input: the graph has {}", self.len())));
        };
        if !part.ty().is_projection_of(&b.ty) || part.dtype() != b.dtype {
            return Err(self
                .error(input, format!("expected a part of {} {}, got {} {}", b.ty, b.dtype, part.ty(), part.dtype())));
        }
        if !self.is_loaded(input) {
            return Err(BackendError::NotLoaded { index: input, name: b.name.clone() });
        }
        Ok(())
    }

    /// Checks that `given` values are one per input (for loading them all at once).
    pub fn check_count(&self, given: usize) -> Result<(), BackendError> {
        if given == self.len() {
            return Ok(());
        }
        Err(self.error(given.min(self.len()), format!("{given} inputs given, the graph has {}", self.len())))
    }

    /// Marks input `input` loaded (or not, while its upload is in progress).
    pub fn set_loaded(&mut self, input: usize, loaded: bool) {
        self.loaded[input] = loaded;
    }

    /// Loads input `input`: checks `value` against it, then hands every block of `plan` the
    /// input has to `write(gpu, offset, bytes)`. The input counts as loaded only once every
    /// block is written, so a failed upload leaves it unloaded. The executable and its
    /// emulator share this sequence and differ only in `write`.
    pub fn load(
        &mut self,
        plan: &ResidentPlan,
        input: usize,
        value: &HostTensor,
        mut write: impl FnMut(usize, usize, &[u8]) -> Result<(), String>,
    ) -> Result<(), BackendError> {
        self.check(input, value)?;
        self.set_loaded(input, false);
        let upload_error =
            |reason: String| BackendError::Device { operation: format!("loading input {input}"), reason };
        for upload in plan.uploads(input, value) {
            let (gpu, offset, bytes) = upload.map_err(upload_error)?;
            write(gpu, offset, &bytes).map_err(upload_error)?;
        }
        self.set_loaded(input, true);
        Ok(())
    }

    /// Overwrites the elements of loaded input `input` that `part` covers: checks `part`
    /// ([`check_part`](Self::check_part)), then hands every contiguous run of every resident
    /// block's intersection with it ([`ResidentPlan::writes`]) to `write(gpu, offset, bytes)`,
    /// the closure loading uses, so the bytes moved are the part's on each block holding it.
    /// A failed copy leaves the input not loaded: its blocks may then disagree. The
    /// executable and its emulator share this sequence and differ only in `write`.
    pub fn write(
        &mut self,
        plan: &ResidentPlan,
        input: usize,
        part: &HostTensor,
        mut write: impl FnMut(usize, usize, &[u8]) -> Result<(), String>,
    ) -> Result<(), BackendError> {
        self.check_part(input, part)?;
        self.set_loaded(input, false);
        let write_error = |reason: String| BackendError::Device { operation: format!("writing input {input}"), reason };
        for run in plan.writes(input, part) {
            let (gpu, offset, bytes) = run.map_err(write_error)?;
            write(gpu, offset, &bytes).map_err(write_error)?;
        }
        self.set_loaded(input, true);
        Ok(())
    }

    /// Loads every input (`inputs` in the task graph's order), as [`load`](Self::load) does.
    pub fn load_all(
        &mut self,
        plan: &ResidentPlan,
        inputs: &[HostTensor],
        mut write: impl FnMut(usize, usize, &[u8]) -> Result<(), String>,
    ) -> Result<(), BackendError> {
        self.check_count(inputs.len())?;
        for (i, x) in inputs.iter().enumerate() {
            self.load(plan, i, x, &mut write)?;
        }
        Ok(())
    }

    /// Checks that every input is loaded, naming the first one that is not.
    pub fn require_all(&self) -> Result<(), BackendError> {
        match self.loaded.iter().position(|l| !l) {
            None => Ok(()),
            Some(i) => Err(self.error(i, "not loaded: load it before running".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, TensorType};

    use super::*;

    fn slots() -> InputSlots {
        let b = |n: &str, dims: &[usize]| Boundary {
            name: n.into(),
            ty: TensorType::zero_bounded(dims),
            dtype: DType::F16,
        };
        InputSlots::new(&[b("x", &[2, 3]), b("w", &[3])])
    }

    #[test]
    fn the_first_input_not_loaded_is_named() {
        let mut s = slots();
        let err = s.require_all().unwrap_err();
        assert!(matches!(&err, BackendError::Input { index: 0, name, .. } if name == "x"), "{err}");
        s.set_loaded(0, true);
        let err = s.require_all().unwrap_err();
        assert!(matches!(&err, BackendError::Input { index: 1, name, .. } if name == "w"), "{err}");
        s.set_loaded(1, true);
        assert!(s.require_all().is_ok());
    }

    #[test]
    fn a_value_of_another_type_dtype_or_slot_is_refused() {
        let s = slots();
        let ok = HostTensor::random(TensorType::zero_bounded(&[3]), DType::F16, 1);
        assert!(s.check(1, &ok).is_ok());
        let shape = HostTensor::random(TensorType::zero_bounded(&[4]), DType::F16, 1);
        let err = s.check(1, &shape).unwrap_err().to_string();
        assert!(err.contains("`w`") && err.contains("expected"), "{err}");
        let dtype = HostTensor::random(TensorType::zero_bounded(&[3]), DType::F32, 1);
        assert!(s.check(1, &dtype).is_err());
        assert!(matches!(s.check(2, &ok), Err(BackendError::Input { index: 2, .. })));
        assert!(s.check_count(1).is_err() && s.check_count(2).is_ok());
    }

    #[test]
    fn a_part_of_another_type_dtype_or_slot_or_unloaded_is_refused() {
        let mut s = slots();
        let row = HostTensor::random(TensorType::new(&[1, 0], &[2, 3]).unwrap(), DType::F16, 1);
        assert!(matches!(s.check_part(0, &row), Err(BackendError::NotLoaded { index: 0, .. })));
        s.set_loaded(0, true);
        assert!(s.check_part(0, &row).is_ok());
        let outside = HostTensor::random(TensorType::new(&[1, 0], &[3, 3]).unwrap(), DType::F16, 1);
        let err = s.check_part(0, &outside).unwrap_err().to_string();
        assert!(err.contains("`x`") && err.contains("expected a part of"), "{err}");
        assert!(matches!(s.check_part(0, &row.cast(DType::F32)), Err(BackendError::Input { index: 0, .. })));
        assert!(matches!(s.check_part(2, &row), Err(BackendError::Input { index: 2, .. })));
    }
}
