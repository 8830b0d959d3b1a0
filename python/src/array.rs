//! NumPy arrays to host tensors and back, through NumPy's own Python API (no C headers):
//! f32, f16 and i32 (indices) as NumPy's `float32`, `float16` and `int32`, bf16 as the
//! `bfloat16` dtype of the `ml_dtypes` package where it is installed.

use einsum_core::{DType, HostTensor, TensorDesc};
use pyo3::prelude::*;
use pyo3::types::PyByteArray;

use crate::errors::{DTypeError, IntoPy};
use crate::worker::guarded;

/// NumPy's name of `dtype`'s arrays.
fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I32 => "int32",
    }
}

/// The NumPy dtype object of `dtype`: bf16 needs `ml_dtypes`, and fails saying so without it.
fn numpy_dtype<'py>(py: Python<'py>, dtype: DType, what: &str) -> PyResult<Bound<'py, PyAny>> {
    match dtype {
        DType::BF16 => py.import("ml_dtypes").and_then(|m| m.getattr("bfloat16")).map_err(|_| {
            DTypeError::new_err(format!(
                "{what} is bf16, which NumPy holds only with the ml_dtypes package's bfloat16 \
                 (pip install ml_dtypes), not installed here; or build the graph in f32 or f16"
            ))
        }),
        other => py.import("numpy")?.getattr(numpy_name(other)),
    }
}

/// The host tensor of input `name` (of type `desc`) from `array`: a NumPy array (or anything
/// `numpy.asarray` takes: a list of ids, say) or a torch tensor (bf16 included, read as its
/// bits), of exactly the input's dtype and shape, except that an i32 input (token ids) takes
/// any integer array whose values fit. Anything else is a `DTypeError` that says what was
/// expected.
pub fn to_host(array: &Bound<'_, PyAny>, name: &str, desc: &TensorDesc) -> PyResult<HostTensor> {
    let py = array.py();
    let np = py.import("numpy")?;
    let array = torch_to_numpy(array, name, desc)?;
    let mut a = np.call_method1("asarray", (array,))?;
    let mut got: String = a.getattr("dtype")?.getattr("name")?.extract()?;
    let want = numpy_name(desc.dtype);
    let kind: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
    if desc.dtype == DType::I32 && got != want && (kind == "i" || kind == "u") {
        a = to_int32(&np, &a, name, desc)?;
        got = want.to_string();
    }
    if got != want {
        return Err(DTypeError::new_err(format!(
            "input `{name}` is {desc}: it needs a {want} array, got {got}{}",
            if desc.dtype == DType::BF16 { " (bfloat16 arrays come from the ml_dtypes package)" } else { "" }
        )));
    }
    let shape: Vec<usize> = a.getattr("shape")?.extract()?;
    if shape != desc.shape() {
        return Err(DTypeError::new_err(format!(
            "input `{name}` is {desc}: it needs an array of shape {:?}, got {shape:?}",
            desc.shape()
        )));
    }
    // Row-major, native byte order: the layout `HostTensor::from_ne_bytes` reads.
    let a = np.call_method1("ascontiguousarray", (a,))?;
    let a = if a.getattr("dtype")?.getattr("byteorder")?.extract::<String>()? == ">" {
        let native = a.getattr("dtype")?.call_method1("newbyteorder", ("=",))?;
        a.call_method1("astype", (native,))?
    } else {
        a
    };
    let bytes = a.call_method0("tobytes")?;
    let bytes: &[u8] = bytes.cast::<pyo3::types::PyBytes>()?.as_bytes();
    guarded("converting an array", || HostTensor::from_ne_bytes(desc.tensor_type(), desc.dtype, bytes).py_err())
}

/// `array` as NumPy takes it: a torch tensor becomes a NumPy array on the host (a bf16 one,
/// which NumPy lacks, as `ml_dtypes.bfloat16` over the same bits where the input is bf16);
/// anything else is returned as it is.
fn torch_to_numpy<'py>(array: &Bound<'py, PyAny>, name: &str, desc: &TensorDesc) -> PyResult<Bound<'py, PyAny>> {
    let module: String = array.get_type().getattr("__module__")?.extract()?;
    if !module.starts_with("torch") {
        return Ok(array.clone());
    }
    let t = array.call_method0("detach")?.call_method0("cpu")?.call_method0("contiguous")?;
    let dtype: String = t.getattr("dtype")?.str()?.extract()?;
    if dtype != "torch.bfloat16" {
        return t.call_method0("numpy");
    }
    if desc.dtype != DType::BF16 {
        let want = numpy_name(desc.dtype);
        return Err(DTypeError::new_err(format!("input `{name}` is {desc}: it needs a {want} tensor, got {dtype}")));
    }
    let torch = array.py().import("torch")?;
    let bits = t.call_method1("view", (torch.getattr("int16")?,))?.call_method0("numpy")?;
    bits.call_method1("view", (numpy_dtype(array.py(), DType::BF16, &format!("input `{name}`"))?,))
}

/// An integer array as int32, refusing values an i32 cannot hold.
fn to_int32<'py>(
    np: &Bound<'py, PyModule>,
    a: &Bound<'py, PyAny>,
    name: &str,
    desc: &TensorDesc,
) -> PyResult<Bound<'py, PyAny>> {
    if a.getattr("size")?.extract::<usize>()? > 0 {
        let (lo, hi): (i128, i128) =
            (np.call_method1("min", (a,))?.extract()?, np.call_method1("max", (a,))?.extract()?);
        if lo < i32::MIN as i128 || hi > i32::MAX as i128 {
            return Err(DTypeError::new_err(format!(
                "input `{name}` is {desc}: its values {lo}..={hi} do not fit in int32"
            )));
        }
    }
    a.call_method1("astype", ("int32",))
}

/// A new, writable NumPy array holding `t` (in its dtype), output `name`.
pub fn to_numpy<'py>(py: Python<'py>, t: &HostTensor, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let dtype = numpy_dtype(py, t.dtype(), &format!("output `{name}`"))?;
    let bytes = guarded("converting an output", || Ok(t.to_ne_bytes()))?;
    let buffer = PyByteArray::new(py, &bytes);
    let np = py.import("numpy")?;
    let flat = np.call_method1("frombuffer", (buffer, dtype))?;
    flat.call_method1("reshape", (t.ty().shape(),))
}
