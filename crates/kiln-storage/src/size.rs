//! [`ByteSize`]: the one type of every size setting.
//!
//! Why a type and not a bare integer: a setting read as `usize` says nothing
//! of its unit, and a memory budget is naturally a share of the machine
//! (`25%`) rather than a number that is right on one host and wrong on the
//! next. A share is resolved once, when the setting is parsed, against the
//! memory this process may use (its cgroup limit if it has one, else the
//! machine's).

use std::fmt;
use std::str::FromStr;

/// A size in bytes: `4096`, `64KiB`, `512MiB`, `2GiB`, `1TiB` (KB, MB, GB,
/// TB are powers of 1000), or a share of the memory this process may use,
/// such as `25%`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(u64);

const UNITS: [(&str, u64); 9] = [
    ("tib", 1 << 40),
    ("gib", 1 << 30),
    ("mib", 1 << 20),
    ("kib", 1 << 10),
    ("tb", 1_000_000_000_000),
    ("gb", 1_000_000_000),
    ("mb", 1_000_000),
    ("kb", 1_000),
    ("b", 1),
];

impl ByteSize {
    pub const ZERO: Self = Self(0);

    pub const fn b(n: u64) -> Self {
        Self(n)
    }

    pub const fn kib(n: u64) -> Self {
        Self(n << 10)
    }

    pub const fn mib(n: u64) -> Self {
        Self(n << 20)
    }

    pub const fn gib(n: u64) -> Self {
        Self(n << 30)
    }

    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// The size as a `usize`, saturating on 32-bit targets.
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Parses a size against `memory` bytes for a share (`25%`); see the type docs.
    pub fn parse_with_memory(
        s: &str,
        memory: impl FnOnce() -> Option<u64>,
    ) -> Result<Self, String> {
        let t = s.trim();
        if let Some(share) = t.strip_suffix('%') {
            let pct: f64 = share
                .trim()
                .parse()
                .ok()
                .filter(|p: &f64| p.is_finite() && (0.0..=100.0).contains(p))
                .ok_or_else(|| format!("'{s}' is not a share of memory between 0% and 100%"))?;
            let total = memory().ok_or_else(|| {
                format!("'{s}': this machine's memory is unknown; give a size such as 2GiB")
            })?;
            return Ok(Self((total as f64 * pct / 100.0) as u64));
        }
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: u64 = num
            .parse()
            .map_err(|_| format!("'{s}' is not a size like 512MiB, 2GiB or 25%"))?;
        let unit = unit.trim().to_ascii_lowercase();
        // A bare letter is the binary unit: `64k` is 64KiB.
        let unit = match unit.as_str() {
            "k" | "m" | "g" | "t" => format!("{unit}ib"),
            "" => "b".to_string(),
            _ => unit,
        };
        let mult = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                format!("unknown size unit '{unit}' in '{s}' (use KiB, MiB, GiB, TiB or %)")
            })?;
        n.checked_mul(mult)
            .map(Self)
            .ok_or_else(|| format!("'{s}' is too large"))
    }
}

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse_with_memory(s, available_memory)
    }
}

/// Largest binary unit that divides the size exactly: `2GiB`, `1536KiB`, `7`.
impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let binary = [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        match binary
            .iter()
            .find(|(_, m)| self.0 != 0 && self.0.is_multiple_of(*m))
        {
            Some((name, m)) => write!(f, "{}{name}", self.0 / m),
            None => write!(f, "{}", self.0),
        }
    }
}

impl From<ByteSize> for u64 {
    fn from(s: ByteSize) -> u64 {
        s.0
    }
}

/// Memory this process may use: its cgroup's limit when it has one, else
/// the machine's total (Linux); `None` where neither can be read.
pub fn available_memory() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    });
    match (cgroup, total) {
        (Some(c), Some(t)) => Some(c.min(t)),
        (c, t) => c.or(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<u64, String> {
        ByteSize::parse_with_memory(s, || Some(8 << 30)).map(ByteSize::bytes)
    }

    #[test]
    fn units_and_shares() {
        assert_eq!(parse("4096").unwrap(), 4096);
        assert_eq!(parse("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse(" 2 gib ").unwrap(), 2 << 30);
        assert_eq!(parse("64k").unwrap(), 64 << 10);
        assert_eq!(parse("3MB").unwrap(), 3_000_000);
        assert_eq!(parse("25%").unwrap(), 2 << 30);
        assert_eq!(parse("0").unwrap(), 0);
    }

    #[test]
    fn bad_sizes_say_why() {
        assert!(parse("12XB").unwrap_err().contains("unknown size unit"));
        assert!(parse("GiB").unwrap_err().contains("not a size"));
        assert!(parse("150%").unwrap_err().contains("between 0% and 100%"));
        assert!(parse("99999999999TiB").unwrap_err().contains("too large"));
        let unknown = ByteSize::parse_with_memory("10%", || None).unwrap_err();
        assert!(unknown.contains("memory is unknown"), "{unknown}");
    }

    #[test]
    fn displays_in_the_largest_exact_unit() {
        assert_eq!(ByteSize::gib(2).to_string(), "2GiB");
        assert_eq!(ByteSize::kib(1536).to_string(), "1536KiB");
        assert_eq!(ByteSize::b(7).to_string(), "7");
        assert_eq!(ByteSize::ZERO.to_string(), "0");
        let round: ByteSize = ByteSize::mib(640).to_string().parse().unwrap();
        assert_eq!(round, ByteSize::mib(640));
    }

    #[test]
    fn this_machine_has_memory() {
        assert!(available_memory().is_some_and(|m| m > 0));
    }
}
