//! `quicknat-lab lab --plot DIR`: the NAT44 lab's ratios, quicknat's
//! figure over each reference arm's (kernel NAT, flowtable, its I/O model's floor), per
//! measure, as grouped bars with a line at 1.0 — what the README shows beside the table.

use std::path::{Path, PathBuf};

use super::nat44::{LabReport, Ratio};

/// A ratio's figure for one measure.
type Field = fn(&Ratio) -> Option<f64>;

/// The measures plotted: label and the ratio's field.
const MEASURES: [(&str, Field); 4] = [
    ("TCP 1 stream, offloads off", |r| r.tcp1_off),
    ("TCP 1 stream, offloads on", |r| r.tcp1_on),
    ("64 B capacity, 1 core", |r| r.capacity),
    ("CPU/packet (lower is better)", |r| r.cpu_per_packet),
];

/// Writes `lab-ratios.svg` into `dir`; returns the files written.
pub fn nat44(dir: &Path, r: &LabReport) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let categories: Vec<String> = MEASURES.iter().map(|(l, _)| (*l).to_string()).collect();
    let series: Vec<(String, Vec<Option<f64>>)> = r
        .ratios
        .iter()
        .map(|x| {
            (
                format!("{} / {}", x.quicknat, x.versus),
                MEASURES.iter().map(|(_, f)| f(x)).collect(),
            )
        })
        .collect();
    let p = dir.join("lab-ratios.svg");
    bench::plot::bars(
        &p,
        &format!("quicknat over the references, NAT44 lab ({})", r.when),
        "ratio (quicknat / reference)",
        &categories,
        &series,
        Some(1.0),
    )?;
    Ok(vec![p])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chart parses as SVG and names every measure and every comparison.
    #[test]
    fn ratios_chart_names_measures_and_arms() {
        let dir = std::env::temp_dir().join(format!("qn-lab-plot-{}", std::process::id()));
        let report = LabReport {
            when: "2026-11-24".into(),
            ratios: vec![
                Ratio {
                    quicknat: "quicknat af_xdp".into(),
                    versus: "kernel NAT".into(),
                    tcp1_off: Some(0.75),
                    capacity: Some(0.88),
                    cpu_per_packet: Some(1.2),
                    ..Ratio::default()
                },
                Ratio {
                    quicknat: "quicknat af_packet".into(),
                    versus: "flowtable".into(),
                    tcp1_off: Some(0.6),
                    ..Ratio::default()
                },
            ],
            ..LabReport::default()
        };
        let files = nat44(&dir, &report).expect("drawn");
        assert_eq!(files, vec![dir.join("lab-ratios.svg")]);
        let text = std::fs::read_to_string(&files[0]).expect("written");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(text.starts_with("<svg"), "{}", &text[..40.min(text.len())]);
        for want in [
            "TCP 1 stream, offloads off",
            "CPU/packet (lower is better)",
            "quicknat af_xdp / kernel NAT",
            "quicknat af_packet / flowtable",
        ] {
            assert!(text.contains(want), "{want}");
        }
        // 4 bars of the first comparison (one missing) and 1 of the second, plus swatches.
        assert_eq!(text.matches("fill=\"#1F77B4\"").count(), 3 + 1);
        assert_eq!(text.matches("fill=\"#FF7F0E\"").count(), 1 + 1);
    }
}
