//! The operation codes that cross from Rust into the CUDA C kernels, defined once, here,
//! from the Rust enums: every kernel module is compiled with [`header`] prepended, which
//! `#define`s each code (`UNARY_GELU`, `AGG_SUM`, `DTYPE_BF16`, ...) and, for the elementwise
//! operations, generates the whole `switch` that applies them (`unary_apply`,
//! `binary_apply`, `agg_apply`), C expression included.
//!
//! # Design
//! One macro invocation per enum ([`OpCode`]) yields both the table the header is printed
//! from and the exhaustive `match` that gives a value its code, so a Rust variant without a
//! code (and, for the elementwise ones, without its C expression) does not compile, and the
//! CUDA C cannot lag behind: it no longer spells any code itself. The hand-written kernels
//! that branch on a code without a generated function (the dtype loads and stores of
//! `common.cuh`, `reduce.cu`) use the generated names, and a test checks that they name
//! every one.
//!
//! # NaN
//! The maxima and minima are NumPy's `maximum` and `minimum` (`a` where `a` wins, ties or
//! is NaN, else `b`), as the Rust `apply` functions compute them: a NaN on either side is the
//! result. `fmaxf` and `fminf` return the other operand of a NaN, so `relu(NaN)` would be 0
//! and `max(NaN, 1)` 1.

use std::fmt::Write as _;

use einsum_core::{Aggregation, DType};
use einsum_ops::binary::BinaryOp;
use einsum_ops::reduce::ReduceOp;
use einsum_ops::unary::UnaryOp;

/// One variant of a Rust enum as CUDA C sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeRow {
    /// Its C name after the prefix (`GELU` of `UNARY_GELU`).
    pub name: &'static str,
    /// The `int` code passed to the kernels.
    pub code: i32,
    /// The C expression that applies it, over the parameters of [`OpCode::APPLY`]; `None`
    /// where the kernel branches on the code itself.
    pub expr: Option<&'static str>,
}

/// A Rust enum whose values are passed to the CUDA kernels as `int` codes.
pub trait OpCode: Copy {
    /// The prefix of its C names (`UNARY`).
    const PREFIX: &'static str;
    /// The signature of the generated device function that applies a code
    /// (`unary_apply(int op, float v, float s)`), when the rows carry expressions.
    const APPLY: Option<&'static str>;
    /// Every variant, in code order.
    const ROWS: &'static [CodeRow];
    /// The code of this value.
    fn code(self) -> i32;
}

/// Implements [`OpCode`] for an enum from one list of `pattern => code, NAME[, "expr"];`
/// rows: the table and the exhaustive `match` come from the same rows.
macro_rules! op_codes {
    ($ty:ty, $prefix:literal, $apply:expr, { $($pat:pat => $code:literal, $name:literal $(, $expr:literal)?;)+ }) => {
        impl OpCode for $ty {
            const PREFIX: &'static str = $prefix;
            const APPLY: Option<&'static str> = $apply;
            const ROWS: &'static [CodeRow] = &[$(CodeRow { name: $name, code: $code, expr: op_codes!(@expr $($expr)?) }),+];
            fn code(self) -> i32 {
                match self {
                    $($pat => $code,)+
                }
            }
        }
    };
    (@expr) => { None };
    (@expr $e:literal) => { Some($e) };
}

op_codes!(DType, "DTYPE", None, {
    DType::F32 => 0, "F32";
    DType::F16 => 1, "F16";
    DType::BF16 => 2, "BF16";
    DType::I32 => 3, "I32";
});

op_codes!(Aggregation, "AGG", Some("agg_apply(int op, float a, float b)"), {
    Aggregation::Sum => 0, "SUM", "a + b";
    Aggregation::Max => 1, "MAX", "(a >= b || a != a) ? a : b";
    Aggregation::Min => 2, "MIN", "(a <= b || a != a) ? a : b";
    Aggregation::Product => 3, "PRODUCT", "a * b";
    // Row-wise: aggregate.cu's aggregate_softmax merges its rows; agg_apply never sees it.
    Aggregation::Softmax => 4, "SOFTMAX", "__int_as_float(0x7fc00000)";
});

op_codes!(UnaryOp, "UNARY", Some("unary_apply(int op, float v, float s)"), {
    UnaryOp::Relu => 0, "RELU", "(v >= 0.0f || v != v) ? v : 0.0f";
    UnaryOp::Gelu => 1, "GELU", "0.5f * v * (1.0f + tanhf(0.7978846f * (v + 0.044715f * v * v * v)))";
    UnaryOp::Silu => 2, "SILU", "v / (1.0f + expf(-v))";
    UnaryOp::Exp => 3, "EXP", "expf(v)";
    UnaryOp::Neg => 4, "NEG", "-v";
    UnaryOp::Scale(_) => 5, "SCALE", "s * v";
    // Stable as UnaryOp::apply: e^-|v| never overflows, and NaN stays NaN (v < 0 is false).
    UnaryOp::Sigmoid => 6, "SIGMOID", "v < 0.0f ? expf(v) / (1.0f + expf(v)) : 1.0f / (1.0f + expf(-v))";
    UnaryOp::Tanh => 7, "TANH", "tanhf(v)";
});

op_codes!(BinaryOp, "BINARY", Some("binary_apply(int op, float a, float b)"), {
    BinaryOp::Add => 0, "ADD", "a + b";
    BinaryOp::Sub => 1, "SUB", "a - b";
    BinaryOp::Mul => 2, "MUL", "a * b";
    BinaryOp::Div => 3, "DIV", "a / b";
    BinaryOp::Max => 4, "MAX", "(a >= b || a != a) ? a : b";
});

op_codes!(ReduceOp, "REDUCE", None, {
    ReduceOp::Sum => 0, "SUM";
    ReduceOp::Max => 1, "MAX";
    ReduceOp::Mean => 2, "MEAN";
});

/// The scalar operand of a unary operation (`s` of `unary_apply`): the factor of
/// `Scale`, 0 otherwise.
pub fn unary_scalar(op: UnaryOp) -> f32 {
    match op {
        UnaryOp::Scale(s) => s,
        _ => 0.0,
    }
}

/// The C text of one enum's codes: a `#define` per variant and, for the elementwise ones,
/// the device function that applies a code (NaN for a code that is none of them).
fn table<T: OpCode>(out: &mut String) {
    let prefix = T::PREFIX;
    for r in T::ROWS {
        let _ = writeln!(out, "#define {prefix}_{} {}", r.name, r.code);
    }
    if let Some(apply) = T::APPLY {
        let _ = writeln!(out, "__device__ __forceinline__ float {apply} {{");
        let _ = writeln!(out, "    switch (op) {{");
        for r in T::ROWS {
            if let Some(e) = r.expr {
                let _ = writeln!(out, "        case {prefix}_{}: return {e};", r.name);
            }
        }
        let _ = writeln!(out, "    }}");
        let _ = writeln!(out, "    return __int_as_float(0x7fc00000);  // not a code: NaN");
        let _ = writeln!(out, "}}");
    }
}

/// The generated header every kernel module is compiled with (before `common.cuh`).
pub fn header() -> String {
    let mut out = String::from("// Generated by einsum-cuda (kernels/codes.rs) from the Rust enums; do not edit.\n");
    table::<DType>(&mut out);
    table::<Aggregation>(&mut out);
    table::<UnaryOp>(&mut out);
    table::<BinaryOp>(&mut out);
    table::<ReduceOp>(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::sources::{self, COMMON};

    /// Codes are distinct and dense within each enum, and every one is in the header: its
    /// `#define`, and its `case` where the header applies it.
    fn check<T: OpCode>(values: &[T]) {
        let h = header();
        let codes: Vec<i32> = T::ROWS.iter().map(|r| r.code).collect();
        assert_eq!(codes, (0..T::ROWS.len() as i32).collect::<Vec<_>>(), "{}: codes in order", T::PREFIX);
        for v in values {
            let row = T::ROWS.iter().find(|r| r.code == v.code()).expect("every value's code is a row");
            let name = format!("{}_{}", T::PREFIX, row.name);
            assert!(h.contains(&format!("#define {name} {}\n", row.code)), "{name} is not defined");
            if T::APPLY.is_some() {
                let e = row.expr.unwrap_or_else(|| panic!("{name} has no C expression"));
                assert!(h.contains(&format!("case {name}: return {e};")), "{name} is not applied");
            }
        }
        let mut seen: Vec<i32> = values.iter().map(|v| v.code()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, codes, "{}: the values listed here cover every row", T::PREFIX);
    }

    #[test]
    fn every_rust_variant_has_its_code_in_the_generated_header() {
        check(&[DType::F32, DType::F16, DType::BF16, DType::I32]);
        check(&[Aggregation::Sum, Aggregation::Max, Aggregation::Min, Aggregation::Product, Aggregation::Softmax]);
        let unary = [
            UnaryOp::Relu,
            UnaryOp::Gelu,
            UnaryOp::Silu,
            UnaryOp::Exp,
            UnaryOp::Neg,
            UnaryOp::Scale(0.5),
            UnaryOp::Sigmoid,
            UnaryOp::Tanh,
        ];
        check(&unary);
        // The names einsum-ops parses are exactly these variants.
        for op in unary {
            assert_eq!(UnaryOp::parse(op.name(), 0.5).unwrap().code(), op.code());
        }
        check(&[BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max]);
        check(&[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean]);
        assert_eq!(unary_scalar(UnaryOp::Scale(0.25)), 0.25);
        assert_eq!(unary_scalar(UnaryOp::Exp), 0.0);
    }

    /// The kernels that branch on a code themselves name every code of it, and no kernel
    /// spells a code as a bare number in a `case`.
    #[test]
    fn hand_written_branches_name_every_code() {
        let names = |rows: &[CodeRow], prefix: &str| -> Vec<String> {
            rows.iter().map(|r| format!("{prefix}_{}", r.name)).collect()
        };
        for n in names(DType::ROWS, DType::PREFIX) {
            assert!(COMMON.contains(&n), "common.cuh does not handle {n}");
        }
        for n in names(ReduceOp::ROWS, ReduceOp::PREFIX) {
            assert!(sources::REDUCE.source.contains(&format!("case {n}:")), "reduce.cu does not handle {n}");
        }
        for m in sources::FIXED.iter().chain(&sources::ATTENTION) {
            for d in 0..10 {
                assert!(!m.source.contains(&format!("case {d}:")), "{}.cu spells code {d} by number", m.name);
            }
        }
    }

    #[test]
    fn every_module_is_compiled_with_the_header_first() {
        let h = header();
        for m in sources::FIXED.iter().chain(&sources::ATTENTION) {
            let full = sources::full_source(m, &[("HEAD_DIM", "64".into())]);
            let at = full.find(&h).unwrap_or_else(|| panic!("{} lacks the generated header", m.name));
            assert!(at < full.find("struct Dims").unwrap(), "{}: the header must precede common.cuh", m.name);
        }
    }
}
