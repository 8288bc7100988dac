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
