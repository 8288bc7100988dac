//! ClickHouse-style funnel aggregates.
//!
//! - `retention(c1, ..., cN)` → `LIST<BOOLEAN>` of N elements: element 1 is
//!   "some row satisfied c1", element k is "some row satisfied c1 and some
//!   row satisfied ck". State: one bit per condition.
//! - `window_funnel(window, ts, c1, ..., cN)` → `INT`: the length of the
//!   longest chain c1, c2, ... of events in time order whose events all fall
//!   within `window` of the chain's first event (ClickHouse default mode).
//!   For `TIMESTAMP` columns `window` is in seconds, otherwise in the unit of
//!   `ts`. State: the window and the list of (ts, condition) events.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, TimeUnit, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use super::{check_arity, coerce_bool};

/// Most conditions `retention` takes (one bit each in the state).
const MAX_RETENTION_CONDS: usize = 64;
/// Most conditions `window_funnel` takes (one byte each per event).
const MAX_FUNNEL_CONDS: usize = 255;

/// Calls `f(row, cond)` for every row where boolean condition `cond` is true.
fn for_each_true(conds: &[ArrayRef], mut f: impl FnMut(usize, usize)) {
    for (j, c) in conds.iter().enumerate() {
        if c.data_type() != &DataType::Boolean {
            continue; // a NULL literal: never true
        }
        let c = c.as_boolean();
        for row in 0..c.len() {
            if c.is_valid(row) && c.value(row) {
                f(row, j);
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Retention {
    signature: Signature,
}

impl Retention {
    pub fn udaf() -> AggregateUDF {
        super::udaf(Self {
            signature: Signature::user_defined(Volatility::Immutable),
        })
    }
}

impl AggregateUDFImpl for Retention {
    fn name(&self) -> &str {
        "retention"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), args, 1, MAX_RETENTION_CONDS)?;
        args.iter().map(|t| coerce_bool(self.name(), t)).collect()
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::new_list(DataType::Boolean, true))
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let name = format_state_name(args.name, "mask");
        Ok(vec![Arc::new(Field::new(name, DataType::UInt64, true))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(RetentionAccumulator {
            conds: args.exprs.len(),
            mask: 0,
        }))
    }
}

#[derive(Debug)]
struct RetentionAccumulator {
    conds: usize,
    mask: u64,
}

impl Accumulator for RetentionAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let mask = &mut self.mask;
        for_each_true(values, |_, j| *mask |= 1 << j);
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for m in states[0].as_primitive::<UInt64Type>().iter().flatten() {
            self.mask |= m;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::UInt64(Some(self.mask))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let first = self.mask & 1 == 1;
        let values: Vec<_> = (0..self.conds)
            .map(|k| ScalarValue::Boolean(Some(first && self.mask & (1 << k) != 0)))
            .collect();
        Ok(ScalarValue::List(ScalarValue::new_list_nullable(
            &values,
            &DataType::Boolean,
        )))
    }

    fn size(&self) -> usize {
        size_of::<Self>()
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WindowFunnel {
    signature: Signature,
}

impl WindowFunnel {
    pub fn udaf() -> AggregateUDF {
        super::udaf(Self {
            signature: Signature::user_defined(Volatility::Immutable),
        })
    }
}

/// Units of a `ts` column per second of `window` (1 for non-timestamps).
fn units_per_window_unit(ts: &DataType) -> i64 {
    match ts {
        DataType::Timestamp(TimeUnit::Second, _) => 1,
        DataType::Timestamp(TimeUnit::Millisecond, _) => 1_000,
        DataType::Timestamp(TimeUnit::Microsecond, _) => 1_000_000,
        DataType::Timestamp(TimeUnit::Nanosecond, _) => 1_000_000_000,
        _ => 1,
    }
}

impl AggregateUDFImpl for WindowFunnel {
    fn name(&self) -> &str {
        "window_funnel"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let name = self.name();
        check_arity(name, args, 3, MAX_FUNNEL_CONDS + 2)?;
        if !args[0].is_integer() {
            return plan_err!("{name}: window must be an integer, got {}", args[0]);
        }
        let ts = match &args[1] {
            t @ DataType::Timestamp(_, _) => t.clone(),
            t if t.is_integer() || matches!(t, DataType::Date32) => DataType::Int64,
            t => return plan_err!("{name}: ts must be a TIMESTAMP or an integer, got {t}"),
        };
        let mut out = vec![DataType::Int64, ts];
        for t in &args[2..] {
            out.push(coerce_bool(name, t)?);
        }
        Ok(out)
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format_state_name(args.name, "window"),
                DataType::Int64,
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "events"),
                DataType::Binary,
                true,
            )),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let scale = units_per_window_unit(args.expr_fields[1].data_type());
        Ok(Box::new(FunnelAccumulator {
            conds: args.exprs.len() - 2,
            scale,
            window: None,
            events: vec![],
        }))
    }
}

#[derive(Debug)]
struct FunnelAccumulator {
    conds: usize,
    /// `ts` units per unit of the `window` argument.
    scale: i64,
    /// The window in `ts` units, once seen.
    window: Option<i64>,
    /// (ts, condition index) of every satisfied condition.
    events: Vec<(i64, u8)>,
}

const EVENT_BYTES: usize = 9;

impl FunnelAccumulator {
    fn set_window(&mut self, w: i64) -> Result<()> {
        match self.window {
            Some(old) if old != w => exec_err!("window_funnel: window must be a constant"),
            _ => {
                self.window = Some(w);
                Ok(())
            }
        }
    }
}

impl Accumulator for FunnelAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let windows = values[0].as_primitive::<Int64Type>();
        if let Some(w) = windows.iter().flatten().next() {
            if w < 0 {
                return exec_err!("window_funnel: window must be >= 0, got {w}");
            }
            let Some(w) = w.checked_mul(self.scale) else {
                return exec_err!("window_funnel: window {w} is too large");
            };
            self.set_window(w)?;
        } else if windows.null_count() > 0 {
            return exec_err!("window_funnel: window must not be NULL");
        }
        let ts = cast(&values[1], &DataType::Int64)?;
        let ts = ts.as_primitive::<Int64Type>();
        let events = &mut self.events;
        for_each_true(&values[2..], |row, j| {
            if ts.is_valid(row) {
                events.push((ts.value(row), j as u8));
            }
        });
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for w in states[0].as_primitive::<Int64Type>().iter().flatten() {
            self.set_window(w)?;
        }
        for bytes in states[1].as_binary::<i32>().iter().flatten() {
            if bytes.len() % EVENT_BYTES != 0 {
                return exec_err!("window_funnel: corrupt partial state");
            }
            for e in bytes.chunks_exact(EVENT_BYTES) {
                let ts = i64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
                self.events.push((ts, e[8]));
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let mut bytes = Vec::with_capacity(self.events.len() * EVENT_BYTES);
        for (ts, j) in &self.events {
            bytes.extend_from_slice(&ts.to_le_bytes());
            bytes.push(*j);
        }
        Ok(vec![
            ScalarValue::Int64(self.window),
            ScalarValue::Binary(Some(bytes)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let level = funnel_level(&mut self.events, self.window.unwrap_or(0), self.conds);
        Ok(ScalarValue::Int32(Some(level as i32)))
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.events.capacity() * size_of::<(i64, u8)>()
    }
}

/// ClickHouse's `windowFunnel` default mode over `events` (sorted here by
/// time, then condition): `start[k]` is the first-event time of a chain
/// that has reached level k+1.
pub(crate) fn funnel_level(events: &mut [(i64, u8)], window: i64, conds: usize) -> usize {
    if events.is_empty() {
        return 0;
    }
    if conds == 1 {
        return 1;
    }
    events.sort_unstable();
    let mut start: Vec<Option<i64>> = vec![None; conds];
    for &(ts, j) in events.iter() {
        let j = j as usize;
        if j == 0 {
            start[0] = Some(ts);
        } else if let Some(first) = start[j - 1]
            && ts.saturating_sub(first) <= window
        {
            start[j] = Some(first);
            if j + 1 == conds {
                return conds;
            }
        }
    }
    start.iter().rposition(Option::is_some).map_or(0, |k| k + 1)
}
