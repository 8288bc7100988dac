//! `system.cubes` (and `SHOW CUBES`): one row per cube, with its state
//! (`building` until every segment has its part, then `ready`), the size
//! of its parts, and the queries it answered.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use kiln_storage::Db;

use crate::cube::Cubes;

/// The columns of `system.cubes`.
pub fn schema() -> SchemaRef {
    let s = |n: &str| Field::new(n, DataType::Utf8, false);
    let i = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        s("name"),
        s("table_name"),
        s("definition"),
        s("state"),
        i("segments"),
        i("segments_covered"),
        i("rows"),
        i("bytes"),
        i("queries_answered"),
    ]))
}

/// The rows of `system.cubes` now.
pub fn batch(db: &Db, cubes: &Cubes) -> arrow::error::Result<RecordBatch> {
    let (mut name, mut table, mut def, mut state) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let (mut segs, mut covered, mut rows, mut bytes, mut answered) = (
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    for (t, c) in db.cubes() {
        let segments = t.segments();
        let parts: Vec<_> = segments.iter().filter_map(|s| s.part(c.id)).collect();
        name.append_value(&c.name);
        table.append_value(t.name());
        def.append_value(c.sql(t.name()));
        state.append_value(match parts.len() == segments.len() {
            true => "ready",
            false => "building",
        });
        segs.append_value(segments.len() as i64);
        covered.append_value(parts.len() as i64);
        rows.append_value(parts.iter().map(|p| p.meta.rows as i64).sum());
        bytes.append_value(parts.iter().map(|p| p.meta.bytes as i64).sum());
        answered.append_value(cubes.answered(c.id) as i64);
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(name.finish()),
        Arc::new(table.finish()),
        Arc::new(def.finish()),
        Arc::new(state.finish()),
        Arc::new(segs.finish()),
        Arc::new(covered.finish()),
        Arc::new(rows.finish()),
        Arc::new(bytes.finish()),
        Arc::new(answered.finish()),
    ];
    RecordBatch::try_new(schema(), cols)
}
