use std::sync::Arc;

use arrow::array::{BooleanArray, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use super::*;

fn batch() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("n", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("b", DataType::Boolean, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampMicrosecondArray::from(vec![
                1_767_225_600_000_000,
                1_767_225_600_500_000,
            ])),
            Arc::new(Int64Array::from(vec![Some(1), None])),
            Arc::new(StringArray::from(vec![Some("a\tb\\c\nd"), Some("")])),
            Arc::new(BooleanArray::from(vec![Some(true), Some(false)])),
        ],
    )
    .unwrap()
}

fn text(layout: &CopyLayout) -> String {
    lines(&batch(), layout)
        .unwrap()
        .into_iter()
        .map(|l| String::from_utf8(l).unwrap())
        .collect()
}

#[test]
fn text_format_escapes_as_postgresql_does() {
    let layout = CopyLayout::text(vec![]);
    assert_eq!(
        text(&layout),
        "2026-01-01 00:00:00\t1\ta\\tb\\\\c\\nd\tt\n2026-01-01 00:00:00.500\t\\N\t\tf\n"
    );
}

#[test]
fn csv_quotes_what_needs_it_and_keeps_empty_apart_from_null() {
    let mut layout = CopyLayout::text(vec!["ts".into(), "n".into()]);
    layout.format = CopyFormat::Csv;
    layout.delimiter = b',';
    layout.null = String::new();
    assert_eq!(
        text(&layout),
        "2026-01-01 00:00:00,1,\"a\tb\\c\nd\",t\n2026-01-01 00:00:00.500,,\"\",f\n"
    );
    assert_eq!(String::from_utf8(header_line(&layout)).unwrap(), "ts,n\n");
}
