use super::*;
use arrow::array::{AsArray, StringArray};
use arrow::datatypes::{Float64Type, Int32Type, Int64Type, TimestampNanosecondType};

fn text(values: &[Option<&str>]) -> StringArray {
    StringArray::from(values.to_vec())
}

#[test]
fn integers_exactly_or_not_at_all() {
    let ok = convert(
        &text(&[Some("42"), None, Some(" -7 "), Some("3.0"), Some("4e2")]),
        &DataType::Int64,
        None,
    )
    .unwrap();
    let ok = ok.as_primitive::<Int64Type>();
    assert_eq!(ok.len(), 5);
    assert!(ok.is_null(1));
    assert_eq!(
        [ok.value(0), ok.value(2), ok.value(3), ok.value(4)],
        [42, -7, 3, 400]
    );

    let e = convert(&text(&[Some("1"), Some("1.5")]), &DataType::Int64, None).unwrap_err();
    assert_eq!(e.row, 1);
    assert!(e.msg.contains("1.5 is not an integer"), "{}", e.msg);

    let e = convert(&text(&[Some("3000000000")]), &DataType::Int32, None).unwrap_err();
    assert!(e.msg.contains("out of range for INT"), "{}", e.msg);
    let e = convert(&text(&[Some("1e30")]), &DataType::Int64, None).unwrap_err();
    assert!(e.msg.contains("out of range for BIGINT"), "{}", e.msg);
    // Beyond 2^53 a decimal form would round: refused, not rounded.
    let e = convert(&text(&[Some("9007199254740993.0")]), &DataType::Int64, None).unwrap_err();
    assert!(e.msg.contains("out of range"), "{}", e.msg);
    for bad in ["inf", "NaN", "abc", ""] {
        assert!(
            convert(&text(&[Some(bad)]), &DataType::Int32, None).is_err(),
            "{bad}"
        );
    }
    let small = convert(&text(&[Some("-5")]), &DataType::Int32, None).unwrap();
    assert_eq!(small.as_primitive::<Int32Type>().value(0), -5);
}

#[test]
fn doubles_do_not_overflow_into_infinity() {
    let e = convert(
        &text(&[Some("1.5"), Some("1e400")]),
        &DataType::Float64,
        None,
    )
    .unwrap_err();
    assert_eq!(e.row, 1);
    assert!(e.msg.contains("out of range for DOUBLE"), "{}", e.msg);
    let ok = convert(
        &text(&[Some("-Infinity"), Some("inf"), Some("2.5e-3")]),
        &DataType::Float64,
        None,
    )
    .unwrap();
    let ok = ok.as_primitive::<Float64Type>();
    assert_eq!(ok.value(0), f64::NEG_INFINITY);
    assert_eq!(ok.value(1), f64::INFINITY);
    assert_eq!(ok.value(2), 2.5e-3);
}

#[test]
fn integer_timestamps_need_a_unit_and_stay_in_range() {
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let e = convert(&text(&[Some("1700000000")]), &ts, None).unwrap_err();
    assert!(e.msg.contains("has no unit"), "{}", e.msg);

    let s = convert(
        &text(&[Some("1700000000")]),
        &ts,
        Some(TimestampUnit::Seconds),
    )
    .unwrap();
    assert_eq!(
        s.as_primitive::<TimestampNanosecondType>().value(0),
        1_700_000_000_000_000_000
    );
    let e = convert(
        &text(&[Some("99999999999999")]),
        &ts,
        Some(TimestampUnit::Seconds),
    )
    .unwrap_err();
    assert!(e.msg.contains("out of range"), "{}", e.msg);

    let iso = convert(&text(&[Some("2026-11-01T10:00:00Z"), None]), &ts, None).unwrap();
    let iso = iso.as_primitive::<TimestampNanosecondType>();
    assert_eq!(iso.value(0), 1_793_527_200_000_000_000);
    assert!(iso.is_null(1));
    let e = convert(&text(&[Some("3000-01-01T00:00:00")]), &ts, None).unwrap_err();
    assert!(e.msg.contains("not a timestamp in range"), "{}", e.msg);
}

#[test]
fn units_parse() {
    assert_eq!(TimestampUnit::parse("ms"), Some(TimestampUnit::Millis));
    assert_eq!(TimestampUnit::parse("minutes"), None);
}
