//! Bounds on the DataFusion options a session may `SET` that multiply
//! what one query allocates before any row comes.

use datafusion::config::ConfigOptions;

use crate::error::{Error, Result};

/// The most partitions a session may ask a query to run in
/// (`datafusion.execution.target_partitions`): a repartition keeps a
/// channel from each input partition to each output one, so its buffers
/// grow with the square (a `GROUP BY` at 3,000 took 5.3 GB; at 100,000
/// the server was killed for want of memory).
pub(super) const MAX_PARTITIONS: usize = 256;

/// The most rows a session may ask a batch to hold
/// (`datafusion.execution.batch_size`, 8,192 by default): operators size
/// their buffers by it before any row comes.
pub(super) const MAX_BATCH_ROWS: usize = 1 << 20;

/// Refuses `options` (just set through `name`) when `name` is a bounded
/// option set past its bound ([`Error::LimitExceeded`]).
pub(super) fn check(name: &str, options: &ConfigOptions) -> Result<()> {
    let execution = &options.execution;
    for (option, set, most) in [
        (
            "target_partitions",
            execution.target_partitions,
            MAX_PARTITIONS,
        ),
        ("batch_size", execution.batch_size.into(), MAX_BATCH_ROWS),
    ] {
        if name == format!("datafusion.execution.{option}") && set > most {
            return Err(Error::LimitExceeded(format!(
                "SET {name}: {set} is more than {most}, the most a session may set"
            )));
        }
    }
    Ok(())
}
