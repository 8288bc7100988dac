//! The few distribution functions the tests need: two-sided p-values and
//! 97.5% quantiles of Student's t and the standard normal, agreeing with
//! scipy to ~1e-12. The t quantile starts from statrs' inverse CDF and is
//! polished by Newton steps on the CDF (statrs' regularized incomplete beta
//! is accurate, its inverse less so). The normal p-value uses libm's `erfc`:
//! statrs' `erfc` is off by ~5e-11 relative near 1.4.

use statrs::distribution::{Continuous, ContinuousCDF, Normal, StudentsT};
use statrs::function::beta::beta_reg;

/// Two-sided p-value of `t` under Student's t with `df` degrees of freedom.
pub fn t_two_sided_p(t: f64, df: f64) -> f64 {
    // P(|T| > |t|) = I_{df/(df+t^2)}(df/2, 1/2), without a 1 - x cancellation.
    beta_reg(df / 2.0, 0.5, df / (df + t * t))
}

/// Two-sided p-value of `z` under the standard normal.
pub fn z_two_sided_p(z: f64) -> f64 {
    libm::erfc(z.abs() / std::f64::consts::SQRT_2)
}

/// The `p` quantile of Student's t with `df` degrees of freedom.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let d = StudentsT::new(0.0, 1.0, df).expect("df > 0");
    newton(p, d.inverse_cdf(p), |x| d.cdf(x), |x| d.pdf(x))
}

/// The `p` quantile of the standard normal.
pub fn z_quantile(p: f64) -> f64 {
    // statrs' inverse normal CDF is accurate to ~1e-16 as is.
    Normal::standard().inverse_cdf(p)
}

fn newton(p: f64, mut x: f64, cdf: impl Fn(f64) -> f64, pdf: impl Fn(f64) -> f64) -> f64 {
    for _ in 0..4 {
        let f = pdf(x);
        if f <= 0.0 || !f.is_finite() {
            break;
        }
        let step = (cdf(x) - p) / f;
        x -= step;
        if step.abs() <= 1e-15 * x.abs() {
            break;
        }
    }
    x
}
