//! Enumerating the join-agg specs an operator offers on `p` devices (Section 4.2).

use crate::{AbstractOperator, Error, JoinAggSpec, Result, validate_spec};

/// One spec an operator offers: how many intervals each shardable index was split into,
/// and the spec that request produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecChoice {
    /// Interval count per shardable index, in the operator's `shardable()` order.
    pub counts: Vec<usize>,
    /// The spec.
    pub spec: JoinAggSpec,
}

/// Every ordered tuple `(c_1, ..., c_n)` with `c_i <= max[i]` and product `p`.
pub fn factorizations(p: usize, max: &[usize]) -> Vec<Vec<usize>> {
    fn go(rest: usize, max: &[usize], prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        match max.split_first() {
            None => {
                if rest == 1 {
                    out.push(prefix.clone());
                }
            }
            Some((&m, tail)) => {
                for c in (1..=rest.min(m)).filter(|c| rest.is_multiple_of(*c)) {
                    prefix.push(c);
                    go(rest / c, tail, prefix, out);
                    prefix.pop();
                }
            }
        }
    }
    let mut out = Vec::new();
    if p > 0 {
        go(p, max, &mut Vec::new(), &mut out);
    }
    out
}

/// Asks `op` for the spec that splits each shardable index into `counts[s]` near-equal
/// intervals at allowed positions, and validates it.
pub fn request_spec(op: &dyn AbstractOperator, counts: &[usize]) -> Result<JoinAggSpec> {
    let shardable = op.shardable();
    if counts.len() != shardable.len() {
        return Err(Error::Invalid {
            op: op.kind().to_string(),
            reason: format!("{} interval counts for {} shardable indices", counts.len(), shardable.len()),
        });
    }
    let intervals = shardable
        .iter()
        .zip(counts)
        .map(|(s, &c)| {
            s.intervals(c).ok_or_else(|| Error::BadIntervals {
                op: op.kind().to_string(),
                index: s.name.clone(),
                reason: format!("cannot split extent {} into {c} parts (at most {})", s.extent, s.max_parts()),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let spec = op.join_agg_spec(&intervals)?;
    validate_spec(op, &spec, Some(counts.iter().product()))?;
    Ok(spec)
}

/// The largest device count specs are enumerated for: each spec has `p` function specs and
/// validating it is quadratic in `p`, so far larger counts would only exhaust memory.
pub const MAX_DEVICES: usize = 4096;

/// Every spec `op` offers on `p` devices: one per assignment of interval counts to its
/// shardable indices whose product is `p`, skipping combinations the operator reports as
/// unsupported and specs identical to one already listed (two requests can yield the same
/// spec, e.g. cuts of two indices that fall at the same positions). Fails with
/// [`Error::NoSpec`] when none exists.
pub fn enumerate_specs(op: &dyn AbstractOperator, p: usize) -> Result<Vec<SpecChoice>> {
    let no_spec = |reason: String| Error::NoSpec { op: op.kind().to_string(), p, reason };
    if p == 0 {
        return Err(no_spec("the device count must be at least 1".into()));
    }
    if p > MAX_DEVICES {
        return Err(no_spec(format!("at most {MAX_DEVICES} devices are supported")));
    }
    let shardable = op.shardable();
    let max: Vec<usize> = shardable.iter().map(|s| s.max_parts()).collect();
    let mut choices = Vec::new();
    let mut unsupported = Vec::new();
    for counts in factorizations(p, &max) {
        match request_spec(op, &counts) {
            Ok(spec) if choices.iter().any(|c: &SpecChoice| c.spec == spec) => {}
            Ok(spec) => choices.push(SpecChoice { counts, spec }),
            Err(Error::Unsupported { reason, .. }) => unsupported.push(reason),
            Err(e) => return Err(e),
        }
    }
    if choices.is_empty() {
        let indices: Vec<String> =
            shardable.iter().map(|s| format!("{} (at most {} parts)", s.name, s.max_parts())).collect();
        let mut reason = if indices.is_empty() {
            "the operator has no shardable index".to_string()
        } else {
            format!("no product of interval counts over {} equals {p}", indices.join(", "))
        };
        if !unsupported.is_empty() {
            reason = format!("every candidate is unsupported ({})", unsupported.join("; "));
        }
        return Err(no_spec(reason));
    }
    Ok(choices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factorizations_respect_limits() {
        let f = factorizations(8, &[8, 2, 8]);
        assert!(f.contains(&vec![2, 2, 2]));
        assert!(f.contains(&vec![8, 1, 1]));
        assert!(f.iter().all(|c| c[1] <= 2 && c.iter().product::<usize>() == 8));
        assert_eq!(f.len(), 7);
        assert!(factorizations(7, &[3, 3]).is_empty());
        assert_eq!(factorizations(1, &[]), vec![Vec::<usize>::new()]);
        assert!(factorizations(2, &[]).is_empty());
        assert!(factorizations(0, &[4]).is_empty());
    }
}
