//! Where an executable's inputs go: the user loads and writes the written graph's inputs by
//! their handles, while the backend holds the inputs of the form planned ([`crate::rewrite`]).
//! Most are the same input in both; a form that merges projections has instead one input per
//! merged weight, the concatenation of the user's weights along one axis ([`Derived`]), which
//! is built here on the host once every part is loaded, so that a merge costs nothing per run.
//! A part loaded or written after that is written into the merged input in place.

use einsum_core::{DType, HostTensor, Interval, Prepared, TensorType};
use einsum_joinagg::{Computation, Node};

use crate::rewrite::Derived;
use crate::{Error, Result};

/// Where each written input goes, and the form's derived inputs.
#[derive(Debug)]
pub(super) struct Binding {
    /// Per input of the written graph, in its order.
    to: Vec<Bound>,
    /// The form's derived inputs.
    derived: Vec<DerivedSlot>,
}

/// Where one written input goes.
#[derive(Debug, Clone, Copy)]
enum Bound {
    /// The form's input in this slot.
    Slot(usize),
    /// Part `part` of derived input `derived`.
    Part { derived: usize, part: usize },
}

/// A derived input of the form.
#[derive(Debug)]
struct DerivedSlot {
    /// The backend's slot.
    slot: usize,
    /// Its name.
    name: String,
    /// The axis its parts are concatenated along, and where each part starts on it.
    axis: usize,
    offsets: Vec<usize>,
    ty: TensorType,
    dtype: DType,
    /// Whether the backend holds it.
    loaded: bool,
    /// The parts' values until every part is loaded and the input is built.
    pending: Vec<Option<HostTensor>>,
}

impl Binding {
    /// The binding of `written`'s inputs to `form`'s, whose inputs are the written graph's
    /// (by name) and `derived`.
    pub(super) fn new(written: &Computation, form: &Computation, derived: &[Derived]) -> Result<Self> {
        let name = |c: &Computation, t: einsum_joinagg::TensorId| match c.node(t.op) {
            Some(Node::Input { name, .. }) => name.clone(),
            _ => String::new(),
        };
        let form_inputs: Vec<String> = form.inputs().into_iter().map(|t| name(form, t)).collect();
        let slot_of = |n: &str| {
            form_inputs.iter().position(|f| f == n).ok_or_else(|| {
                Error::Usage(format!("the form planned has no input `{n}`, so the graph's inputs cannot be bound"))
            })
        };
        let mut slots: Vec<DerivedSlot> = Vec::new();
        for d in derived {
            let descs: Vec<&einsum_core::TensorDesc> =
                d.parts.iter().map(|t| written.desc(*t)).collect::<std::result::Result<_, _>>()?;
            let mut offsets = Vec::new();
            let mut at = 0;
            for desc in &descs {
                offsets.push(at);
                at += desc.dims.get(d.axis).map_or(0, |x| x.extent);
            }
            let mut shape = descs.first().map(|x| x.shape()).unwrap_or_default();
            if let Some(e) = shape.get_mut(d.axis) {
                *e = at;
            }
            slots.push(DerivedSlot {
                slot: slot_of(&d.name)?,
                name: d.name.clone(),
                axis: d.axis,
                offsets,
                ty: TensorType::zero_bounded(&shape),
                dtype: descs.first().map_or(DType::F32, |x| x.dtype),
                loaded: false,
                pending: vec![None; d.parts.len()],
            });
        }
        let to = written
            .inputs()
            .into_iter()
            .map(|t| {
                let part =
                    derived.iter().enumerate().find_map(|(i, d)| d.parts.iter().position(|p| *p == t).map(|j| (i, j)));
                match part {
                    Some((derived, part)) => Ok(Bound::Part { derived, part }),
                    None => slot_of(&name(written, t)).map(Bound::Slot),
                }
            })
            .collect::<Result<_>>()?;
        Ok(Binding { to, derived: slots })
    }

    /// The backend's slot of written input `input`, where the form has it as it is.
    pub(super) fn slot(&self, input: usize) -> Option<usize> {
        match self.to[input] {
            Bound::Slot(s) => Some(s),
            Bound::Part { .. } => None,
        }
    }

    /// The merged input that written input `input` is a part of, by name.
    pub(super) fn merged_into(&self, input: usize) -> Option<&str> {
        match self.to[input] {
            Bound::Slot(_) => None,
            Bound::Part { derived, .. } => Some(&self.derived[derived].name),
        }
    }

    /// Hands the whole `value` of written input `input` to `prepared`: as it is, or as its
    /// part of a derived input (held until every part is loaded, then built and loaded; once
    /// loaded, written in place).
    pub(super) fn load(&mut self, prepared: &mut dyn Prepared, input: usize, value: &HostTensor) -> Result<()> {
        match self.to[input] {
            Bound::Slot(s) => Ok(prepared.load(s, value)?),
            Bound::Part { derived, part } => {
                let d = &mut self.derived[derived];
                if d.loaded {
                    return Ok(prepared.write(d.slot, &d.shifted(part, value)?)?);
                }
                d.pending[part] = Some(value.clone());
                if d.pending.iter().all(Option::is_some) {
                    let mut whole = HostTensor::filled(d.ty.clone(), d.dtype, 0.0);
                    for (k, p) in d.pending.iter().enumerate() {
                        if let Some(p) = p {
                            whole.overwrite(&d.shifted(k, p)?)?;
                        }
                    }
                    prepared.load(d.slot, &whole)?;
                    d.loaded = true;
                    d.pending.iter_mut().for_each(|p| *p = None);
                }
                Ok(())
            }
        }
    }

    /// Writes `part`, a part of loaded written input `input` at its own position, into the
    /// backend's input (or, before a derived input is built, into its pending part).
    pub(super) fn write(&mut self, prepared: &mut dyn Prepared, input: usize, part: &HostTensor) -> Result<()> {
        match self.to[input] {
            Bound::Slot(s) => Ok(prepared.write(s, part)?),
            Bound::Part { derived, part: k } => {
                let d = &mut self.derived[derived];
                if d.loaded {
                    let shifted = d.shifted(k, part)?;
                    return Ok(prepared.write(d.slot, &shifted)?);
                }
                match &mut d.pending[k] {
                    Some(value) => Ok(value.overwrite(part)?),
                    None => Err(Error::Usage(format!("a part of `{}` is written before it is loaded", d.name))),
                }
            }
        }
    }

    /// Host bytes the derived inputs take while they are built.
    pub(super) fn derived_bytes(&self) -> usize {
        self.derived.iter().map(|d| d.ty.volume().saturating_mul(d.dtype.size_bytes())).fold(0, usize::saturating_add)
    }
}

impl DerivedSlot {
    /// `value` (of part `part`, at its own position) moved to where that part lies in this
    /// input: shifted along the axis by the part's offset.
    fn shifted(&self, part: usize, value: &HostTensor) -> Result<HostTensor> {
        let ty = value.ty();
        let dims: Vec<Interval> = (0..ty.rank())
            .map(|a| {
                let i = ty.dim(a);
                if a == self.axis {
                    Interval { lo: i.lo + self.offsets[part], hi: i.hi + self.offsets[part] }
                } else {
                    i
                }
            })
            .collect();
        Ok(HostTensor::from_ne_bytes(TensorType::from_intervals(dims), value.dtype(), &value.to_ne_bytes())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Graph};

    /// Two weights `a` (2x3) and `b` (2x1) derive `a+b` (2x4) along axis 1: the merged value
    /// is their concatenation, built once both are loaded; a part written later lands at its
    /// place in the merged input.
    #[test]
    fn a_derived_input_is_the_concatenation_of_its_parts() {
        let mut g = Graph::new();
        let a = g.input("a", &[("i", 2), ("j", 3)], DType::F32).unwrap();
        let b = g.input("b", &[("i", 2), ("k", 1)], DType::F32).unwrap();
        let mut f = Graph::new();
        f.input("a+b", &[("i", 2), ("j+k", 4)], DType::F32).unwrap();
        let ids = g.computation().inputs();
        let derived = [Derived { name: "a+b".into(), parts: ids.clone(), axis: 1 }];
        let mut binding = Binding::new(g.computation(), f.computation(), &derived).unwrap();
        assert_eq!((binding.slot(0), binding.merged_into(1)), (None, Some("a+b")));
        let _ = (a, b);
        let mut seen = Recorder::default();
        let va =
            HostTensor::from_f32(TensorType::zero_bounded(&[2, 3]), DType::F32, vec![1., 2., 3., 4., 5., 6.]).unwrap();
        let vb = HostTensor::from_f32(TensorType::zero_bounded(&[2, 1]), DType::F32, vec![7., 8.]).unwrap();
        binding.load(&mut seen, 0, &va).unwrap();
        assert!(seen.loads.is_empty(), "built only once every part is loaded");
        binding.load(&mut seen, 1, &vb).unwrap();
        assert_eq!(seen.loads.len(), 1);
        assert_eq!(seen.loads[0].to_f32(), [1., 2., 3., 7., 4., 5., 6., 8.]);
        let row = HostTensor::from_f32(
            TensorType::from_intervals(vec![Interval { lo: 1, hi: 2 }, Interval { lo: 0, hi: 1 }]),
            DType::F32,
            vec![9.],
        )
        .unwrap();
        binding.write(&mut seen, 1, &row).unwrap();
        assert_eq!(seen.writes[0].ty().dim(1), Interval { lo: 3, hi: 4 });
        assert_eq!(seen.writes[0].ty().dim(0), Interval { lo: 1, hi: 2 });
    }

    /// A backend that records what it is given.
    #[derive(Default)]
    struct Recorder {
        loads: Vec<HostTensor>,
        writes: Vec<HostTensor>,
    }

    impl Prepared for Recorder {
        fn load(&mut self, _: usize, value: &HostTensor) -> std::result::Result<(), einsum_core::BackendError> {
            self.loads.push(value.clone());
            Ok(())
        }
        fn write(&mut self, _: usize, part: &HostTensor) -> std::result::Result<(), einsum_core::BackendError> {
            self.writes.push(part.clone());
            Ok(())
        }
        fn run(&mut self) -> std::result::Result<Vec<HostTensor>, einsum_core::BackendError> {
            Ok(Vec::new())
        }
    }
}
