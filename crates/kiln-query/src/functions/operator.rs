//! DataFusion's binary operators as scalar functions ([`OperatorFn`]): the
//! same kernels, types and NULL handling, called where Kiln must look at a
//! call before it runs (the size of a string `||`'s results,
//! [`super::sized::string_concat`]).
//!
//! Why: an operator is not a function, and only a function can be wrapped
//! (a function's guards, [`super::sized`], keep its name, signature and
//! types and check its arguments before it runs).

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Operator, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};

/// A binary operator called as a function of its two operands.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct OperatorFn {
    op: Operator,
    name: String,
    signature: Signature,
}

impl OperatorFn {
    pub fn new(op: Operator) -> Self {
        Self {
            op,
            name: op.to_string(),
            signature: Signature::any(2, Volatility::Immutable),
        }
    }

    /// The operator over `l` and `r`, constants kept constants.
    fn operator(&self, l: Arc<dyn PhysicalExpr>, r: Arc<dyn PhysicalExpr>) -> BinaryExpr {
        BinaryExpr::new(l, self.op, r)
    }
}

impl ScalarUDFImpl for OperatorFn {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let fields: Vec<Field> = arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
            .collect();
        let column = |i: usize| Arc::new(Column::new(&format!("c{i}"), i)) as _;
        self.operator(column(0), column(1))
            .data_type(&Schema::new(fields))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        // The operator over a batch of the operands that are arrays.
        let mut fields = vec![];
        let mut columns = vec![];
        let mut side = |value: ColumnarValue| -> Arc<dyn PhysicalExpr> {
            match value {
                ColumnarValue::Scalar(v) => Arc::new(Literal::new(v)),
                ColumnarValue::Array(a) => {
                    let name = format!("c{}", columns.len());
                    fields.push(Field::new(&name, a.data_type().clone(), true));
                    columns.push(a);
                    Arc::new(Column::new(&name, columns.len() - 1))
                }
            }
        };
        let [l, r]: [ColumnarValue; 2] = args
            .args
            .try_into()
            .map_err(|_| DataFusionError::Internal(format!("{} takes two operands", self.name)))?;
        let op = self.operator(side(l), side(r));
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch =
            RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)?;
        match op.evaluate(&batch)? {
            ColumnarValue::Array(a) if scalar => {
                Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&a, 0)?))
            }
            out => Ok(out),
        }
    }
}
