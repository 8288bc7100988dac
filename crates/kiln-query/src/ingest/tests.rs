use super::*;
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
    let err = decode(body, Format::Ndjson, &schema()).unwrap_err();
    assert!(err.starts_with("line 3:"), "{err}");
}

#[test]
fn csv_and_gzip_round_trip() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b"name,id\na,1\nb,2\n").unwrap();
    let body = decompress(gz.finish().unwrap().into(), Encoding::Gzip, 1 << 20).unwrap();
    let d = decode(body, Format::Csv, &schema()).unwrap();
    assert_eq!(d.rows(), 2);
    assert_eq!(d.locate(2), "line 3");
}

#[test]
fn decompression_is_bounded() {
    let big = zstd::encode_all(&vec![b'a'; 10_000][..], 3).unwrap();
    let err = decompress(big.into(), Encoding::Zstd, 1000).unwrap_err();
    assert_eq!(err, Decompress::TooLarge);
}
