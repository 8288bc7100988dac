use super::*;

#[test]
fn sizes_read_as_postgresql_writes_them() {
    // PostgreSQL 16's answers (its dbsize regression test), either sign.
    for (bytes, text) in [
        (10, "10 bytes"),
        (1_000_000, "977 kB"),
        (1_000_000_000, "954 MB"),
        (1_000_000_000_000, "931 GB"),
        (1_000_000_000_000_000, "909 TB"),
        // Where the unit changes.
        (10_239, "10239 bytes"),
        (10_240, "10 kB"),
        (10_485_247, "10239 kB"),
        (10_485_248, "10 MB"),
        (10_736_893_951, "10239 MB"),
        (10_736_893_952, "10 GB"),
        (10_994_579_406_847, "10239 GB"),
        (10_994_579_406_848, "10 TB"),
        (11_258_449_312_612_351, "10239 TB"),
        (11_258_449_312_612_352, "10 PB"),
    ] {
        assert_eq!(pretty(bytes), text, "{bytes}");
        assert_eq!(pretty(-bytes), format!("-{text}"), "{}", -bytes);
    }
    assert_eq!(pretty(0), "0 bytes");
    assert_eq!(pretty(i64::MAX), "8192 PB");
    assert_eq!(pretty(i64::MIN), "-8192 PB");
}
