use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
use datafusion::common::DFSchemaRef;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::prelude::SessionContext;

use super::{Grain, grain, unshifted};
use crate::cube::unit::Unit;

const UNITS: [Unit; 8] = [
    Unit::Second,
    Unit::Minute,
    Unit::Hour,
    Unit::Day,
    Unit::Week,
    Unit::Month,
    Unit::Quarter,
    Unit::Year,
];

/// Instants every 7 min 13.5 s over 400 days from 2025-12-01 (two new
/// years, every kind of week, month and quarter boundary), and some before
/// 1970, where truncation rounds down through negative values.
fn context() -> SessionContext {
    const START: i64 = 1_764_547_200_000_000_000; // 2025-12-01
    const STEP: i64 = 433_500_000_000;
    let mut ns: Vec<i64> = (0..400 * 86_400_000_000_000 / STEP)
        .map(|i| START + i * STEP)
        .collect();
    ns.extend((0..2_000).map(|i| -86_400_000_000_000 * 40 + i * STEP));
    let schema = Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new(
            "tz",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("+02:00".into())),
            false,
        ),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(TimestampNanosecondArray::from(ns.clone())),
            Arc::new(TimestampNanosecondArray::from(ns).with_timezone("+02:00")),
        ],
    )
    .unwrap();
    let ctx = SessionContext::new();
    crate::functions::register(&ctx);
    let table = MemTable::try_new(schema, vec![vec![batch]]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    ctx
}

/// `form` as the rule sees it: planned, simplified and resolved; and the
/// schema it is over.
async fn planned(ctx: &SessionContext, form: &str) -> (Expr, DFSchemaRef) {
    let plan = ctx
        .sql(&format!("SELECT {form} AS v FROM t"))
        .await
        .unwrap()
        .into_optimized_plan()
        .unwrap();
    let LogicalPlan::Projection(p) = plan else {
        panic!("{form}: {plan}")
    };
    (p.expr[0].clone().unalias(), p.input.schema().clone())
}

/// `form`'s grain and the shift of its timestamp.
async fn grain_of(ctx: &SessionContext, form: &str) -> Option<(Grain, i128)> {
    let (e, schema) = planned(ctx, form).await;
    // A shift of the form's value is a function of the value (the rule
    // derives it as any other).
    let (e, _) = unshifted(&e, &schema);
    let (g, ts) = grain(e, &schema)?;
    let (ts, shift) = unshifted(ts, &schema);
    assert!(matches!(ts, Expr::Column(c) if c.name == "ts" || c.name == "tz"));
    Some((g, shift))
}

/// Rows where `form` of the instant differs from `form` of the instant
/// truncated to `unit`.
async fn differing(ctx: &SessionContext, form: &str, unit: Unit) -> i64 {
    let truncated = form.replace(
        "ts",
        &format!("date_trunc('{}', ts)", format!("{unit:?}").to_lowercase()),
    );
    let sql = format!("SELECT count(*) FROM t WHERE ({form}) IS DISTINCT FROM ({truncated})");
    let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

#[tokio::test]
async fn a_function_of_a_bucket_equals_itself_of_the_truncated_instant() {
    let ctx = context();
    let forms = [
        "CAST(ts AS DATE)",
        "date_trunc('week', ts)",
        "date_part('year', ts)",
        "extract(quarter FROM ts)",
        "extract(month FROM ts)",
        "extract(week FROM ts)",
        "extract(day FROM ts)",
        "extract(dow FROM ts)",
        "extract(isodow FROM ts)",
        "extract(doy FROM ts)",
        "extract(hour FROM ts)",
        "extract(minute FROM ts)",
        "date_bin(INTERVAL '2 hours', ts)",
        "date_bin(INTERVAL '90 minutes', ts)",
        "date_bin(INTERVAL '1 day', ts, TIMESTAMP '2000-01-01 06:00:00')",
        "date_bin(INTERVAL '3 days', ts, TIMESTAMP '2000-01-01')",
        "time_bucket(INTERVAL '7 days', ts)",
        "time_bucket(INTERVAL '5 minutes', ts)",
        // Grafana's `$__timeGroup`: hours, days and weeks from a Thursday.
        "floor(extract(epoch FROM ts) / 3600)",
        "floor(date_part('epoch', ts) / 86400)",
        "floor(extract(epoch FROM ts) / 604800)",
        "floor(extract(epoch FROM ts) / 300)",
        "floor(extract(epoch FROM ts - INTERVAL '1 hour') / 7200)",
        // Shifted by whole buckets of some units: weeks from Sunday, as
        // Metabase and Superset write them, days of a local time.
        "date_trunc('week', ts + INTERVAL '1 day') - INTERVAL '1 day'",
        "date_trunc('week', ts + INTERVAL '1 day') + INTERVAL '5 days'",
        "CAST(ts + INTERVAL '2 hours' AS DATE)",
        "date_trunc('day', ts - INTERVAL '30 minutes')",
        "extract(dow FROM ts + INTERVAL '1 day' - INTERVAL '3 hours')",
        "extract(hour FROM INTERVAL '90 minutes' + ts)",
        "time_bucket(INTERVAL '1 day', ts + INTERVAL '7 days')",
    ];
    let mut equal = 0;
    for form in forms {
        let (g, shift) = grain_of(&ctx, form)
            .await
            .unwrap_or_else(|| panic!("{form}"));
        for unit in UNITS {
            let n = differing(&ctx, form, unit).await;
            // Constant over the unit exactly when the grain says so.
            assert_eq!(
                n == 0,
                g.over(unit, shift),
                "{form} over {unit:?}: {n} rows differ"
            );
            equal += usize::from(n == 0);
        }
    }
    // Both answers occur: each form is finer than a year, and not every
    // one is coarser than a second.
    assert!(equal > forms.len() && equal < forms.len() * UNITS.len());
}

#[tokio::test]
async fn other_expressions_have_no_grain() {
    let ctx = context();
    for form in [
        // Finer than any bucket.
        "extract(second FROM ts)",
        "extract(epoch FROM ts)",
        "extract(millisecond FROM ts)",
        // A date in another time zone than the instant's own.
        "CAST(tz AS DATE)",
        "extract(hour FROM tz)",
        "date_bin(INTERVAL '1 hour', tz)",
        // A stride of months varies in length.
        "date_bin(INTERVAL '1 month', ts)",
        "CAST(ts AS VARCHAR)",
        "ts",
        // Bins of a fraction of a second, of no whole seconds, of another
        // field; an epoch not floored.
        "floor(extract(epoch FROM ts) / 0.5)",
        "floor(extract(epoch FROM ts) / 90.5)",
        "floor(extract(epoch FROM ts) / -3600)",
        "floor(extract(epoch FROM ts) / 1e300)",
        "floor(extract(second FROM ts) / 60)",
        "floor(extract(epoch FROM tz) / 3600)",
        "extract(epoch FROM ts) / 3600",
    ] {
        assert_eq!(grain_of(&ctx, form).await, None, "{form}");
    }
}

#[tokio::test]
async fn shifts_of_varying_length_or_zone_are_not_unshifted() {
    let ctx = context();
    // A month varies in length; so does a day with a time zone.
    for (form, arg) in [
        ("date_trunc('day', ts + INTERVAL '1 month')", "ts + "),
        ("date_trunc('day', tz + INTERVAL '1 day')", "tz + "),
    ] {
        let (e, schema) = planned(&ctx, form).await;
        let (_, ts) = grain(&e, &schema).unwrap();
        let (base, shift) = unshifted(ts, &schema);
        assert_eq!((base, shift), (ts, 0), "{form}");
        assert!(base.to_string().contains(arg), "{form}: {base}");
    }
}

#[test]
fn bins_hold_whole_buckets_of_the_units_dividing_stride_and_origin() {
    const HOUR: i64 = 3_600_000_000_000;
    let bins = |stride, origin| Grain::Bins { stride, origin };
    assert!(bins(2 * HOUR, 0).over(Unit::Hour, 0));
    assert!(!bins(2 * HOUR, 0).over(Unit::Day, 0));
    assert!(!bins(2 * HOUR, HOUR / 2).over(Unit::Hour, 0));
    assert!(bins(2 * HOUR, HOUR / 2).over(Unit::Minute, 0));
    assert!(bins(24 * HOUR, -24 * HOUR).over(Unit::Day, 0));
    // Weeks start on Mondays; 1970-01-01 was a Thursday.
    assert!(!bins(7 * 24 * HOUR, 0).over(Unit::Week, 0));
    assert!(bins(14 * 24 * HOUR, 4 * 24 * HOUR).over(Unit::Week, 0));
    // Months vary in length.
    assert!(!bins(31 * 24 * HOUR, 0).over(Unit::Month, 0));
    assert!(Grain::Unit(Unit::Day).over(Unit::Hour, 0));
    assert!(!Grain::Unit(Unit::Month).over(Unit::Week, 0));
    // Shifted by whole buckets of the finer unit, of fixed length.
    const DAY: i128 = 24 * HOUR as i128;
    assert!(Grain::Unit(Unit::Week).over(Unit::Day, DAY));
    assert!(Grain::Unit(Unit::Month).over(Unit::Hour, -DAY));
    assert!(!Grain::Unit(Unit::Week).over(Unit::Week, DAY));
    assert!(Grain::Unit(Unit::Week).over(Unit::Week, 7 * DAY));
    assert!(!Grain::Unit(Unit::Day).over(Unit::Hour, DAY / 48));
    assert!(!Grain::Unit(Unit::Year).over(Unit::Month, 31 * DAY));
    assert!(bins(2 * HOUR, 0).over(Unit::Hour, 3 * HOUR as i128));
}
