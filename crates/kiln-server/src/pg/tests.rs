use super::startup::pg_duration_ms;

#[test]
fn postgresql_time_settings_are_read_in_milliseconds() {
    for (text, ms) in [
        ("5000", Some(5000)),
        ("250ms", Some(250)),
        ("5s", Some(5000)),
        ("'2s'", Some(2000)),
        ("1.5s", Some(1500)),
        ("1min", Some(60_000)),
        ("1h", Some(3_600_000)),
        ("0", Some(0)),
        ("5 parsecs", None),
        ("soon", None),
    ] {
        assert_eq!(pg_duration_ms(text), ms, "{text}");
    }
}

#[test]
fn null_intervals_are_sent_as_null() {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, IntervalMonthDayNanoArray};
    use arrow::datatypes::IntervalMonthDayNano;
    use bytes::{BufMut, BytesMut};
    use datafusion_postgres::pgwire::messages::data::DataRow;

    // Row 1 of a batch: an int, then an interval arrow-pg wrote as
    // "00:00:00" although it is NULL, then a real NULL.
    let mut data = BytesMut::new();
    for field in [Some(&b"7"[..]), Some(&b"00:00:00"[..]), None] {
        match field {
            Some(f) => {
                data.put_i32(f.len() as i32);
                data.extend_from_slice(f);
            }
            None => data.put_i32(-1),
        }
    }
    let row = DataRow::new(data, 3);
    let interval: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(vec![
        Some(IntervalMonthDayNano::new(0, 1, 0)),
        None,
    ]));
    let fixed = super::execute::with_nulls(row.clone(), 1, &[(1, interval.clone())]);
    let mut want = BytesMut::new();
    want.put_i32(1);
    want.extend_from_slice(b"7");
    want.put_i32(-1);
    want.put_i32(-1);
    assert_eq!(fixed.data, want);
    // Row 0's interval is not NULL: the row is left as it is.
    let same = super::execute::with_nulls(row, 0, &[(1, interval)]);
    assert_eq!(same.data.len(), 4 + 1 + 4 + 8 + 4);
}
