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

/// Reads one big-endian integer of `N` bytes at `at`, moving past it.
fn be<const N: usize>(bytes: &[u8], at: &mut usize) -> i64 {
    let mut v = [0u8; 8];
    v[8 - N..].copy_from_slice(&bytes[*at..*at + N]);
    *at += N;
    let shift = 64 - 8 * N as u32;
    (i64::from_be_bytes(v) << shift) >> shift
}

#[test]
fn binary_rows_are_postgresql_copy_binary() {
    let batch = batch();
    let fields = crate::pg::execute::fields(&batch.schema(), Some(&Format::UnifiedBinary)).unwrap();
    let mut encoder = CopyEncoder::new_binary(Arc::new(fields.clone()));
    let first: Vec<Vec<u8>> = binary_rows(&batch, &fields, &mut encoder)
        .into_iter()
        .map(|r| r.unwrap().data.to_vec())
        .collect();
    let second = binary_rows(&batch, &fields, &mut encoder);
    assert_eq!(first.len(), 2);
    // The header once, on the stream's first row only.
    let header = b"PGCOPY\n\xff\r\n\x00\0\0\0\0\0\0\0\0";
    assert!(first[0].starts_with(header));
    assert!(!first[1].starts_with(b"PGCOPY"));
    assert!(!second[0].as_ref().unwrap().data.starts_with(b"PGCOPY"));

    let row = &first[1];
    let mut at = 0;
    assert_eq!(be::<2>(row, &mut at), 4, "field count");
    // timestamp: microseconds since 2000-01-01.
    assert_eq!(be::<4>(row, &mut at), 8);
    let micros_2000_to_2026 = 1_767_225_600_000_000 - 946_684_800_000_000;
    assert_eq!(be::<8>(row, &mut at), micros_2000_to_2026 + 500_000);
    // A NULL bigint: length -1, no bytes.
    assert_eq!(be::<4>(row, &mut at), -1);
    // An empty string: length 0, not NULL.
    assert_eq!(be::<4>(row, &mut at), 0);
    // false
    assert_eq!(be::<4>(row, &mut at), 1);
    assert_eq!(row[at], 0);
    assert_eq!(at + 1, row.len());

    let row = &first[0][header.len()..];
    let mut at = 0;
    assert_eq!(be::<2>(row, &mut at), 4);
    at += 4 + 8;
    assert_eq!((be::<4>(row, &mut at), be::<8>(row, &mut at)), (8, 1));
    let len = be::<4>(row, &mut at) as usize;
    assert_eq!(&row[at..at + len], b"a\tb\\c\nd");
}
