//! The printer: `Display` for [`Program`], in the syntax the parser reads back.
//!
//! Sections come in the order GPUS, PARTITIONS, IN, OUT (each omitted when empty, GPUS when
//! undeclared), then one action per line in the body's order, except that local actions of
//! one aggregate share a line (`A+B @ 0, 1`). Sizes other than 1 GB print as
//! `(size: X GB)` with the shortest decimal that reads back to the same `f64`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};

use crate::aggregate::Aggregate;
use crate::program::{DEFAULT_SIZE_GB, Program};
use crate::target::Target;

fn join<T: fmt::Display>(items: impl IntoIterator<Item = T>, sep: &str) -> String {
    let mut out = String::new();
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        let _ = write!(out, "{item}");
    }
    out
}

/// A size in GB as the shortest decimal that parses back to the same value (`1.5`, `2e-5`).
fn size_text(gb: f64) -> String {
    // `{:?}` on f64 is the shortest round-tripping representation, and always has a '.', an
    // 'e' or is "inf"/"NaN" (which a checked program never holds).
    format!("{gb:?}")
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(gpus) = &self.gpus {
            if gpus.is_empty() {
                writeln!(f, "GPUS:")?;
            } else {
                writeln!(f, "GPUS: {}", join(gpus, ", "))?;
            }
        }
        if !self.partitions.is_empty() {
            writeln!(f, "PARTITIONS: {}", join(self.partitions.iter().map(|(n, s)| format!("{n} {s}")), " "))?;
        }
        if !self.inputs.is_empty() {
            let entries = self.inputs.iter().map(|(atom, input)| {
                if input.size_gb == DEFAULT_SIZE_GB {
                    format!("{atom} @ {}", input.site)
                } else {
                    format!("{atom} @ {} (size: {} GB)", input.site, size_text(input.size_gb))
                }
            });
            writeln!(f, "IN: {}", join(entries, "; "))?;
        }
        if !self.outputs.is_empty() {
            let mut grouped: BTreeMap<&Aggregate, Vec<&Target>> = BTreeMap::new();
            for r in &self.outputs {
                grouped.entry(&r.aggregate).or_default().push(&r.target);
            }
            writeln!(f, "OUT: {}", join(grouped.iter().map(|(agg, ts)| format!("{agg} @ {}", join(ts, ", "))), "; "))?;
        }
        let mut locals: BTreeMap<&Aggregate, Vec<&Target>> = BTreeMap::new();
        for a in self.body.iter().filter(|a| a.is_local()) {
            locals.entry(&a.aggregate).or_default().push(&a.source);
        }
        let mut printed: BTreeSet<&Aggregate> = BTreeSet::new();
        for a in &self.body {
            if a.is_local() {
                if printed.insert(&a.aggregate) {
                    writeln!(f, "{} @ {}", a.aggregate, join(&locals[&a.aggregate], ", "))?;
                }
            } else {
                writeln!(f, "{a}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;

    #[test]
    fn prints_canonically() {
        let src = "GPUS: 0, 1\nIN: B @ 1; A @ 0 (size: 0.25 GB)\nOUT: A+B @ 1, 0\nB @ 1 -> 0\nA @ 0 -> 1\nB+A @ 1, 0\n";
        let p = parse(src).unwrap();
        assert_eq!(
            p.to_string(),
            "GPUS: 0, 1\nIN: A @ 0 (size: 0.25 GB); B @ 1\nOUT: A+B @ 0, 1\nA @ 0 -> 1\nB @ 1 -> 0\nA+B @ 0, 1\n"
        );
        assert_eq!(parse(&p.to_string()).unwrap(), p);
    }
}
