//! `pg_cancel_backend(pid)`: cancels the running queries of PostgreSQL
//! session `pid` (the `session` column of `system.queries`), as
//! PostgreSQL's function of that name does, for tools that stop a query
//! that way rather than with a CancelRequest. True if a query was
//! cancelled. `KILL QUERY id` stops one query by its id.

use std::sync::Arc;

/// The function's name (its calls need an admin when logins are on).
pub const PG_CANCEL_BACKEND: &str = "pg_cancel_backend";

use arrow::array::{Array, BooleanArray, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};

use crate::admission::QueryRegistry;

#[derive(Debug)]
pub struct CancelBackend {
    queries: Arc<QueryRegistry>,
    signature: Signature,
}

impl CancelBackend {
    pub fn new(queries: Arc<QueryRegistry>) -> Self {
        Self {
            queries,
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Int64]),
                    TypeSignature::Exact(vec![DataType::Int32]),
                ],
                Volatility::Volatile,
            ),
        }
    }

    fn cancel(&self, pid: Option<i64>) -> Option<bool> {
        let pid = i32::try_from(pid?).ok()?;
        Some(self.queries.cancel_session(pid) > 0)
    }
}

impl PartialEq for CancelBackend {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.queries, &other.queries)
    }
}

impl Eq for CancelBackend {}

impl std::hash::Hash for CancelBackend {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.queries).hash(state);
    }
}

impl ScalarUDFImpl for CancelBackend {
    fn name(&self) -> &str {
        PG_CANCEL_BACKEND
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [pid] = args.args.as_slice() else {
            return exec_err!("pg_cancel_backend(pid) takes one argument");
        };
        match pid {
            ColumnarValue::Scalar(s) => {
                let pid = match s.cast_to(&DataType::Int64)? {
                    ScalarValue::Int64(v) => v,
                    _ => None,
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Boolean(
                    self.cancel(pid),
                )))
            }
            ColumnarValue::Array(a) => {
                let pids = cast(a, &DataType::Int64)?;
                let pids = pids
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("cast to Int64");
                let out: BooleanArray = pids.iter().map(|p| self.cancel(p)).collect();
                Ok(ColumnarValue::Array(Arc::new(out)))
            }
        }
    }
}
