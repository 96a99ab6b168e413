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
