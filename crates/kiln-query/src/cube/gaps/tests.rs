use super::*;

fn decoded(bytes: &[u8]) -> Result<Vec<u64>> {
    let mut out = vec![];
    decode_with(bytes, |v| out.push(v))?;
    Ok(out)
}

/// A deterministic stream of 64-bit values (splitmix64).
fn randoms(seed: u64) -> impl Iterator<Item = u64> {
    let mut s = seed;
    std::iter::repeat_with(move || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// The coding before [`MARK`], as its encoder wrote it.
fn varint_gaps(values: &[u64]) -> Vec<u8> {
    let (mut out, mut prev) = (vec![], 0u64);
    for &v in values {
        varint(v.wrapping_sub(prev), &mut out);
        prev = v;
    }
    out
}

#[test]
fn values_round_trip() {
    let ids = |bits: u32, n: usize, seed: u64| -> Vec<u64> {
        let mut v: Vec<u64> = randoms(seed)
            .take(n)
            .map(|r| (r >> (64 - bits)) ^ SIGN)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let sets: Vec<Vec<u64>> = vec![
        vec![],
        vec![0],
        vec![u64::MAX],
        vec![SIGN],
        vec![0, 1, 127, 128, 300, 1 << 40, u64::MAX - 1, u64::MAX],
        (SIGN..SIGN + 1000).collect(),
        (0..1000).map(|i| i * 1_000_003).collect(),
        // Close ids with one far outlier: the parameter fits the many.
        (0..500).chain([1 << 62]).collect(),
        // Negative keys, as signed columns map them.
        vec![5, 6, 1 << 20, SIGN - 7],
        ids(40, 46, 1),
        ids(64, 46, 2),
        ids(20, 5000, 3),
        ids(63, 2, 4),
    ];
    for values in sets {
        let bytes = encode(&values);
        assert_eq!(decoded(&bytes).unwrap(), values, "{values:?}");
        assert_eq!(bytes.is_empty(), values.is_empty());
    }
}

#[test]
fn unsorted_values_are_stored_sorted_once_each() {
    let bytes = encode(&[9, 3, 9, 1 << 50, 3, 0]);
    assert_eq!(decoded(&bytes).unwrap(), [0, 3, 9, 1 << 50]);
}

#[test]
fn states_written_as_varint_gaps_still_read() {
    // 128 << 7 starts with 0x80, as MARK does, and is still a varint state.
    for values in [
        vec![1, 2, 300],
        vec![128 << 7, (128 << 7) + 1],
        vec![SIGN + 5],
    ] {
        let old = varint_gaps(&values);
        assert!(!old.starts_with(&MARK));
        assert_eq!(decoded(&old).unwrap(), values);
    }
    assert!(decoded(&[0x80]).is_err(), "a cut varint");
    assert!(decoded(&[0xff; 11]).is_err(), "a varint too long");
}

#[test]
fn scattered_ids_take_fewer_bytes_than_varint_gaps() {
    // 46 ids of 40 bits in a group, as the abtest dashboard's daily cube
    // keeps users, and signed small ids, which varint gaps started with a
    // ten-byte first value.
    let mut total = (0, 0);
    for seed in 0..200 {
        let mut v: Vec<u64> = randoms(seed).take(46).map(|r| (r >> 24) ^ SIGN).collect();
        v.sort_unstable();
        v.dedup();
        total.0 += encode(&v).len();
        total.1 += varint_gaps(&v).len();
    }
    assert!(total.0 * 100 < total.1 * 88, "{total:?}");
    let small: Vec<u64> = (0..20).map(|i| SIGN + 1000 + 3 * i).collect();
    assert!(encode(&small).len() * 2 < varint_gaps(&small).len());
    // Dense ids (gaps of about 30) and runs of consecutive ones.
    let mut dense: Vec<u64> = randoms(9).take(3000).map(|r| SIGN + r % 90_000).collect();
    dense.sort_unstable();
    dense.dedup();
    assert!(encode(&dense).len() * 100 < varint_gaps(&dense).len() * 90);
    let run: Vec<u64> = (SIGN..SIGN + 5000).collect();
    assert!(encode(&run).len() * 3 < varint_gaps(&run).len());
}

#[test]
fn corrupt_states_are_errors_not_panics() {
    let values: Vec<u64> = (0..300).map(|i| SIGN + i * 977).collect();
    let bytes = encode(&values);
    // Any cut of the gaps lacks a value the count promises.
    for cut in MARK.len()..bytes.len() {
        assert!(decoded(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    // A zero count, a parameter past 63, a zero gap.
    assert!(decoded(&[0x80, 0x00, 0x00, 0x02, 0x00]).is_err());
    assert!(decoded(&[0x80, 0x00, 0x01, 0x02, 64]).is_err());
    assert!(decoded(&[0x80, 0x00, 0x02, 0x02, 0x00, 0x01]).is_err());
    // A gap of 5 (k = 3: a one, then 101) past the largest value.
    let mut high = MARK.to_vec();
    varint(2, &mut high);
    let signed = ((u64::MAX - 1) ^ SIGN) as i64;
    varint(((signed << 1) ^ (signed >> 63)) as u64, &mut high);
    high.extend([3, 0b1011]);
    assert!(decoded(&high).is_err());
    *high.last_mut().unwrap() = 0b0011;
    assert_eq!(decoded(&high).unwrap(), [u64::MAX - 1, u64::MAX]);
    // Random bytes after the mark: an error or values, never a panic, and
    // never more values than bits.
    for (i, seed) in (0..2000).zip(randoms(7)) {
        let noise: Vec<u8> = randoms(seed).take(1 + i % 40).map(|r| r as u8).collect();
        let state = [&MARK[..], &noise].concat();
        if let Ok(v) = decoded(&state) {
            assert!(v.len() <= state.len() * 8 + 1);
        }
    }
}
