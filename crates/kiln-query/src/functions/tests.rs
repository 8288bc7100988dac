//! Unit tests of the functions' building blocks. SQL behaviour is covered
//! by `tests/slt/fn_*.slt`, scipy agreement by `tests/scipy_reference.rs`.

use super::distributions::{t_quantile, t_two_sided_p, z_quantile, z_two_sided_p};
use super::funnel::funnel_level;
use super::pg_format::translate;
use super::stats::Moments;

fn close(got: f64, want: f64, rel: f64) {
    assert!(
        ((got - want) / want).abs() <= rel,
        "got {got:?}, want {want:?}"
    );
}

/// Reference values: scipy 1.17.1 `stats.t.ppf(0.975, df)` and
/// `2 * stats.t.sf(sqrt(3), df)`, `stats.norm.ppf(0.975)`,
/// `2 * stats.norm.sf(1.6397102382896316)`.
#[test]
fn distributions_match_scipy() {
    let t = 3f64.sqrt();
    for (df, q, p) in [
        (1.0, 12.706204736174694, 0.33333333333333337),
        (4.411764705882353, 2.677173578465619, 0.15158050484530375),
        (12.973251034758189, 2.1608215437794116, 0.10695598913625794),
        (1000.0, 1.9623390808264083, 0.08357287713077693),
    ] {
        close(t_quantile(0.975, df), q, 1e-11);
        close(t_two_sided_p(t, df), p, 1e-11);
        close(t_two_sided_p(-t, df), p, 1e-11);
    }
    close(z_quantile(0.975), 1.959963984540054, 1e-13);
    close(z_two_sided_p(1.6397102382896316), 0.1010654291543962, 1e-12);
    close(
        z_two_sided_p(-1.6397102382896316),
        0.1010654291543962,
        1e-12,
    );
}

#[test]
fn moments_merge_equals_sequential() {
    let xs: Vec<f64> = (0..1000)
        .map(|i| 1e9 + ((i * 7919) % 101) as f64 * 0.25)
        .collect();
    let mut all = Moments::default();
    xs.iter().for_each(|x| all.push(*x));
    let mut merged = Moments::default();
    for chunk in xs.chunks(37) {
        let mut part = Moments::default();
        chunk.iter().for_each(|x| part.push(*x));
        merged.merge(&part);
    }
    merged.merge(&Moments::default());
    assert_eq!(merged.n, all.n);
    close(merged.mean, all.mean, 1e-15);
    close(merged.m2, all.m2, 1e-9);
    // Two-pass variance as the reference: Welford keeps precision at 1e9.
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let m2: f64 = xs.iter().map(|x| (x - mean) * (x - mean)).sum();
    close(all.m2, m2, 1e-9);
}

#[test]
fn funnel_follows_clickhouse_default_mode() {
    // (ts, condition index), unsorted on purpose.
    let mut chain = vec![(20, 2), (0, 0), (10, 1)];
    assert_eq!(funnel_level(&mut chain, 30, 3), 3);
    assert_eq!(funnel_level(&mut chain, 15, 3), 2);
    assert_eq!(funnel_level(&mut chain, 5, 3), 1);
    // A later first event restarts the chain.
    let mut restart = vec![(0, 0), (100, 0), (105, 1), (110, 2)];
    assert_eq!(funnel_level(&mut restart, 10, 3), 3);
    // Out-of-order steps do not count.
    let mut order = vec![(0, 1), (5, 0), (6, 2)];
    assert_eq!(funnel_level(&mut order, 100, 3), 1);
    // One row satisfying two steps at once advances both (same timestamp).
    let mut same = vec![(7, 1), (7, 0)];
    assert_eq!(funnel_level(&mut same, 0, 2), 2);
    assert_eq!(funnel_level(&mut [], 10, 3), 0);
    assert_eq!(funnel_level(&mut [(1, 0)], 10, 1), 1);
    assert_eq!(funnel_level(&mut [(1, 1)], 10, 2), 0);
}

#[test]
fn postgresql_templates_become_strftime() {
    assert_eq!(translate("YYYY-MM-DD HH24:MI:SS"), "%Y-%m-%d %H:%M:%S");
    assert_eq!(translate("FMDD Mon, HH12 AM"), "%-d %b, %I %p");
    assert_eq!(translate("\"100%\" YY"), "100%% %y");
    assert_eq!(translate("DDD IW MS US"), "%j %V %3f %6f");
}
