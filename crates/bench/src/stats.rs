//! The statistics the benchmark and the lab (`quicknat-lab`) report their rounds with, in
//! one place so both use the same rule. No dependencies, no I/O.

/// The median of a set of measurements (the upper middle one for an even count; 0 for
/// none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_takes_the_upper_middle_and_is_zero_when_empty() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0]), 3.0);
        assert_eq!(median(vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(vec![f64::NAN, 1.0, 2.0]), 2.0, "NaN sorts last");
    }
}
