//! PostgreSQL's `format(formatstr, args...)`: `%s`, `%I`, `%L`, `%%`,
//! positions and widths, every argument printed as PostgreSQL prints it
//! (timestamps `2026-01-01 00:00:00`, booleans `t`/`f`). Metabase's sync
//! builds each column's type name with it, one row per column.
//!
//! The format grammar is datafusion-pg-functions' `format`, which takes
//! scalar arguments only and prints some types differently; this wrapper
//! prints each argument as text first and calls it once per row (or once,
//! when every argument is a constant).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{DataType, Field};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// `format` over datafusion-pg-functions' own.
pub fn udf() -> ScalarUDF {
    super::udf(PgTextFormat {
        inner: datafusion_pg_functions::string::format::create_format_udf(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTextFormat {
    inner: ScalarUDF,
}

/// Each value of `a` as PostgreSQL's text output writes it (None: NULL).
fn as_text(a: &ArrayRef) -> Result<Vec<Option<String>>> {
    let rows = 0..a.len();
    Ok(match a.data_type() {
        DataType::Null => rows.map(|_| None).collect(),
        DataType::Boolean => {
            let b = a.as_boolean();
            rows.map(|i| {
                b.is_valid(i)
                    .then(|| if b.value(i) { "t" } else { "f" }.to_string())
            })
            .collect()
        }
        _ => {
            let options = FormatOptions::default()
                .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.f"))
                .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.f%:z"))
                .with_date_format(Some("%Y-%m-%d"));
            let f = ArrayFormatter::try_new(a.as_ref(), &options)?;
            rows.map(|i| a.is_valid(i).then(|| f.value(i).to_string()))
                .collect()
        }
    })
}

impl PgTextFormat {
    /// The inner function on one row's texts.
    fn row(
        &self,
        args: &ScalarFunctionArgs,
        texts: &[Vec<Option<String>>],
        row: usize,
    ) -> Result<Option<String>> {
        let values: Vec<ColumnarValue> = texts
            .iter()
            .map(|t| ColumnarValue::Scalar(ScalarValue::Utf8(t[row].clone())))
            .collect();
        let fields = values
            .iter()
            .map(|_| Arc::new(Field::new("a", DataType::Utf8, true)))
            .collect();
        let out = self.inner.invoke_with_args(ScalarFunctionArgs {
            args: values,
            arg_fields: fields,
            number_rows: 1,
            return_field: args.return_field.clone(),
            config_options: args.config_options.clone(),
        })?;
        Ok(match out {
            ColumnarValue::Scalar(ScalarValue::Utf8(s)) => s,
            ColumnarValue::Scalar(other) => (!other.is_null()).then(|| other.to_string()),
            ColumnarValue::Array(a) => as_text(&a)?.into_iter().next().flatten(),
        })
    }
}

impl ScalarUDFImpl for PgTextFormat {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let constant = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if constant { 1 } else { args.number_rows };
        let texts = args
            .args
            .iter()
            .map(|a| as_text(&a.to_array(rows)?))
            .collect::<Result<Vec<_>>>()?;
        if constant {
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
                self.row(&args, &texts, 0)?,
            )));
        }
        let mut out = StringBuilder::with_capacity(rows, rows * 16);
        for row in 0..rows {
            out.append_option(self.row(&args, &texts, row)?);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}
