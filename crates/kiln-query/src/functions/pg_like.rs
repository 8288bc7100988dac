//! `kiln_like_escape(pattern, escape)`: a LIKE pattern written with another
//! escape character than the backslash, rewritten for the backslash as it
//! is evaluated. [`crate::shape::postgres`] puts it around a pattern that
//! is not a literal (a bound parameter: SQLAlchemy's `get_schema_names`
//! sends `NOT LIKE $1 ESCAPE '/'`), since DataFusion's LIKE takes only the
//! backslash.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::shape::postgres::{LIKE_ESCAPE, escape_with_backslash};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LikeEscape {
    signature: Signature,
}

impl Default for LikeEscape {
    fn default() -> Self {
        Self {
            signature: Signature::exact(
                vec![DataType::Utf8, DataType::Utf8],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for LikeEscape {
    fn name(&self) -> &str {
        LIKE_ESCAPE
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let escape = match &args.args[1] {
            ColumnarValue::Scalar(s) => match s
                .try_as_str()
                .flatten()
                .map(|e| e.chars().collect::<Vec<_>>())
            {
                Some(c) if c.len() == 1 => c[0],
                _ => return exec_err!("LIKE ... ESCAPE takes one character"),
            },
            ColumnarValue::Array(_) => return exec_err!("LIKE ... ESCAPE takes a constant"),
        };
        super::map_text(&args.args[0], |p| escape_with_backslash(p, escape))
    }
}
