//! Kiln's bitmaps are the portable 64-bit roaring format: pyroaring's
//! `BitMap64` (CRoaring) reads a bitmap made by `bitmap_agg`, and Kiln reads
//! one serialized by pyroaring. Needs `python3`; installs pyroaring with pip
//! when it is missing and fails with a clear message if that is impossible.

use std::process::Command;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use kiln_query::{Engine, Output};
use kiln_storage::{Db, StorageConfig};

const IDS: &[u64] = &[
    0,
    1,
    2,
    65_535,
    65_536,
    1_000_000,
    4_294_967_295,
    4_294_967_296,
    5_000_000_000,
    (1 << 40) + 7,
    (1 << 62) + 12_345,
];

fn python(script: &str, args: &[&str]) -> std::process::Output {
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 must be installed to run this test")
}

fn ensure_pyroaring() {
    if python("import pyroaring", &[]).status.success() {
        return;
    }
    eprintln!("pyroaring missing: running `python3 -m pip install pyroaring`");
    let pip = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "pyroaring"])
        .status();
    let ok = python("import pyroaring", &[]).status.success();
    assert!(
        ok,
        "pyroaring is not installed and `python3 -m pip install pyroaring` failed ({pip:?}); \
         install it (pip install pyroaring) to run this test"
    );
}

async fn engine(dir: &std::path::Path) -> Engine {
    Engine::new(Db::open(StorageConfig::for_dir(dir)).await.unwrap()).unwrap()
}

async fn rows(engine: &Engine, sql: &str) -> arrow::array::RecordBatch {
    let mut out = engine.execute(sql).await.expect(sql);
    let Some(Output::Rows { batches, .. }) = out.pop() else {
        panic!("no rows from {sql}")
    };
    arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyroaring_reads_kiln_bitmaps_and_back() {
    ensure_pyroaring();
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    engine
        .execute("CREATE TABLE u (ts TIMESTAMP NOT NULL, id BIGINT)")
        .await
        .unwrap();
    // Every id twice, on two days, with half flushed to segments.
    for (day, flush) in [(1, true), (2, false)] {
        let values: Vec<String> = IDS
            .iter()
            .map(|id| format!("('2026-03-0{day}T10:00:00', {id})"))
            .chain(std::iter::once(format!(
                "('2026-03-0{day}T11:00:00', NULL)"
            )))
            .collect();
        let sql = format!("INSERT INTO u VALUES {}", values.join(", "));
        engine.execute(&sql).await.unwrap();
        if flush {
            engine.db().flush_all().await.unwrap();
        }
    }

    // Kiln -> pyroaring
    let batch = rows(&engine, "SELECT bitmap_agg(id) FROM u").await;
    let bytes = batch.column(0).as_binary::<i32>().value(0).to_vec();
    let file = tmp.path().join("kiln.bitmap");
    std::fs::write(&file, &bytes).unwrap();
    let read = python(
        "import sys\nfrom pyroaring import BitMap64\n\
         b = BitMap64.deserialize(open(sys.argv[1], 'rb').read())\n\
         print(','.join(str(x) for x in b))",
        &[file.to_str().unwrap()],
    );
    assert!(
        read.status.success(),
        "pyroaring could not read Kiln's bitmap: {}",
        String::from_utf8_lossy(&read.stderr)
    );
    let members: Vec<u64> = String::from_utf8(read.stdout)
        .unwrap()
        .trim()
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(members, IDS, "members pyroaring read from Kiln's bitmap");

    // pyroaring -> Kiln
    let ids: Vec<String> = IDS.iter().map(u64::to_string).collect();
    let made = python(
        "import sys\nfrom pyroaring import BitMap64\n\
         print(BitMap64(int(x) for x in sys.argv[1:]).serialize().hex())",
        &ids.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let hex = String::from_utf8(made.stdout).unwrap();
    let batch = rows(
        &engine,
        &format!(
            "SELECT bitmap_to_array(X'{h}'), bitmap_count(X'{h}'), bitmap_and_count(X'{h}', bitmap_agg(id)) FROM u",
            h = hex.trim()
        ),
    )
    .await;
    let list = batch.column(0).as_list::<i32>().value(0);
    let got: Vec<u64> = list
        .as_primitive::<Int64Type>()
        .values()
        .iter()
        .map(|v| *v as u64)
        .collect();
    assert_eq!(got, IDS, "members Kiln read from pyroaring's bitmap");
    let n = IDS.len() as i64;
    assert_eq!(batch.column(1).as_primitive::<Int64Type>().value(0), n);
    assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(0), n);
    engine.db().close().await.unwrap();
}
