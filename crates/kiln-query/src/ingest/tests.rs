use super::*;
use kiln_storage::TimestampUnit;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

#[test]
fn ndjson_error_names_the_line() {
    let body = Bytes::from_static(b"{\"id\":1}\n\n{\"id\":\"x\"}\n");
    let err = decode(body, Format::Ndjson, &schema(), &Options::default())
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("line 3, column 'id'"), "{err}");
}

#[test]
fn csv_and_gzip_round_trip() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b"name,id\na,1\nb,2\n").unwrap();
    let body = decompress(gz.finish().unwrap().into(), Encoding::Gzip, 1 << 20).unwrap();
    let d = decode(body, Format::Csv, &schema(), &Options::default()).unwrap();
    assert_eq!(d.rows(), 2);
    assert_eq!(d.locate(2), "line 3");
}

#[test]
fn decompression_is_bounded() {
    let big = zstd::encode_all(&vec![b'a'; 10_000][..], 3).unwrap();
    let err = decompress(big.into(), Encoding::Zstd, 1000).unwrap_err();
    assert_eq!(err, Decompress::TooLarge);
}

#[test]
fn a_parquet_dictionary_is_measured_as_the_rows_it_becomes() {
    use arrow::array::{DictionaryArray, Int32Array, Int64Array, StringArray, types::Int32Type};
    let name = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let file_schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", name, true),
    ]));
    let names = DictionaryArray::<Int32Type>::new(
        Int32Array::from(vec![0; 2_000]),
        Arc::new(StringArray::from(vec!["x".repeat(10_000)])),
    );
    let ids = Int64Array::from_iter_values(0..2_000);
    let batch =
        RecordBatch::try_new(file_schema.clone(), vec![Arc::new(ids), Arc::new(names)]).unwrap();
    let mut file = vec![];
    let mut w = ::parquet::arrow::ArrowWriter::try_new(&mut file, file_schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    assert!(file.len() < 50_000, "{}", file.len());
    let d = decode(file.into(), Format::Parquet, &schema(), &Options::default()).unwrap();
    assert_eq!(d.rows(), 2_000);
    let bytes = d.bytes_in(&schema());
    // 2,000 copies of the 10,000-byte value, and the ids' 16,000 bytes.
    assert!((20_016_000..20_100_000).contains(&bytes), "{bytes}");
    // A column the body leaves out counts as wide as a table value.
    let ids_only = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let d = Decoded::unlined(vec![batch.project(&[0]).unwrap()]);
    assert_eq!(d.bytes_in(&schema()) - d.bytes_in(&ids_only), 2_000 * 8);
}

/// A Parquet file of `rows` rows of `id` and a `name` that is the one
/// value `name` for every row, dictionary-encoded and with no Arrow schema
/// stored (as other writers than Arrow's write it): nothing in the file
/// says to read `name` as a dictionary. Rows go in groups of `group`.
fn parquet_of_one_name(name: String, rows: usize, group: usize) -> Bytes {
    use ::parquet::arrow::{ArrowWriter, arrow_writer::ArrowWriterOptions};
    use ::parquet::file::properties::WriterProperties;
    use arrow::array::{Int64Array, StringArray};
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows as i64)),
            Arc::new(StringArray::from(vec![name; rows])),
        ],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group))
        .set_dictionary_page_size_limit(64 << 20)
        .build();
    let opts = ArrowWriterOptions::new()
        .with_properties(props)
        .with_skip_arrow_metadata(true);
    let mut file = vec![];
    let mut w = ArrowWriter::try_new_with_options(&mut file, schema(), opts).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    file.into()
}

#[test]
fn a_parquet_dictionary_without_arrow_metadata_stays_keys_and_is_refused_past_the_limit() {
    // 4,000 rows of one 10,000-byte name: 40 MB once cast, a file of a
    // few tens of KB.
    let file = parquet_of_one_name("x".repeat(10_000), 4_000, 1_000);
    assert!(file.len() < 100_000, "{}", file.len());
    let d = decode(
        file.clone(),
        Format::Parquet,
        &schema(),
        &Options::default(),
    )
    .unwrap();
    assert_eq!(d.rows(), 4_000);
    // Read as keys over the one dictionary, not 4,000 copies of it.
    for b in &d.batches {
        assert!(
            matches!(b.column(1).data_type(), DataType::Dictionary(..)),
            "{}",
            b.column(1).data_type()
        );
        assert!(
            b.get_array_memory_size() < 1 << 20,
            "{}",
            b.get_array_memory_size()
        );
    }
    assert!(
        d.bytes_in(&schema()) >= 40_000_000,
        "{}",
        d.bytes_in(&schema())
    );
    // Past the limit, decoding stops and says how much it had read.
    let opts = Options {
        max_row_bytes: 15_000_000,
        ..Options::default()
    };
    match decode(file, Format::Parquet, &schema(), &opts).unwrap_err() {
        Refused::TooLarge { bytes } => {
            assert!((15_000_000..=40_100_000).contains(&bytes), "{bytes}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_parquet_batch_holds_no_more_rows_than_its_longest_dictionary_value_allows() {
    // Each 1 MiB value may be copied out once per row when the reader
    // meets more than one dictionary in a batch (several row groups here).
    let long = 1 << 20;
    let file = parquet_of_one_name("y".repeat(long), 200, 50);
    let d = decode(file, Format::Parquet, &schema(), &Options::default()).unwrap();
    assert_eq!(d.rows(), 200);
    let most = d.batches.iter().map(|b| b.num_rows()).max().unwrap();
    assert!(most <= super::parquet::SPILL_BYTES / long, "{most}");
    // Values are what was written.
    let names = arrow::compute::cast(d.batches[0].column(1), &DataType::Utf8).unwrap();
    assert_eq!(
        names
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .unwrap()
            .value(0)
            .len(),
        long
    );
}

#[test]
fn a_parquet_column_the_table_lacks_or_cannot_take_is_refused_by_name_before_reading() {
    let ids = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let file = parquet_of_one_name("n".into(), 10, 10);
    let err = decode(file.clone(), Format::Parquet, &ids, &Options::default()).unwrap_err();
    assert_eq!(
        err,
        Refused::Invalid("Parquet: the table has no column 'name'".into())
    );
    let dates = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Date32, true),
    ]));
    let structs = Arc::new(Schema::new(vec![
        Field::new(
            "id",
            DataType::Struct(vec![Field::new("a", DataType::Int64, true)].into()),
            false,
        ),
        Field::new("name", DataType::Utf8, true),
    ]));
    let err = decode(file.clone(), Format::Parquet, &structs, &Options::default()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Parquet: column 'id' holds Int64 values"),
        "{err}"
    );
    // A string column may be read as a date: that cast is decided per
    // value, when the rows are cast to the table's types, not here.
    assert!(decode(file.clone(), Format::Parquet, &dates, &Options::default()).is_ok());
    // Pages that inflate past the limit are refused before any row is read.
    let opts = Options {
        max_row_bytes: 10,
        ..Options::default()
    };
    assert!(matches!(
        decode(file, Format::Parquet, &schema(), &opts),
        Err(Refused::TooLarge { .. })
    ));
}

fn events() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            "ts",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, None),
            false,
        ),
        Field::new("n", DataType::Int32, true),
        Field::new("x", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
    ]))
}

fn decode_with(body: &str, format: Format, unit: Option<TimestampUnit>) -> Result<Decoded, String> {
    let opts = Options {
        timestamp_unit: unit,
        ..Options::default()
    };
    decode(Bytes::from(body.to_string()), format, &events(), &opts).map_err(|e| e.to_string())
}

#[test]
fn nothing_is_silently_changed_on_the_way_in() {
    let ts = r#""ts":"2026-11-01T10:00:00Z""#;
    for (line, why) in [
        (
            format!(r#"{{{ts},"n":1.5}}"#),
            "1.5 is not an integer (INT)",
        ),
        (
            format!(r#"{{{ts},"n":3000000000}}"#),
            "out of range for INT",
        ),
        (
            format!(r#"{{{ts},"x":1e400}}"#),
            "1e400 is out of range for DOUBLE",
        ),
        (r#"{"ts":1700000000}"#.to_string(), "has no unit"),
        (
            r#"{"ts":"2400-01-01T00:00:00"}"#.to_string(),
            "not a timestamp in range",
        ),
    ] {
        let body = format!("{{{ts}}}\n{line}\n");
        let err = decode_with(&body, Format::Ndjson, None).unwrap_err();
        assert!(err.starts_with("line 2, column"), "{line}: {err}");
        assert!(err.contains(why), "{line}: {err}");
    }
    // A declared unit reads integer timestamps; exact values pass.
    let d = decode_with(
        "{\"ts\":1700000000,\"n\":2.0,\"x\":0.5}\n",
        Format::Ndjson,
        Some(TimestampUnit::Seconds),
    )
    .unwrap();
    let b = &d.batches[0];
    assert_eq!(b.column(0).data_type(), events().field(0).data_type());
    assert_eq!(
        arrow::util::display::array_value_to_string(b.column(0), 0).unwrap(),
        "2023-11-14T22:13:20"
    );
    assert_eq!(
        arrow::util::display::array_value_to_string(b.column(1), 0).unwrap(),
        "2"
    );

    let err = decode_with("ts,n\n2026-11-01T00:00:00Z,1.5\n", Format::Csv, None).unwrap_err();
    assert!(err.starts_with("line 2, column 'n'"), "{err}");
}

#[test]
fn csv_quoting_headers_and_byte_order_marks() {
    let d = decode_with("\u{feff}ts,s\n2026-11-01T00:00:00Z,a\n", Format::Csv, None).unwrap();
    assert_eq!(d.rows(), 1);

    let err = decode_with("ts,s,s\n2026-11-01T00:00:00Z,a,b\n", Format::Csv, None).unwrap_err();
    assert!(err.contains("column 's' appears twice"), "{err}");

    // The quote opened on line 3 swallows line 4 unless it is refused.
    let body = "ts,s\n2026-11-01T00:00:00Z,a\n2026-11-01T00:00:00Z,\"b\n2026-11-01T00:00:00Z,c\n";
    let err = decode_with(body, Format::Csv, None).unwrap_err();
    assert!(
        err.starts_with("line 3: a quoted field is never closed"),
        "{err}"
    );
    // Closed quotes may span lines and hold quotes.
    let body = "ts,s\n2026-11-01T00:00:00Z,\"b\nc \"\"q\"\"\"\n";
    let d = decode_with(body, Format::Csv, None).unwrap();
    assert_eq!(
        arrow::util::display::array_value_to_string(d.batches[0].column(1), 0).unwrap(),
        "b\nc \"q\""
    );
}

#[test]
fn deeply_nested_json_is_refused_before_parsing() {
    let deep = format!("{{\"s\":{}1{}}}\n", "[".repeat(30_000), "]".repeat(30_000));
    let err = decode_with(&deep, Format::Ndjson, None).unwrap_err();
    assert!(err.contains("nested deeper than 64"), "{err}");
    // Brackets inside strings are text, not nesting.
    let text = format!(
        "{{\"ts\":\"2026-11-01T00:00:00Z\",\"s\":\"{}\"}}\n",
        "[".repeat(100)
    );
    assert_eq!(decode_with(&text, Format::Ndjson, None).unwrap().rows(), 1);
}

/// A small body is decoded in batches sized to it; rows shorter than a
/// batch's size assumes spill into more batches, every row kept in order,
/// and an error past the first batch still names its line.
#[test]
fn short_rows_fill_more_batches_and_errors_keep_their_lines() {
    let rows = 5_000;
    let ndjson: String = (0..rows).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    let csv: String = std::iter::once("id\n".to_string())
        .chain((0..rows).map(|i| format!("{i}\n")))
        .collect();
    for (body, format, first_line) in [(&ndjson, Format::Ndjson, 1), (&csv, Format::Csv, 2)] {
        let body = Bytes::from(body.clone());
        assert!(
            (body.len() as u64) / text::MIN_TEXT_ROW_BYTES < rows as u64,
            "rows shorter than assumed"
        );
        let d = decode(body.clone(), format, &schema(), &Options::default()).unwrap();
        assert_eq!(d.rows(), rows, "{format:?}");
        assert!(
            d.batches.len() > 1,
            "{format:?}: {} batches",
            d.batches.len()
        );
        let ids: Vec<i64> = d
            .batches
            .iter()
            .flat_map(|b| {
                use arrow::array::AsArray;
                b.column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(ids, (0..rows as i64).collect::<Vec<_>>(), "{format:?}");
        // The row at index 4,000 made invalid: its line is named.
        let bad = String::from_utf8(body.to_vec())
            .unwrap()
            .replacen("4000", "\"x\"", 1)
            .replacen("\"\"x\"\"", "x", 1);
        let err = decode(Bytes::from(bad), format, &schema(), &Options::default())
            .unwrap_err()
            .to_string();
        let line = 4_000 + first_line;
        assert!(
            err.starts_with(&format!("line {line}")),
            "{format:?}: {err}"
        );
    }
}
