//! Medians, percentiles, rates and number formatting.

use std::time::{Duration, Instant};

/// Median of `values` (mean of the two middle ones for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile (`p` in 0..=100) of a sorted slice; NaN when empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub samples: usize,
}

impl Latency {
    pub fn of(samples: &[Duration]) -> Latency {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        Latency { p50_ms: percentile_sorted(&ms, 50.0), p99_ms: percentile_sorted(&ms, 99.0), samples: ms.len() }
    }
}

/// Operations per second.
pub fn rate(ops: usize, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        return f64::NAN;
    }
    ops as f64 / elapsed.as_secs_f64()
}

/// Completion rate between the `lo` and `hi` fractions of completions
/// (e.g. 10 % and 90 %): the steady state, without start-up and tail.
pub fn steady_rate(completions: &[Instant], lo: f64, hi: f64) -> f64 {
    let mut t: Vec<Instant> = completions.to_vec();
    t.sort();
    if t.len() < 10 {
        return f64::NAN;
    }
    let a = ((t.len() as f64 * lo) as usize).min(t.len() - 1);
    let b = ((t.len() as f64 * hi) as usize).min(t.len() - 1);
    if b <= a {
        return f64::NAN;
    }
    rate(b - a, t[b].duration_since(t[a]))
}

/// A number with thousands separators and `decimals` decimals ("12 345.6").
pub fn num(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = s.split_once('.').map(|(a, b)| (a.to_owned(), Some(b.to_owned()))).unwrap_or((s.clone(), None));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if x < 0.0 && x.abs() >= 0.5 * 10f64.powi(-(decimals as i32)) { "-" } else { "" };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// Rate, rounded sensibly for its size.
pub fn ops(x: f64) -> String {
    if x.is_finite() && x < 100.0 {
        num(x, 1)
    } else {
        num(x, 0)
    }
}

/// Milliseconds with two decimals below 10 ms, one above.
pub fn ms(x: f64) -> String {
    if x.is_finite() && x < 10.0 {
        num(x, 2)
    } else {
        num(x, 1)
    }
}

/// A ratio as "0.42×".
pub fn ratio(x: f64) -> String {
    if x.is_finite() && x < 10.0 {
        format!("{}×", num(x, 2))
    } else {
        format!("{}×", num(x, 1))
    }
}

/// KiB as MiB with one decimal.
pub fn mib(kib: f64) -> String {
    format!("{} MiB", num(kib / 1024.0, 1))
}

/// Bytes per item, as KiB with two decimals.
pub fn kib_each(kib_total: f64, items: usize) -> String {
    if items == 0 {
        return "n/a".into();
    }
    format!("{} KiB", num(kib_total / items as f64, 2))
}

/// Seconds with two decimals.
pub fn secs(d: Duration) -> String {
    format!("{} s", num(d.as_secs_f64(), 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile_sorted(&v, 50.0), 50.0);
        assert_eq!(percentile_sorted(&v, 99.0), 99.0);
        assert_eq!(percentile_sorted(&v, 100.0), 100.0);
        assert_eq!(percentile_sorted(&[7.0], 99.0), 7.0);
    }

    #[test]
    fn formatting() {
        assert_eq!(num(1234567.891, 1), "1,234,567.9");
        assert_eq!(num(12.0, 0), "12");
        assert_eq!(num(-1234.0, 0), "-1,234");
        assert_eq!(num(f64::NAN, 1), "n/a");
        assert_eq!(ratio(0.4567), "0.46×");
        assert_eq!(ops(45.67), "45.7");
        assert_eq!(ops(4567.4), "4,567");
    }

    #[test]
    fn steady_rate_ignores_the_edges() {
        let t0 = Instant::now();
        // 100 completions 10 ms apart, then one straggler a second later.
        let mut t: Vec<Instant> = (0..100).map(|i| t0 + Duration::from_millis(10 * i)).collect();
        t.push(t0 + Duration::from_secs(2));
        let r = steady_rate(&t, 0.1, 0.9);
        assert!((r - 100.0).abs() < 1.0, "{r}");
    }
}
