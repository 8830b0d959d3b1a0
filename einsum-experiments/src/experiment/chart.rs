//! A grouped bar chart written as SVG with `plotters` (SVG backend only: text is emitted as
//! SVG `<text>` elements, laid out with plotters' built-in size estimate, so no system font
//! is needed).

use plotters::prelude::*;

use crate::{Error, Result};

/// A grouped bar chart: one group of bars per label, one bar per series in each group.
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart {
    /// The title above the chart.
    pub title: String,
    /// What the y axis measures.
    pub y_label: String,
    /// The group labels along the x axis.
    pub groups: Vec<String>,
    /// Each series' name and its value per group (`None`: no bar, e.g. a missing cell).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

impl BarChart {
    /// The chart as an SVG document.
    pub fn to_svg(&self) -> Result<String> {
        let err = |e: &dyn std::fmt::Display| Error::Chart(format!("chart `{}`: {e}", self.title));
        if let Some((name, values)) = self.series.iter().find(|(_, v)| v.len() != self.groups.len()) {
            return Err(err(&format!("series `{name}` has {} values for {} groups", values.len(), self.groups.len())));
        }
        let values: Vec<f64> = self.series.iter().flat_map(|(_, v)| v.iter().flatten().copied()).collect();
        let lo = values.iter().copied().fold(0.0, f64::min);
        let hi = values.iter().copied().fold(0.0, f64::max);
        let (lo, hi) = if hi > lo { (lo * 1.1, hi * 1.1) } else { (0.0, 1.0) };
        let n = self.groups.len().max(1);
        let longest = self.groups.iter().map(|g| g.chars().count()).max().unwrap_or(1);
        let width = (n * (7 * longest + 10).max(12 * self.series.len() + 20) + 120).clamp(640, 4000) as u32;

        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (width, 420)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(&e))?;
            let mut chart = ChartBuilder::on(&root)
                .caption(&self.title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(64)
                .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), lo..hi)
                .map_err(|e| err(&e))?;
            let groups = &self.groups;
            let label = |x: &f64| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    groups.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            };
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&label)
                .x_label_style(("sans-serif", 11))
                .y_desc(&self.y_label)
                .draw()
                .map_err(|e| err(&e))?;
            let k = self.series.len().max(1) as f64;
            let bar = 0.8 / k;
            for (j, (name, values)) in self.series.iter().enumerate() {
                let color = Palette99::pick(j).to_rgba();
                let bars = values.iter().enumerate().filter_map(|(i, v)| {
                    let x0 = i as f64 - 0.4 + j as f64 * bar;
                    v.map(|v| Rectangle::new([(x0, 0.0), (x0 + bar * 0.9, v)], color.filled()))
                });
                chart
                    .draw_series(bars)
                    .map_err(|e| err(&e))?
                    .label(name.as_str())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
            root.present().map_err(|e| err(&e))?;
        }
        Ok(svg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_labels_and_legend_are_drawn() {
        let chart = BarChart {
            title: "t".into(),
            y_label: "ms".into(),
            groups: vec!["one".into(), "two".into()],
            series: vec![("dp".into(), vec![Some(1.0), Some(2.0)]), ("data".into(), vec![None, Some(-0.5)])],
        };
        let svg = chart.to_svg().unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in ["one", "two", "dp", "data", "ms"] {
            assert!(svg.contains(&format!("\n{text}\n")) || svg.contains(&format!(">{text}<")), "{text} missing");
        }
        let bad = BarChart { groups: vec!["one".into()], ..chart };
        assert!(bad.to_svg().unwrap_err().to_string().contains("2 values for 1 groups"));
    }
}
