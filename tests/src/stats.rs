//! Order statistics for the benchmark binaries: medians and percentiles of timed samples.

use std::time::Duration;

/// The `p` quantile (0.0..=1.0) of `samples`, nearest rank; zero for no samples.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let idx = ((sorted.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
    sorted[idx]
}

pub fn median(samples: &[Duration]) -> Duration {
    percentile(samples, 0.5)
}

pub fn p99(samples: &[Duration]) -> Duration {
    percentile(samples, 0.99)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        assert_eq!(median(&ms(&[5, 1, 3])), Duration::from_millis(3));
        assert_eq!(median(&ms(&[4, 1, 3, 2])), Duration::from_millis(3));
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(p99(&ms(&hundred)), Duration::from_millis(99));
        assert_eq!(percentile(&ms(&hundred), 1.0), Duration::from_millis(100));
        assert_eq!(median(&[]), Duration::ZERO);
    }
}
