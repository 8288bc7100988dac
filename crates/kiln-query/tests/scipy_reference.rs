//! `welch_t_test` and `proportion_z_test` agree with scipy to 1e-9 relative.
//!
//! The expected constants were produced by `bench/reference/ttest.py`
//! (scipy 1.17.1, numpy 2.4.6): `pip install scipy && python3
//! bench/reference/ttest.py`, pasted as printed. The datasets here are the
//! same as in that script. Each answer is checked with half the rows in
//! Parquet segments and half in memory, and again with all rows flushed, so
//! the partial-state merge is covered too.

use arrow::array::{Array, AsArray, StructArray};
use arrow::datatypes::{Float64Type, Int64Type};
use kiln_query::{Engine, Output};
use kiln_storage::{Db, StorageConfig};

const WELCH_SMALL: (&[f64], &[f64]) = (
    &[12.1, 14.3, 11.8, 13.5, 12.9, 15.2, 10.7, 13.0],
    &[14.2, 15.1, 13.8, 16.4, 12.9, 15.7, 14.9],
);
const WELCH_UNEQUAL: (&[f64], &[f64]) = (
    &[
        100.0, 102.5, 98.25, 101.0, 99.5, 100.75, 97.0, 103.25, 100.5, 99.0, 101.5, 98.75,
    ],
    &[104.0, 90.5, 112.25, 99.0, 108.5],
);

/// welch small / unequal, as printed by ttest.py.
const WELCH_SMALL_REF: &[(&str, f64)] = &[
    ("control_mean", 12.9375),
    ("treatment_mean", 14.714285714285714),
    ("diff", 1.7767857142857135),
    ("t", 2.6339008842976988),
    ("df", 12.973251034758189),
    ("p_value", 0.020662893559480616),
    ("ci_low", 0.31913145212399496),
    ("ci_high", 3.2344399764474323),
];
const WELCH_UNEQUAL_REF: &[(&str, f64)] = &[
    ("control_mean", 100.16666666666667),
    ("treatment_mean", 102.85),
    ("diff", 2.683333333333323),
    ("t", 0.6994917038578018),
    ("df", 4.149429134531203),
    ("p_value", 0.5214772353252514),
    ("ci_low", -7.817865542783036),
    ("ci_high", 13.184532209449682),
];

/// (control converted, control n, treatment converted, treatment n)
const PROP_SMALL: (usize, usize, usize, usize) = (9, 40, 14, 35);
const PROP_LARGE: (usize, usize, usize, usize) = (412, 5000, 468, 5100);

const PROP_SMALL_REF: &[(&str, f64)] = &[
    ("control_rate", 0.225),
    ("treatment_rate", 0.4),
    ("diff", 0.17500000000000002),
    ("z", 1.6397102382896316),
    ("p_value", 0.1010654291543962),
    ("ci_low", -0.032575989603312705),
    ("ci_high", 0.38257598960331274),
];
const PROP_LARGE_REF: &[(&str, f64)] = &[
    ("control_rate", 0.0824),
    ("treatment_rate", 0.09176470588235294),
    ("diff", 0.009364705882352942),
    ("z", 1.6684689255283522),
    ("p_value", 0.09522267561628557),
    ("ci_low", -0.0016292766707412028),
    ("ci_high", 0.020358688435447088),
];

/// Expected (field, value) pairs, as printed by ttest.py.
type Reference = &'static [(&'static str, f64)];

/// One row: dataset, arm, value, converted.
type Row = (&'static str, bool, f64, bool);

fn rows() -> Vec<Row> {
    let mut out = vec![];
    for (ds, (c, t)) in [("w_small", WELCH_SMALL), ("w_unequal", WELCH_UNEQUAL)] {
        out.extend(c.iter().map(|v| (ds, false, *v, false)));
        out.extend(t.iter().map(|v| (ds, true, *v, false)));
    }
    for (ds, (xc, nc, xt, nt)) in [("p_small", PROP_SMALL), ("p_large", PROP_LARGE)] {
        out.extend((0..nc).map(|i| (ds, false, 0.0, i < xc)));
        out.extend((0..nt).map(|i| (ds, true, 0.0, i < xt)));
    }
    out
}

async fn insert(engine: &Engine, rows: &[(usize, Row)]) {
    for chunk in rows.chunks(2000) {
        let values: Vec<String> = chunk
            .iter()
            .map(|(i, (ds, treat, v, conv))| {
                // Spread rows over three days, so over several partitions.
                format!(
                    "(TIMESTAMP '2026-03-01T00:00:00' + INTERVAL '{} minutes', '{ds}', {treat}, {v:?}, {conv})",
                    (i * 37) % (3 * 24 * 60)
                )
            })
            .collect();
        let sql = format!("INSERT INTO ab VALUES {}", values.join(", "));
        engine.execute(&sql).await.expect("insert");
    }
}

async fn query_struct(engine: &Engine, sql: &str) -> StructArray {
    let mut out = engine.execute(sql).await.expect("query");
    let Some(Output::Rows { batches, .. }) = out.pop() else {
        panic!("no rows from {sql}")
    };
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    assert_eq!(batch.num_rows(), 1, "{sql}");
    batch.column(0).as_struct().clone()
}

fn check(name: &str, got: &StructArray, want: &[(&str, f64)], counts: (i64, i64)) {
    for (field, expected) in want {
        let col = got
            .column_by_name(field)
            .unwrap_or_else(|| panic!("{name}: no field {field}"));
        assert!(col.is_valid(0), "{name}.{field} is NULL");
        let v = col.as_primitive::<Float64Type>().value(0);
        let rel = ((v - expected) / expected).abs();
        assert!(
            rel <= 1e-9,
            "{name}.{field}: kiln {v:?} vs scipy {expected:?} (relative error {rel:e})"
        );
    }
    for (field, n) in [("control_count", counts.0), ("treatment_count", counts.1)] {
        let col = got.column_by_name(field).unwrap();
        assert_eq!(
            col.as_primitive::<Int64Type>().value(0),
            n,
            "{name}.{field}"
        );
    }
}

async fn check_all(engine: &Engine) {
    let cases: [(&str, &str, Reference, (i64, i64)); 4] = [
        ("w_small", "welch_t_test(v, treat)", WELCH_SMALL_REF, (8, 7)),
        (
            "w_unequal",
            "welch_t_test(v, treat)",
            WELCH_UNEQUAL_REF,
            (12, 5),
        ),
        (
            "p_small",
            "proportion_z_test(conv, treat)",
            PROP_SMALL_REF,
            (40, 35),
        ),
        (
            "p_large",
            "proportion_z_test(conv, treat)",
            PROP_LARGE_REF,
            (5000, 5100),
        ),
    ];
    for (ds, call, want, counts) in cases {
        let sql = format!("SELECT {call} FROM ab WHERE ds = '{ds}'");
        check(ds, &query_struct(engine, &sql).await, want, counts);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_scipy() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::new(Db::open(StorageConfig::for_dir(tmp.path())).await.unwrap()).unwrap();
    engine
        .execute("CREATE TABLE ab (ts TIMESTAMP NOT NULL, ds VARCHAR, treat BOOLEAN, v DOUBLE, conv BOOLEAN)")
        .await
        .unwrap();
    let rows: Vec<(usize, Row)> = rows().into_iter().enumerate().collect();
    let (first, second): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(i, _)| i % 2 == 0);
    insert(&engine, &first).await;
    engine.db().flush_all().await.unwrap();
    insert(&engine, &second).await;
    check_all(&engine).await; // half in segments, half in memory
    engine.db().flush_all().await.unwrap();
    check_all(&engine).await; // all in segments
    engine.db().close().await.unwrap();
}
