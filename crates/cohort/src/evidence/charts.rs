//! The auditor's report's charts, drawn as SVG by plotters' SVG backend:
//! a log-scale bar chart of the categories (so one category of millions of
//! rows does not hide the others) and small multiples of each category's
//! months (each panel on its own scale). Plain data in, SVG text out.
//!
//! Bars are drawn in the backend's pixels from the chart's own coordinate
//! mapping, each rectangle from its smaller to its larger corner, so no bar
//! can get a negative width or height whatever the number of groups.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::EvidenceError;
use crate::error::Error;

/// The four series of every chart, with their colours (the report's legend
/// uses the same, see `evidence_report.html`).
pub(super) const SERIES: [(&str, RGBColor); 4] = [
    ("purged", RGBColor(0xb4, 0x23, 0x18)),
    ("soft-deleted", RGBColor(0xdc, 0x68, 0x03)),
    ("anonymised", RGBColor(0x17, 0x5c, 0xd3)),
    ("held", RGBColor(0x1a, 0x7f, 0x37)),
];

/// A number with a comma between every three digits: `2,000,000`.
pub(crate) fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn render_error<E: std::fmt::Display>(e: E) -> Error {
    EvidenceError::Render {
        reason: e.to_string(),
    }
    .into()
}

/// A rectangle between two pixel corners, whichever order they come in.
fn bar(a: (i32, i32), b: (i32, i32), colour: RGBColor) -> Rectangle<(i32, i32)> {
    Rectangle::new(
        [(a.0.min(b.0), a.1.min(b.1)), (a.0.max(b.0), a.1.max(b.1))],
        colour.filled(),
    )
}

/// Inline SVG in HTML takes the `<svg>` element, not an XML document.
fn svg_element(svg: String) -> String {
    match svg.find("<svg") {
        Some(i) => svg[i..].to_owned(),
        None => svg,
    }
}

/// The label font: plotters draws a font of size `n` about 0.8 `n` pixels
/// high, so 15 is a 12-pixel label.
const LABEL: (&str, u32) = ("sans-serif", 15);

/// Rows per category, on a logarithmic scale: one horizontal group of four
/// bars per category, each bar labelled with its value. A zero draws no
/// bar (a log scale has no zero) and no label; the report's table has every
/// number.
pub(super) fn category_chart(groups: &[(String, [i64; 4])]) -> Result<String, Error> {
    let n = groups.len().max(1);
    let label_width = groups
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(8)
        .clamp(8, 30);
    let y_area = 20 + 8 * u32::try_from(label_width).unwrap_or(30);
    let height = 76 + 60 * u32::try_from(n).unwrap_or(1).min(200);
    let width = 880u32;
    let max = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .max()
        .unwrap_or(0)
        .max(10);
    // Room right of the longest bar for its label: a decade and a half.
    let x_max = max as f64 * 40.0;
    let count = n as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(render_error)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(y_area)
            .build_cartesian_2d((0.5f64..x_max).log_scale(), 0f64..count)
            .map_err(render_error)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .label_style(LABEL)
            .axis_desc_style(LABEL)
            .x_label_formatter(&|v| {
                if *v >= 1.0 && *v <= max as f64 * 10.0 {
                    grouped(v.round() as i64)
                } else {
                    String::new()
                }
            })
            .x_desc("rows (logarithmic scale)")
            .draw()
            .map_err(render_error)?;
        let value_style = LABEL.into_font().color(&BLACK);
        let name_style = LABEL
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Right, VPos::Center));
        for (g, (name, values)) in groups.iter().enumerate() {
            // The first category at the top.
            let slot = count - 1.0 - g as f64;
            let (x0, top) = chart.backend_coord(&(0.5, slot + 1.0));
            let bottom = chart.backend_coord(&(0.5, slot)).1;
            let (top, bottom) = (top.min(bottom), top.max(bottom));
            let band = f64::from(bottom - top) / 5.0;
            root.draw(&Text::new(
                name.clone(),
                (x0 - 8, (top + bottom) / 2),
                name_style.clone(),
            ))
            .map_err(render_error)?;
            for (s, (_, colour)) in SERIES.iter().enumerate() {
                let value = values[s];
                if value <= 0 {
                    continue;
                }
                let y0 = top + (band / 2.0 + s as f64 * band) as i32;
                let y1 = top + (band / 2.0 + (s as f64 + 1.0) * band) as i32 - 1;
                let x1 = chart.backend_coord(&(value as f64, slot)).0.max(x0 + 2);
                root.draw(&bar((x0, y0), (x1, y1.max(y0 + 1)), *colour))
                    .map_err(render_error)?;
                root.draw(&Text::new(
                    grouped(value),
                    (x1 + 4, y0 - 2),
                    value_style.clone(),
                ))
                .map_err(render_error)?;
            }
        }
        root.present().map_err(render_error)?;
    }
    Ok(svg_element(svg))
}

/// One small multiple: a category's rows per month, grouped bars of the
/// four series on the panel's own linear scale. `months` is the axis every
/// panel shares; `values` holds this category's figures for each month.
pub(super) fn month_panel(
    caption: &str,
    months: &[String],
    values: &[[i64; 4]],
) -> Result<String, Error> {
    let n = months.len().max(1);
    let width = (110 + 52 * u32::try_from(n).unwrap_or(1)).clamp(420, 880);
    let height = 250u32;
    let max = values
        .iter()
        .flat_map(|v| v.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let y_max = max as f64 * 1.08;
    let count = n as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(render_error)?;
        // At most about eight month labels, whatever the number of months.
        let every = n.div_ceil(8).max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(84)
            .build_cartesian_2d(0f64..count, 0f64..y_max)
            .map_err(render_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(5)
            .label_style(LABEL)
            .y_label_formatter(&|v| {
                if (v - v.round()).abs() < 1e-6 {
                    grouped(v.round() as i64)
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(render_error)?;
        let month_style = LABEL
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top));
        for (m, figures) in values.iter().enumerate().take(n) {
            let i = m as f64;
            let (x0, base) = chart.backend_coord(&(i, 0.0));
            let x1 = chart.backend_coord(&(i + 1.0, 0.0)).0;
            let (left, right) = (x0.min(x1), x0.max(x1));
            if let Some(label) = months.get(m).filter(|_| m.is_multiple_of(every)) {
                root.draw(&Text::new(
                    label.clone(),
                    ((left + right) / 2, base + 6),
                    month_style.clone(),
                ))
                .map_err(render_error)?;
            }
            let slot = f64::from(right - left) / 5.0;
            for (s, (_, colour)) in SERIES.iter().enumerate() {
                let value = figures[s];
                if value <= 0 {
                    continue;
                }
                let top = chart.backend_coord(&(i, value as f64)).1;
                let a = left + (slot / 2.0 + s as f64 * slot) as i32;
                let b = left + (slot / 2.0 + (s as f64 + 1.0) * slot) as i32;
                // At least one pixel each way: a value is never invisible.
                root.draw(&bar((a, top.min(base - 1)), (b.max(a + 1), base), *colour))
                    .map_err(render_error)?;
            }
        }
        root.present().map_err(render_error)?;
    }
    Ok(svg_element(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rects(svg: &str) -> Vec<(f64, f64, f64, f64, String)> {
        svg.split("<rect")
            .skip(1)
            .map(|r| {
                let attr = |name: &str| {
                    r.split(&format!(" {name}=\""))
                        .nth(1)
                        .and_then(|v| v.split('"').next())
                        .unwrap_or("")
                        .to_owned()
                };
                let num = |name: &str| attr(name).parse::<f64>().unwrap_or(f64::NAN);
                (
                    num("x"),
                    num("y"),
                    num("width"),
                    num("height"),
                    attr("fill"),
                )
            })
            .collect()
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(2_000_000), "2,000,000");
        assert_eq!(grouped(-1234567), "-1,234,567");
        assert_eq!(grouped(i64::MIN), "-9,223,372,036,854,775,808");
    }

    #[test]
    fn a_skewed_category_does_not_hide_the_others() {
        let groups: Vec<(String, [i64; 4])> = [2_000_000, 7, 40, 3, 120, 1]
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("category-{i}"), [*p, 0, 0, 0]))
            .collect();
        let svg = category_chart(&groups).expect("chart");
        let purge = "#B42318";
        let bars: Vec<_> = rects(&svg).into_iter().filter(|r| r.4 == purge).collect();
        assert_eq!(bars.len(), 6, "{svg}");
        for b in &bars {
            assert!(b.2 >= 8.0 && b.3 >= 1.0, "a visible bar: {b:?}");
        }
        assert!(svg.contains("2,000,000"), "{svg}");
        // The smallest bar is shorter than the largest, in order.
        let widths: Vec<f64> = bars.iter().map(|b| b.2).collect();
        assert!(widths[0] > widths[2] && widths[2] > widths[1] && widths[1] > widths[5]);
    }

    #[test]
    fn one_month_panels_have_positive_bars() {
        let svg = month_panel("notes", &["2026-01".to_owned()], &[[7, 0, 2, 1]]).expect("panel");
        let bars: Vec<_> = rects(&svg)
            .into_iter()
            .filter(|r| SERIES.iter().any(|(_, c)| r.4 == svg_colour(*c)))
            .collect();
        assert_eq!(bars.len(), 3, "{svg}");
        for b in &bars {
            assert!(b.2 > 5.0 && b.3 >= 1.0, "{b:?}");
        }
        assert!(!svg.contains("width=\"-") && !svg.contains("height=\"-"));
    }

    fn svg_colour(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    #[test]
    fn one_category_fills_its_chart() {
        let svg = category_chart(&[("notes".to_owned(), [7, 0, 0, 0])]).expect("chart");
        let bars: Vec<_> = rects(&svg)
            .into_iter()
            .filter(|r| r.4 == "#B42318")
            .collect();
        assert_eq!(bars.len(), 1, "{svg}");
        assert!(bars[0].2 > 100.0 && bars[0].3 >= 8.0, "{bars:?}");
        assert!(
            svg.contains(">\nnotes\n<") || svg.contains(">notes<"),
            "{svg}"
        );
    }

    #[test]
    fn empty_charts_still_render() {
        assert!(category_chart(&[]).expect("chart").contains("<svg"));
        assert!(month_panel("x", &[], &[]).expect("chart").contains("<svg"));
    }
}
