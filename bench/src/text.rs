//! Number formatting shared by the bench reports.

/// `1234567.8` → `1,234,568`.
pub fn thousands(v: f64) -> String {
    // `+ 0.0` turns -0.0 into 0.0.
    let s = format!("{:.0}", v.max(0.0) + 0.0);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An axis tick: `2M`, `30k`, `100`, and below 1 (seconds) `5ms`, `20µs`.
pub fn tick(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{}k", v / 1e3)
    } else if v >= 1.0 {
        format!("{v}")
    } else if v >= 1e-3 {
        format!("{}ms", v * 1e3)
    } else {
        format!("{}µs", v * 1e6)
    }
}
