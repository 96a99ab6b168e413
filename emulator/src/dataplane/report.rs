//! The data plane benchmark's report, pure: the markdown rows that
//! `p4fleet-dataplane-bench` prints read back ([`parse_table`]), as CSV
//! ([`csv`]), and the Figure-1-shaped plot ([`svg`]: Mpps per workload and
//! mode, one panel per frame size). The plot reads the printed table, so
//! a run kept as text (docs/benchmarks/dataplane-*.txt) can be re-plotted
//! without running again.

use std::fmt::Write;

/// One row of the benchmark's table.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportRow {
    pub workload: String,
    /// `Sync`, `Async/PD`, `Async/Context`.
    pub mode: String,
    /// `inline`, `N extern core(s)`, `inline device`.
    pub executor: String,
    pub workers: u32,
    pub threads: u32,
    /// Needs more threads than the machine has cores.
    pub over: bool,
    pub mpps: f64,
    pub mpps_min: f64,
    pub mpps_max: f64,
    pub cpu_got: f64,
    pub worker_ns: f64,
    pub extern_ns: f64,
    pub drops_per_s: f64,
}

const COLUMNS: usize = 16;

/// The table rows in `text` (other lines are skipped); a row that does not
/// parse is an error naming its line.
pub fn parse_table(text: &str) -> Result<Vec<ReportRow>, String> {
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('|') || line.starts_with("|---") || line.starts_with("| workload") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let bad = |what: &str| format!("line {}: {what}: {line}", n + 1);
        if cells.len() != COLUMNS {
            return Err(bad(&format!("{} columns, want {COLUMNS}", cells.len())));
        }
        let num = |i: usize| -> Result<f64, String> {
            cells[i]
                .parse::<f64>()
                .map_err(|_| bad(&format!("column {} is not a number", i + 1)))
        };
        let (threads, over) = match cells[4].strip_suffix("(over)") {
            Some(t) => (t.trim(), true),
            None => (cells[4], false),
        };
        let (lo, hi) = cells[6].split_once("..").ok_or_else(|| bad("min..max"))?;
        rows.push(ReportRow {
            workload: cells[0].to_string(),
            mode: cells[1].to_string(),
            executor: cells[2].to_string(),
            workers: num(3)? as u32,
            threads: threads.parse().map_err(|_| bad("threads"))?,
            over,
            mpps: num(5)?,
            mpps_min: lo.parse().map_err(|_| bad("min"))?,
            mpps_max: hi.parse().map_err(|_| bad("max"))?,
            cpu_got: num(8)?,
            worker_ns: num(9)?,
            extern_ns: num(10)?,
            drops_per_s: num(14)?,
        });
    }
    Ok(rows)
}

/// The frame size of a run, from its `machine: ...; frame N B` line.
pub fn frame_bytes(text: &str) -> Option<u32> {
    let rest = text.split("frame ").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

/// The rows as CSV (header first; fields never hold commas).
pub fn csv(rows: &[ReportRow]) -> String {
    let mut s = String::from(
        "workload,mode,executor,workers,threads,oversubscribed,mpps_median,mpps_min,mpps_max,cpu_got,worker_ns_per_pkt,extern_ns_per_pkt,drops_per_s\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.workload,
            r.mode,
            r.executor,
            r.workers,
            r.threads,
            r.over,
            r.mpps,
            r.mpps_min,
            r.mpps_max,
            r.cpu_got,
            r.worker_ns,
            r.extern_ns,
            r.drops_per_s
        );
    }
    s
}

/// The bars of each workload group: (mode, executor, legend label).
const SERIES: [(&str, &str, &str); 5] = [
    ("Sync", "inline", "Sync"),
    (
        "Async/PD",
        "1 extern core(s)",
        "Async, packet descriptor, 1 extern core",
    ),
    (
        "Async/PD",
        "inline device",
        "Async, packet descriptor, inline crypto device",
    ),
    (
        "Async/Context",
        "1 extern core(s)",
        "Async, context, 1 extern core",
    ),
    (
        "Async/Context",
        "inline device",
        "Async, context, inline crypto device",
    ),
];
const COLORS: [&str; 5] = ["#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd"];
const WORKLOADS: [&str; 4] = ["no extern", "empty extern", "encrypt", "encrypt+decrypt"];

/// One panel per `(title, rows)`: for one worker, Mpps (median, min..max
/// whisker) per workload and mode, the no-extern rate and 90 % of it (the
/// async-overhead goal) as dashed lines.
pub fn svg(panels: &[(String, Vec<ReportRow>)]) -> String {
    let (pw, ph) = (460.0, 340.0);
    let (ml, mr, mt, mb) = (55.0, 10.0, 30.0, 40.0);
    let legend_h = 20.0 * SERIES.len() as f64 + 10.0;
    let width = pw * panels.len().max(1) as f64;
    let height = ph + legend_h;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (pi, (title, rows)) in panels.iter().enumerate() {
        let one: Vec<&ReportRow> = rows.iter().filter(|r| r.workers == 1 && !r.over).collect();
        let find = |w: &str, (mode, exec, _): (&str, &str, &str)| {
            one.iter()
                .find(|r| r.workload == w && r.mode == mode && r.executor == exec)
                .copied()
        };
        let ymax_data = one.iter().map(|r| r.mpps_max).fold(0.0, f64::max);
        let step = nice_step(ymax_data / 5.0);
        let ymax = (ymax_data / step).ceil().max(1.0) * step;
        let ox = pi as f64 * pw;
        let (x0, x1, y0, y1) = (ox + ml, ox + pw - mr, ph - mb, mt);
        let ly = |v: f64| y0 - v / ymax * (y0 - y1);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{}</text>"#,
            (x0 + x1) / 2.0,
            esc(title)
        );
        let mut t = 0.0;
        while t <= ymax * 1.0001 {
            let y = ly(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 - 4.0,
                y + 4.0,
                trim_num(t)
            );
            t += step;
        }
        let _ = writeln!(
            s,
            r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle">Mpps (one worker)</text>"#,
            ox + 14.0,
            (y0 + y1) / 2.0
        );
        let gw = (x1 - x0) / WORKLOADS.len() as f64;
        let bw = gw * 0.8 / SERIES.len() as f64;
        for (gi, w) in WORKLOADS.iter().enumerate() {
            let gx = x0 + gi as f64 * gw + gw * 0.1;
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{w}</text>"#,
                x0 + (gi as f64 + 0.5) * gw,
                y0 + 16.0
            );
            for (si, series) in SERIES.iter().enumerate() {
                let Some(r) = find(w, *series) else { continue };
                let bx = gx + si as f64 * bw;
                let _ = writeln!(
                    s,
                    r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{w}, {}: {} Mpps ({}..{})</title></rect>"#,
                    ly(r.mpps),
                    bw - 1.0,
                    y0 - ly(r.mpps),
                    COLORS[si],
                    series.2,
                    r.mpps,
                    r.mpps_min,
                    r.mpps_max
                );
                let cx = bx + (bw - 1.0) / 2.0;
                let _ = writeln!(
                    s,
                    r#"<line x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="black"/>"#,
                    ly(r.mpps_min),
                    ly(r.mpps_max)
                );
            }
        }
        if let Some(base) = find("no extern", SERIES[0]) {
            for (v, label) in [(base.mpps, "no extern"), (base.mpps * 0.9, "90 %")] {
                let y = ly(v);
                let _ = writeln!(
                    s,
                    r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#555" stroke-dasharray="5,4"/><text x="{}" y="{:.1}" text-anchor="end" font-size="10" fill="#555">{label}</text>"##,
                    x1 - 2.0,
                    y - 3.0
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<rect x="{x0}" y="{y1}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            x1 - x0,
            y0 - y1
        );
    }
    for (si, (_, _, label)) in SERIES.iter().enumerate() {
        let y = ph + 5.0 + si as f64 * 20.0;
        let _ = writeln!(
            s,
            r#"<rect x="{ml}" y="{y}" width="14" height="12" fill="{}"/><text x="{}" y="{}">{label}</text>"#,
            COLORS[si],
            ml + 20.0,
            y + 10.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// 1, 2 or 5 times a power of ten, at least `x`.
fn nice_step(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|v| *v >= x)
        .unwrap_or(10.0 * p)
}

fn trim_num(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
load average before: 0.59 1.27 1.27; cross-core round trip: 299 ns
machine: 2 cores; frame 64 B, 16 flows, rx burst 32
round 1/3: 3 rows
| workload | mode | executor | workers | threads | Mpps (median) | min..max | vs no extern | CPU got | worker ns/pkt | extern-core ns/pkt | Mpps per worker CPU | latency p50 / p99 (µs) | extern p50 / p99 (µs) | drops/s | allocs/pkt |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| no extern | Sync | inline | 1 | 1 | 13.75 | 13.35..13.76 | +0 % | 1.00 | 73 | 0 | 13.75 | 2.0 / 2.0 | - | 0 | 0.0000 |
| encrypt | Async/PD | 1 extern core(s) | 1 | 2 | 9.30 | 7.44..9.77 | -32 % | 1.98 | 106 | 107 | 9.44 | 6.1 / 22.5 | 5.6 / 20.5 | 56257 | 0.0000 |
| encrypt | Async/PD | 2 extern core(s) | 1 | 3 (over) | 1.80 | 1.69..1.85 | -87 % | 1.97 | 549 | 546 | 1.82 | 426.0 / 2097.2 | 426.0 / 2097.2 | 9517486 | 0.0000 |
";

    #[test]
    fn the_printed_table_reads_back() {
        let rows = parse_table(RUN).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].executor, "1 extern core(s)");
        assert_eq!(
            (rows[1].mpps, rows[1].mpps_min, rows[1].mpps_max),
            (9.30, 7.44, 9.77)
        );
        assert_eq!((rows[1].worker_ns, rows[1].drops_per_s), (106.0, 56257.0));
        assert!(!rows[1].over && rows[2].over);
        assert_eq!(rows[2].threads, 3);
        assert_eq!(frame_bytes(RUN), Some(64));
        let bad = RUN.replace("| 13.75 | 13.35", "| fast | 13.35");
        assert!(parse_table(&bad).unwrap_err().starts_with("line 6:"));
    }

    #[test]
    fn csv_has_a_line_per_row() {
        let c = csv(&parse_table(RUN).unwrap());
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[2],
            "encrypt,Async/PD,1 extern core(s),1,2,false,9.3,7.44,9.77,1.98,106,107,56257"
        );
    }

    #[test]
    fn the_plot_has_a_bar_per_one_worker_row_that_fits() {
        let rows = parse_table(RUN).unwrap();
        let svg = svg(&[("64-byte frames".into(), rows)]);
        // Two bars: the oversubscribed row is left out.
        assert_eq!(svg.matches("<title>").count(), 2, "{svg}");
        assert!(svg.contains("encrypt, Async, packet descriptor, 1 extern core: 9.3 Mpps"));
        assert!(svg.contains(">90 %</text>"));
        assert!(svg.ends_with("</svg>\n"));
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(2.75), 5.0);
        assert_eq!(nice_step(0.21), 0.5);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(0.0), 1.0);
    }
}
