//! The SVG written parses as XML and carries the titles, series and bars it should.

use super::*;

fn parse(path: &Path) -> (String, Vec<String>, usize) {
    let text = std::fs::read_to_string(path).expect("written");
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect();
    let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .count();
    (text, texts, rects + lines * 1000)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qn-plot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn row(measure: Measure, proto: Proto, sessions: usize, median: f64) -> CsitRow {
    CsitRow {
        measure,
        proto,
        scale: "4k",
        sessions,
        inside_addresses: sessions / 63,
        outside_addresses: 1,
        established: sessions,
        rounds: vec![median],
        median,
        reaper_share: 0.0,
        generator_share: 0.0,
        failures: 0,
        table_mib: 1.0,
    }
}

#[test]
fn csit_charts_have_both_protocols_and_predictable_names() {
    let dir = tmp("csit");
    let rows = vec![
        row(Measure::Tput, Proto::Udp, 4032, 10.0),
        row(Measure::Tput, Proto::Udp, 64_512, 8.0),
        row(Measure::Tput, Proto::Tcp, 4032, 9.0),
        row(Measure::Tput, Proto::Tcp, 64_512, 7.5),
        row(Measure::Cps, Proto::Udp, 4032, 900_000.0),
        row(Measure::Cps, Proto::Tcp, 4032, 300_000.0),
    ];
    let files = csit(&dir, &rows).expect("drawn");
    assert_eq!(
        files,
        vec![dir.join("csit-tput.svg"), dir.join("csit-cps.svg")]
    );
    let (_, texts, shapes) = parse(&files[0]);
    assert!(texts.iter().any(|t| t.contains("TPUT")), "{texts:?}");
    assert!(texts.iter().any(|t| t == "UDP") && texts.iter().any(|t| t == "TCP"));
    assert!(texts.iter().any(|t| t == "Mpps per core"), "{texts:?}");
    assert!(shapes >= 2000, "two lines drawn");
    let (_, texts, _) = parse(&files[1]);
    assert!(texts.iter().any(|t| t.contains("CPS")), "{texts:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bars_leave_gaps_for_missing_figures_and_draw_a_reference() {
    let dir = tmp("bars");
    create(&dir).expect("dir");
    let p = dir.join("lab-ratios.svg");
    let cats: Vec<String> = ["TCP 1 stream", "capacity", "CPU/packet"]
        .map(String::from)
        .to_vec();
    bars(
        &p,
        "quicknat vs kernel",
        "ratio",
        &cats,
        &[
            (
                "af_xdp / kernel NAT".into(),
                vec![Some(0.75), Some(0.9), Some(1.2)],
            ),
            (
                "af_packet / kernel NAT".into(),
                vec![Some(0.77), None, Some(1.4)],
            ),
        ],
        Some(1.0),
    )
    .expect("drawn");
    let (text, texts, _) = parse(&p);
    for c in &cats {
        assert!(texts.contains(c), "category {c}: {texts:?}");
    }
    assert!(texts.iter().any(|t| t == "af_packet / kernel NAT"));
    // 5 bars, 2 legend swatches, the background and the legend box (and no more).
    let doc = roxmltree::Document::parse(&text).expect("xml");
    let filled = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect"))
        .filter(|n| {
            n.attribute("fill")
                .is_some_and(|f| f == "#1F77B4" || f == "#FF7F0E")
        })
        .count();
    assert_eq!(filled, 5 + 2, "bars and swatches");
    assert!(
        text.contains("polyline") || text.contains("<line"),
        "reference line"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn short_labels() {
    assert_eq!(short(4_000_000.0), "4M");
    assert_eq!(short(16_128.0), "16.13k");
    assert_eq!(short(0.75), "0.75");
    assert_eq!(short(2.0), "2");
}
