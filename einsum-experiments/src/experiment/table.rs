//! One result table, written as CSV, as a Markdown table (missing cells shown as `n/a`,
//! their reasons listed under it) and as JSON rows.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::Serialize;

/// One cell of a table.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// A label (workload, device count, topology).
    Text(String),
    /// A number.
    Value(f64),
    /// No value, with the reason (e.g. the strategy has no plan for this workload).
    Missing(String),
}

impl Cell {
    /// A cell holding `f` of a result's value, or its error as the reason it is missing.
    pub fn of<T, E: ToString>(result: &Result<T, E>, f: impl Fn(&T) -> f64) -> Cell {
        match result {
            Ok(v) => Cell::Value(f(v)),
            Err(reason) => Cell::Missing(reason.to_string()),
        }
    }

    /// The number, when the cell holds one.
    pub fn value(&self) -> Option<f64> {
        match self {
            Cell::Value(v) => Some(*v),
            _ => None,
        }
    }

    /// The cell in CSV: full precision, `n/a` when missing.
    fn csv(&self) -> String {
        match self {
            Cell::Text(s) => csv_escape(s),
            Cell::Value(v) => format!("{v}"),
            Cell::Missing(_) => "n/a".into(),
        }
    }

    /// The cell in Markdown: four significant figures or so, `n/a` when missing.
    fn markdown(&self) -> String {
        match self {
            Cell::Text(s) => s.replace('|', "\\|"),
            Cell::Value(v) => format_number(*v),
            Cell::Missing(_) => "n/a".into(),
        }
    }
}

/// A result table: named columns, rows of cells, a caption saying what the numbers are.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The experiment's name.
    pub name: String,
    /// What the table shows and how it was produced.
    pub caption: String,
    /// The column names; the leading ones are labels, the rest values.
    pub columns: Vec<String>,
    /// The rows, each with one cell per column.
    pub rows: Vec<Vec<Cell>>,
    /// Remarks printed under the Markdown table (e.g. random draws that did not compile).
    pub notes: Vec<String>,
}

impl Table {
    /// An empty table.
    pub fn new(name: &str, caption: String, columns: &[&str]) -> Self {
        Table {
            name: name.into(),
            caption,
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: vec![],
            notes: vec![],
        }
    }

    /// The table as CSV: a header line, then one line per row.
    pub fn to_csv(&self) -> String {
        let mut out = self.columns.iter().map(|c| csv_escape(c)).collect::<Vec<_>>().join(",") + "\n";
        for row in &self.rows {
            out += &(row.iter().map(Cell::csv).collect::<Vec<_>>().join(",") + "\n");
        }
        out
    }

    /// The table in Markdown: a heading, the caption, the table, and the reasons of its
    /// missing cells grouped by column and reason.
    pub fn to_markdown(&self) -> String {
        let mut out = format!("## {}\n\n{}\n\n", self.name, self.caption);
        let _ = writeln!(out, "| {} |", self.columns.join(" | "));
        let _ = writeln!(out, "|{}", self.columns.iter().map(|_| " --- |").collect::<String>());
        for row in &self.rows {
            let _ = writeln!(out, "| {} |", row.iter().map(Cell::markdown).collect::<Vec<_>>().join(" | "));
        }
        // Columns missing for the same reason in the same rows are listed together.
        let mut missing: Vec<(Vec<String>, String, Vec<String>)> = Vec::new();
        for (column, reason, rows) in self.missing() {
            match missing.iter_mut().find(|(_, r, rs)| *r == reason && *rs == rows) {
                Some((columns, ..)) => columns.push(column),
                None => missing.push((vec![column], reason, rows)),
            }
        }
        if !missing.is_empty() {
            out += "\nn/a:\n";
            for (columns, reason, rows) in missing {
                let _ = writeln!(out, "- {} ({}): {reason}", columns.join(", "), rows.join("; "));
            }
        }
        if !self.notes.is_empty() {
            out += "\nNotes:\n";
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }

    /// Every missing cell's reason as (column, reason, row labels), in first-seen order.
    pub fn missing(&self) -> Vec<(String, String, Vec<String>)> {
        let mut groups: Vec<(String, String, Vec<String>)> = Vec::new();
        for row in &self.rows {
            let label = self.row_label(row);
            for (column, cell) in self.columns.iter().zip(row) {
                if let Cell::Missing(reason) = cell {
                    match groups.iter_mut().find(|(c, r, _)| c == column && r == reason) {
                        Some((_, _, rows)) => rows.push(label.clone()),
                        None => groups.push((column.clone(), reason.clone(), vec![label.clone()])),
                    }
                }
            }
        }
        groups
    }

    /// A row's label: its text cells joined with spaces.
    pub fn row_label(&self, row: &[Cell]) -> String {
        let parts: Vec<String> =
            self.columns.iter().zip(row).filter_map(|(c, cell)| text_label(c, cell)).collect::<Vec<_>>();
        parts.join(" ")
    }

    /// The table as JSON: its name, caption, columns and notes, and the rows as objects
    /// keyed by column (missing cells are `null`, with their reasons under `"missing"`).
    pub fn report(&self) -> TableReport<'_> {
        let rows = self
            .rows
            .iter()
            .map(|row| {
                let mut cells = BTreeMap::new();
                let mut missing = BTreeMap::new();
                for (column, cell) in self.columns.iter().zip(row) {
                    let value = match cell {
                        Cell::Text(s) => CellReport::Text(s),
                        Cell::Value(v) => CellReport::Value(*v),
                        Cell::Missing(reason) => {
                            missing.insert(column.as_str(), reason.as_str());
                            CellReport::Missing
                        }
                    };
                    cells.insert(column.as_str(), value);
                }
                RowReport { cells, missing }
            })
            .collect();
        TableReport { name: &self.name, caption: &self.caption, columns: &self.columns, rows, notes: &self.notes }
    }
}

/// A [`Table`] as JSON (`experiment --json` prints one per experiment).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableReport<'a> {
    /// The experiment's name.
    pub name: &'a str,
    /// What the table shows and how it was produced.
    pub caption: &'a str,
    /// The column names, in the table's order; the leading ones are labels, the rest values.
    pub columns: &'a [String],
    /// The rows, each an object keyed by column.
    pub rows: Vec<RowReport<'a>>,
    /// Remarks printed under the Markdown table.
    pub notes: &'a [String],
}

/// One row of a [`TableReport`]: the columns are the table's, so the cells are a map from
/// column name (in name order) to value rather than fields; `"missing"` follows them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowReport<'a> {
    /// Every cell, by column name.
    #[serde(flatten)]
    pub cells: BTreeMap<&'a str, CellReport<'a>>,
    /// Why each missing cell is missing, by column name; absent when no cell is missing.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub missing: BTreeMap<&'a str, &'a str>,
}

/// One cell of a [`RowReport`]: a string, a number, or `null` when missing.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum CellReport<'a> {
    /// A label.
    Text(&'a str),
    /// A number.
    Value(f64),
    /// A missing cell (its reason is under the row's `"missing"`).
    Missing,
}

fn text_label(column: &str, cell: &Cell) -> Option<String> {
    match cell {
        Cell::Text(s) if s.is_empty() => None,
        Cell::Text(s) if column == "p" => Some(format!("p={s}")),
        Cell::Text(s) => Some(s.clone()),
        _ => None,
    }
}

/// The geometric mean of `values`, or `None` when there are none or one is not positive
/// (a geometric mean of times or ratios needs positive numbers).
pub fn geometric_mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan() || *v <= 0.0 || v.is_infinite()) {
        return None;
    }
    Some((values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp())
}

/// A geometric-mean cell over the values present in `cells`; missing cells are skipped,
/// and a column with none is missing itself.
pub(crate) fn geomean_cell(cells: &[&Cell]) -> Cell {
    let values: Vec<f64> = cells.iter().filter_map(|c| c.value()).collect();
    match geometric_mean(&values) {
        Some(g) => Cell::Value(g),
        None => Cell::Missing("no positive value to average".into()),
    }
}

/// Four significant figures for magnitudes around 1, scientific notation far from it.
fn format_number(v: f64) -> String {
    let a = v.abs();
    if v.fract() == 0.0 && a < 1e6 {
        format!("{v:.0}")
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.3e}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// `s` as one CSV field: quoted (quotes doubled) where it holds a comma, a quote or a
/// newline, else as it is. Kept rather than the `csv` crate's writer (issue 36), whose rules
/// differ at the edges (it also quotes a `\r`, and a record of one empty field) and which
/// would bring four crates for these three lines.
fn csv_escape(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometric_mean_matches_hand_computed_values() {
        assert_eq!(geometric_mean(&[2.0, 8.0]), Some(4.0));
        let g = geometric_mean(&[1.0, 10.0, 100.0]).unwrap();
        assert!((g - 10.0).abs() < 1e-12, "{g}");
        assert_eq!(geometric_mean(&[]), None);
        assert_eq!(geometric_mean(&[1.0, 0.0]), None);
        assert_eq!(geometric_mean(&[1.0, -2.0]), None);
        assert_eq!(geometric_mean(&[f64::NAN]), None);
    }

    #[test]
    fn missing_cells_are_na_with_reasons() {
        let mut t = Table::new("t", "caption".into(), &["workload", "p", "dp", "megatron"]);
        for w in ["a,b", "c"] {
            t.rows.push(vec![
                Cell::Text(w.into()),
                Cell::Text("4".into()),
                Cell::Value(1.5),
                Cell::Missing("no plan".into()),
            ]);
        }
        assert_eq!(t.to_csv(), "workload,p,dp,megatron\n\"a,b\",4,1.5,n/a\nc,4,1.5,n/a\n");
        let md = t.to_markdown();
        assert!(md.contains("| a,b | 4 | 1.500 | n/a |"), "{md}");
        assert!(md.contains("- megatron (a,b p=4; c p=4): no plan"), "{md}");
        t.columns.push("ulysses".into());
        for row in &mut t.rows {
            row.push(Cell::Missing("no plan".into()));
        }
        assert!(t.to_markdown().contains("- megatron, ulysses (a,b p=4; c p=4): no plan"), "{}", t.to_markdown());
        let json = serde_json::to_value(t.report()).unwrap();
        assert_eq!(json["rows"][0]["megatron"], serde_json::Value::Null);
        assert_eq!(json["rows"][0]["missing"]["megatron"], "no plan");
        let g = geomean_cell(&[&Cell::Value(2.0), &Cell::Missing("x".into()), &Cell::Value(8.0)]);
        assert_eq!(g, Cell::Value(4.0));
    }
}
