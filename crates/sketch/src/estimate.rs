//! [`Estimate`]: an approximate number with its error bar.
//!
//! Every approximate answer in cardinal carries an interval (PRODUCT.md,
//! "Accuracy is a feature"). Exact answers are estimates whose bounds equal
//! the value.

/// Two-sided confidence used for intervals unless a method says otherwise.
pub const CONFIDENCE_DEFAULT: f64 = 0.95;

/// The standard normal quantile for a two-sided 95% interval, z_{0.975}.
pub const Z_95: f64 = 1.959_963_984_540_054;

/// An approximate value with a confidence interval `lower..=upper`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The point estimate.
    pub value: f64,
    /// Lower bound of the interval (never negative for counts).
    pub lower: f64,
    /// Upper bound of the interval.
    pub upper: f64,
    /// Two-sided confidence of `lower..=upper`, in (0, 1]; 1 means exact.
    pub confidence: f64,
}

impl Estimate {
    /// An exact value: both bounds equal it and the confidence is 1.
    pub fn exact(value: f64) -> Self {
        Self {
            value,
            lower: value,
            upper: value,
            confidence: 1.0,
        }
    }

    /// A count estimate with a symmetric normal interval of `z` standard
    /// errors, clamped below at `floor` (the count already proven, e.g. 0).
    pub fn normal(value: f64, standard_error: f64, floor: f64) -> Self {
        assert!(standard_error >= 0.0, "standard error must not be negative");
        let lower = (value - Z_95 * standard_error).max(floor);
        let upper = value + Z_95 * standard_error;
        Self {
            value,
            lower,
            upper,
            confidence: CONFIDENCE_DEFAULT,
        }
    }

    /// Whether the answer is exact (no sampling or hashing error).
    pub fn is_exact(&self) -> bool {
        self.confidence >= 1.0
    }

    /// Whether the interval contains zero: the quantity is below what the
    /// sketch can detect, and a user should be told so instead of being shown
    /// a number that looks precise.
    pub fn below_detection_limit(&self) -> bool {
        !self.is_exact() && self.lower <= 0.0
    }
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_exact() {
            write!(f, "{:.0} (exact)", self.value)
        } else if self.below_detection_limit() {
            write!(
                f,
                "below detection limit (95% interval {:.0}..{:.0})",
                self.lower, self.upper
            )
        } else {
            write!(
                f,
                "{:.0} (95% interval {:.0}..{:.0})",
                self.value, self.lower, self.upper
            )
        }
    }
}
