//! Shared by the integration tests: a small kernel library and helpers.
#![allow(dead_code)]

use einsum_core::{DType, HostTensor, KernelLibrary, TensorType};

/// Kernel 0 doubles its input; 1 adds its inputs left to right; 2 returns an error; 3
/// panics with a `&str`; 4 returns a block of the wrong type; 5 writes two outputs, its
/// input and its double; 6 panics with a formatted `String`.
pub struct Arith;

pub const DOUBLE: usize = 0;
pub const ADD: usize = 1;
pub const FAIL: usize = 2;
pub const PANIC: usize = 3;
pub const WRONG_TYPE: usize = 4;
pub const COPY_AND_DOUBLE: usize = 5;
pub const PANIC_STRING: usize = 6;

fn make(out: &(TensorType, DType), data: Vec<f32>) -> Result<HostTensor, String> {
    HostTensor::from_f32(out.0.clone(), out.1, data).map_err(|e| e.to_string())
}

fn doubled(t: &HostTensor) -> Vec<f32> {
    t.to_f32().iter().map(|x| 2.0 * x).collect()
}

impl KernelLibrary for Arith {
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String> {
        match kernel {
            DOUBLE => Ok(vec![make(&outputs[0], doubled(&inputs[0]))?]),
            ADD => {
                let mut acc = inputs[0].to_f32();
                for t in &inputs[1..] {
                    for (a, b) in acc.iter_mut().zip(t.to_f32()) {
                        *a += b;
                    }
                }
                Ok(vec![make(&outputs[0], acc)?])
            }
            FAIL => Err("deliberate failure".into()),
            PANIC => panic!("deliberate panic in a kernel"),
            WRONG_TYPE => {
                let ty = &outputs[0].0;
                let smaller: Vec<usize> = ty.shape().iter().map(|&n| n.saturating_sub(1)).collect();
                Ok(vec![HostTensor::filled(TensorType::zero_bounded(&smaller), outputs[0].1, 0.0)])
            }
            COPY_AND_DOUBLE => {
                Ok(vec![make(&outputs[0], inputs[0].to_f32())?, make(&outputs[1], doubled(&inputs[0]))?])
            }
            PANIC_STRING => panic!("deliberate panic number {}", 42),
            _ => Err(format!("no kernel {kernel}")),
        }
    }

    fn name(&self, kernel: usize) -> String {
        let names = ["double", "add", "fail", "panic", "wrong-type", "copy-and-double", "panic-string"];
        names.get(kernel).map_or_else(|| format!("kernel {kernel}"), |n| n.to_string())
    }
}

/// Asserts that two lists of tensors are equal bit for bit (types, dtypes and every
/// element's bits, so `-0.0` and `0.0` differ).
pub fn assert_bits_eq(got: &[HostTensor], want: &[HostTensor]) {
    assert_eq!(got.len(), want.len(), "number of outputs");
    for (o, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!((g.ty(), g.dtype()), (w.ty(), w.dtype()), "output {o}");
        let g: Vec<u32> = g.to_f32().iter().map(|x| x.to_bits()).collect();
        let w: Vec<u32> = w.to_f32().iter().map(|x| x.to_bits()).collect();
        assert_eq!(g, w, "output {o} differs");
    }
}
