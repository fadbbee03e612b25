//! Percentiles and medians of samples.

use std::time::Duration;

/// p50 and p99 of latency samples, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Lat {
    /// Median, ms.
    pub p50: f64,
    /// 99th percentile, ms.
    pub p99: f64,
}

/// The p50/p99 of `samples` (nearest rank); zeros when empty.
pub fn lat(mut samples: Vec<Duration>) -> Lat {
    if samples.is_empty() {
        return Lat { p50: 0.0, p99: 0.0 };
    }
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    Lat {
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// The median of `v` (upper median for an even count); 0 when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median of `a[i] / b[i]`: the ratio of adjacent samples (taken one after the other), which
/// cancels the disk's drift better than a ratio of two medians; 0 when empty.
pub fn paired_ratio(a: &[Duration], b: &[Duration]) -> f64 {
    median(
        a.iter()
            .zip(b)
            .filter(|(_, y)| !y.is_zero())
            .map(|(x, y)| x.as_secs_f64() / y.as_secs_f64())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let l = lat(v);
        assert!((l.p50 - 51.0).abs() < 1e-9 || (l.p50 - 50.0).abs() < 1e-9);
        assert!((l.p99 - 99.0).abs() < 1.0 + 1e-9);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        let ms = Duration::from_millis;
        // A slow moment slows both samples of a pair: the paired ratio stays 2.
        let a = [ms(2), ms(2), ms(80)];
        let b = [ms(1), ms(1), ms(40)];
        assert_eq!(paired_ratio(&a, &b), 2.0);
    }
}
