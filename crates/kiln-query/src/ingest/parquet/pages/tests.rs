use std::io::Write;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{BrotliLevel, GzipLevel, ZstdLevel};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};

use super::*;

/// 10,000 random numbers, every tenth null (so data pages v2 start with
/// definition levels), in one data page of `codec`.
fn numbers(codec: Compression, version: WriterVersion) -> (Vec<u8>, ParquetMetaData) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let values = (0..10_000).map(|i| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (i % 10 != 0).then_some(x as i64)
    });
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(values.collect::<Int64Array>())],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(codec)
        .set_writer_version(version)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .build();
    let mut file = vec![];
    let mut w = ArrowWriter::try_new(&mut file, schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    let meta = w.close().unwrap();
    (file, meta)
}

/// 8 MiB of zeros compressed with `codec`.
fn bomb(codec: Compression) -> Vec<u8> {
    let zeros = vec![0u8; 8 << 20];
    match codec {
        Compression::GZIP(_) => {
            let mut w = flate2::write::GzEncoder::new(vec![], flate2::Compression::best());
            w.write_all(&zeros).unwrap();
            w.finish().unwrap()
        }
        Compression::BROTLI(_) => {
            let mut out = vec![];
            let mut w = brotli::CompressorWriter::new(&mut out, 4096, 1, 22);
            w.write_all(&zeros).unwrap();
            drop(w);
            out
        }
        Compression::LZ4 => {
            let mut w = lz4_flex::frame::FrameEncoder::new(vec![]);
            w.write_all(&zeros).unwrap();
            w.finish().unwrap()
        }
        other => panic!("{other:?}"),
    }
}

/// `file` with the compressed part of its first data page overwritten by
/// `bytes`.
fn overwritten(mut file: Vec<u8>, meta: &ParquetMetaData, bytes: &[u8]) -> Bytes {
    let at = meta.row_group(0).column(0).data_page_offset() as usize;
    let mut r = &file[at..];
    let header = Header::read(&mut Thrift(&mut r)).unwrap();
    let Levels::Compressed(levels) = header.levels else {
        panic!("an uncompressed page");
    };
    let start = file.len() - r.len() + levels as usize;
    assert!(header.compressed as usize >= bytes.len() + levels as usize);
    file[start..start + bytes.len()].copy_from_slice(bytes);
    file.into()
}

/// The codecs the reader inflates whole, then the others.
fn codecs() -> [Compression; 7] {
    [
        Compression::GZIP(GzipLevel::default()),
        Compression::BROTLI(BrotliLevel::default()),
        Compression::LZ4,
        Compression::UNCOMPRESSED,
        Compression::SNAPPY,
        Compression::ZSTD(ZstdLevel::default()),
        Compression::LZ4_RAW,
    ]
}

#[test]
fn pages_are_summed_as_declared_for_every_codec_and_page_version() {
    for codec in codecs() {
        for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
            let (file, meta) = numbers(codec, version);
            let declared = check(&Bytes::from(file.clone()), &meta, usize::MAX).unwrap();
            // The values (9,000 of 8 bytes) and the levels, without the
            // page headers the chunk's size also counts.
            let chunk = meta.row_group(0).column(0).uncompressed_size() as u64;
            assert!(
                (72_000..chunk).contains(&declared),
                "{codec:?} {version:?}: {declared} of {chunk}"
            );
            match check(&Bytes::from(file), &meta, declared as usize - 1) {
                Err(Refused::TooLarge { bytes }) => assert_eq!(bytes, declared),
                other => panic!("{codec:?} {version:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_page_the_reader_would_inflate_whole_is_refused_past_its_declared_size() {
    for codec in &codecs()[..3] {
        for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
            let (file, meta) = numbers(*codec, version);
            let file = overwritten(file, &meta, &bomb(*codec));
            let err = check(&file, &meta, usize::MAX).unwrap_err().to_string();
            let name = unbounded(*codec).unwrap();
            assert!(
                err.starts_with(&format!(
                    "Parquet: column 'n' in row group 0: a {name} page inflates past the "
                )),
                "{version:?}: {err}"
            );
        }
    }
}

#[test]
fn a_page_header_that_nests_too_deeply_is_refused_not_followed() {
    // Lists of one list, a million deep.
    let deep = vec![0x19u8; 1 << 20];
    let err = Thrift(&deep[..]).skip(LIST, 0).unwrap_err();
    assert_eq!(err.to_string(), "a page header nests too deeply");
    // Every type is skipped: a struct holding a binary, a list of two
    // booleans, a map of one i32 to a double, a struct, and then field 2.
    let header = [
        0x18, 2, b'h', b'i', // field 1: binary "hi"
        0x19, 0x21, 1, 0, // field 2: list of 2 booleans
        0x1b, 1, 0x57, 2, 0, 0, 0, 0, 0, 0, 0, 0, // field 3: map {1: 0.0}
        0x1c, 0x15, 4, 0, // field 4: struct {1: 2}
        0, // stop
    ];
    let mut t = Thrift(&header[..]);
    let mut seen = vec![];
    t.each_field(|t, id, ty| {
        seen.push(id);
        t.skip(ty, 0)
    })
    .unwrap();
    assert_eq!(seen, [1, 2, 3, 4]);
    assert!(t.byte().is_err(), "all of it read");
}
