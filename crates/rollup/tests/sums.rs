//! `sum(x)` of doubles is the exact sum rounded once to the nearest double
//! (ties to even), for any order of the values and any split of them into
//! partial states merged in any order. The oracle is a plain big integer
//! written here: each double is an integer number of 2^-1074, and a double
//! `c` is the correctly rounded value of an exact `x` when `2x` lies between
//! `c + down(c)` and `c + up(c)` (a tie only towards an even `c`).

// The oracle splits integers into digits and picks indexes with casts.
#![allow(clippy::cast_possible_truncation)]

use cardinal_rollup::{AggKind, AggState, Input, Output};
use proptest::prelude::*;

/// Signed big integer in units of 2^-1074: sign and magnitude, base 2^32
/// digits, little-endian.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big {
    negative: bool,
    digits: Vec<u64>, // each < 2^32
}

impl Big {
    fn zero() -> Self {
        Big {
            negative: false,
            digits: Vec::new(),
        }
    }

    /// The finite double `v` in units of 2^-1074.
    fn of(v: f64) -> Self {
        assert!(v.is_finite());
        let bits = v.to_bits();
        let exponent = (bits >> 52) & 0x7ff;
        let fraction = bits & ((1 << 52) - 1);
        let (mantissa, shift) = if exponent == 0 {
            (fraction, 0)
        } else {
            (fraction | 1 << 52, exponent - 1)
        };
        // mantissa << shift: whole digits of zeros, then the 53 bits
        // shifted within three digits.
        let mut digits = vec![0u64; (shift / 32) as usize];
        let shifted = u128::from(mantissa) << (shift % 32);
        digits.extend([
            (shifted & 0xFFFF_FFFF) as u64,
            ((shifted >> 32) & 0xFFFF_FFFF) as u64,
            (shifted >> 64) as u64,
        ]);
        let mut big = Big {
            negative: bits >> 63 == 1,
            digits,
        };
        big.trim();
        big
    }

    /// 2^(1024 + 1074): one unit past the largest double's binade.
    fn two_to_1024() -> Self {
        let mut digits = vec![0; 2098 / 32 + 1];
        digits[2098 / 32] = 1 << (2098 % 32);
        Big {
            negative: false,
            digits,
        }
    }

    fn trim(&mut self) {
        while self.digits.last() == Some(&0) {
            self.digits.pop();
        }
        if self.digits.is_empty() {
            self.negative = false;
        }
    }

    fn compare_magnitude(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
        a.len()
            .cmp(&b.len())
            .then_with(|| a.iter().rev().cmp(b.iter().rev()))
    }

    fn add(&self, other: &Big) -> Big {
        let mut out = if self.negative == other.negative {
            let mut digits = Vec::new();
            let mut carry = 0;
            for i in 0..self.digits.len().max(other.digits.len()) {
                let sum =
                    self.digits.get(i).unwrap_or(&0) + other.digits.get(i).unwrap_or(&0) + carry;
                digits.push(sum & 0xFFFF_FFFF);
                carry = sum >> 32;
            }
            digits.push(carry);
            Big {
                negative: self.negative,
                digits,
            }
        } else {
            let (large, small) = if Big::compare_magnitude(&self.digits, &other.digits).is_ge() {
                (self, other)
            } else {
                (other, self)
            };
            let mut digits = Vec::new();
            let mut borrow = 0i64;
            for i in 0..large.digits.len() {
                let mut d =
                    large.digits[i] as i64 - *small.digits.get(i).unwrap_or(&0) as i64 - borrow;
                borrow = 0;
                if d < 0 {
                    d += 1 << 32;
                    borrow = 1;
                }
                digits.push(d as u64);
            }
            Big {
                negative: large.negative,
                digits,
            }
        };
        out.trim();
        out
    }

    fn cmp(&self, other: &Big) -> std::cmp::Ordering {
        let difference = self.add(&Big {
            negative: !other.negative,
            digits: other.digits.clone(),
        });
        if difference.digits.is_empty() {
            std::cmp::Ordering::Equal
        } else if difference.negative {
            std::cmp::Ordering::Less
        } else {
            std::cmp::Ordering::Greater
        }
    }
}

fn next_up(v: f64) -> f64 {
    if v == 0.0 {
        return f64::from_bits(1);
    }
    let bits = v.to_bits();
    f64::from_bits(if v > 0.0 { bits + 1 } else { bits - 1 })
}

fn next_down(v: f64) -> f64 {
    -next_up(-v)
}

/// Checks that `found` is `exact` rounded to the nearest double, ties to
/// even, or an infinity of its sign past the largest double.
fn check_rounding(exact: &Big, found: f64) -> Result<(), TestCaseError> {
    let limit = Big::two_to_1024().add(&Big::of(-f64::MAX)); // one ulp of MAX
    // Overflow: |x| >= MAX + ulp/2, that is 2|x| >= 2 MAX + ulp.
    let twice = exact.add(exact);
    let bound = Big::of(f64::MAX).add(&Big::of(f64::MAX)).add(&limit);
    let magnitude = Big {
        negative: false,
        digits: twice.digits.clone(),
    };
    if magnitude.cmp(&bound).is_ge() {
        let want = if exact.negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
        prop_assert_eq!(found, want);
        return Ok(());
    }
    prop_assert!(found.is_finite(), "{} for a finite sum", found);
    let c = Big::of(found);
    let even = found.to_bits() & 1 == 0;
    // Past the largest double, the next step is 2^1024.
    let neighbour = |v: f64| {
        if v.is_finite() {
            Big::of(v)
        } else {
            Big {
                negative: v < 0.0,
                digits: Big::two_to_1024().digits,
            }
        }
    };
    let low = c.add(&neighbour(next_down(found)));
    let high = c.add(&neighbour(next_up(found)));
    let above_low = twice.cmp(&low);
    let below_high = twice.cmp(&high);
    prop_assert!(
        above_low.is_gt() || (above_low.is_eq() && even),
        "{:e} is above the exact sum's nearest double",
        found
    );
    prop_assert!(
        below_high.is_lt() || (below_high.is_eq() && even),
        "{:e} is below the exact sum's nearest double",
        found
    );
    Ok(())
}

/// Doubles of every size and sign: tiny (subnormal too), ordinary, huge,
/// and multiples of 2^-64 that stay in the fixed point.
fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        (any::<u64>(), -1074i32..1024).prop_map(|(bits, exponent)| {
            let mantissa = (bits >> 11) as f64 / (1u64 << 53) as f64 + 0.5;
            let v =
                mantissa * 2f64.powi(exponent.min(1023)) * if bits & 1 == 1 { -1.0 } else { 1.0 };
            if v.is_finite() { v } else { 1.0 }
        }),
        any::<u64>().prop_map(|bits| {
            let v = f64::from_bits(bits);
            if v.is_finite() { v } else { -0.5 }
        }),
        (-1_000_000i64..1_000_000).prop_map(|cents| cents as f64 / 100.0),
        (any::<i32>(), 0i32..80).prop_map(|(m, e)| f64::from(m) * 2f64.powi(-e)),
        Just(1e-20),
        Just(3e-19),
        Just(f64::MAX),
        Just(-f64::MAX),
        Just(5e-324),
    ]
}

fn sum_of(states: Vec<AggState>) -> f64 {
    let mut states = states.into_iter();
    let mut total = states.next().expect("one state");
    for state in states {
        total.merge(&state).expect("same kind");
    }
    match total.output(&AggKind::Sum) {
        Output::Number(Some(v)) => v,
        other => panic!("{other:?}"),
    }
}

fn fold(values: &[f64]) -> AggState {
    let mut state = AggKind::Sum.state().expect("valid");
    for &v in values {
        state.fold(&AggKind::Sum, Input::Number(v));
    }
    state
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_permutation_and_split_gives_the_rounded_exact_sum(
        values in prop::collection::vec(double(), 1..40),
        order in any::<u64>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let mut exact = Big::zero();
        for &v in &values {
            exact = exact.add(&Big::of(v));
        }
        // A permutation from the seed.
        let mut permuted = values.clone();
        let mut state = order | 1;
        for i in (1..permuted.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            permuted.swap(i, (state % (i as u64 + 1)) as usize);
        }
        // Split at the cuts, and merge the parts in reverse.
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(permuted.len() + 1)).collect();
        cuts.push(0);
        cuts.push(permuted.len());
        cuts.sort_unstable();
        let parts: Vec<AggState> = cuts
            .windows(2)
            .rev()
            .map(|w| fold(&permuted[w[0]..w[1]]))
            .collect();
        let found = sum_of(parts);
        check_rounding(&exact, found)?;
        prop_assert_eq!(found.to_bits() | (1 << 63), sum_of(vec![fold(&values)]).to_bits() | (1 << 63));
    }
}

#[test]
fn small_values_are_not_dropped() {
    // The double nearest 1000 times the double nearest 1e-20.
    let sum = sum_of(vec![fold(&[1e-20; 1000])]);
    assert_eq!(sum, 9.999_999_999_999_999e-18);
    let mut avg = fold(&[3e-19, 3e-19]);
    avg.merge(&fold(&[])).expect("same kind");
    assert_eq!(avg.output(&AggKind::Avg), Output::Number(Some(3e-19)));
    assert_eq!(sum_of(vec![fold(&[1e300, 1.0]), fold(&[-1e300])]), 1.0);
    assert_eq!(
        sum_of(vec![fold(&[f64::MAX]), fold(&[f64::MAX])]),
        f64::INFINITY
    );
}
